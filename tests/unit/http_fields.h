/* http_fields: header lookup in raw HTTP header lines, for the tests that read requests or
 * responses off the wire (router_upstream_test, router_hsrv_test). Header-only. */
#ifndef TG_TEST_HTTP_FIELDS_H
#define TG_TEST_HTTP_FIELDS_H

#include <stdio.h>
#include <string.h>
#include <strings.h>

/* Count of the lines called name (case-insensitive) in lines ("Name: value\r\n"..., NUL-ended;
 * it stops at an empty line or the end); the first one's value, blanks trimmed, into val. */
static inline int http_field_lookup(const char *lines, const char *name, char *val, size_t cap)
{
    size_t nl = strlen(name);
    const char *p = lines;
    int count = 0;

    if (val != NULL && cap > 0)
        val[0] = '\0';
    if (p == NULL)
        return 0;
    while (*p != '\0') {
        const char *e = strstr(p, "\r\n");
        size_t ll = e != NULL ? (size_t)(e - p) : strlen(p);

        if (ll > nl && p[nl] == ':' && strncasecmp(p, name, nl) == 0) {
            const char *v = p + nl + 1;
            size_t vl = ll - nl - 1;

            while (vl > 0 && (*v == ' ' || *v == '\t')) {
                v++;
                vl--;
            }
            while (vl > 0 && (v[vl - 1] == ' ' || v[vl - 1] == '\t'))
                vl--;
            if (count == 0 && val != NULL)
                snprintf(val, cap, "%.*s", (int)vl, v);
            count++;
        }
        if (e == NULL)
            break;
        p = e + 2;
    }
    return count;
}

#endif
