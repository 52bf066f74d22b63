#include "tg_units.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "tg_err.h"

int tg_parse_u64(const char *v, uint64_t *out)
{
    uint64_t r = 0;

    if (*v == '+')
        v++;
    if (*v == '\0')
        return TG_EINVAL;
    for (; *v != '\0'; v++) {
        if (*v < '0' || *v > '9')
            return TG_EINVAL;
        if (r > (UINT64_MAX - (uint64_t)(*v - '0')) / 10)
            return TG_ERANGE;
        r = r * 10 + (uint64_t)(*v - '0');
    }
    *out = r;
    return 0;
}

int tg_parse_decimal(const char *text, unsigned __int128 *mant, int *exp10)
{
    const char *p = text;
    unsigned __int128 m = 0;
    int e = 0, digits = 0, any = 0;

    if (p == NULL)
        return TG_EINVAL;
    if (*p == '+')
        p++;
    for (; *p >= '0' && *p <= '9'; p++) {
        any = 1;
        if (m == 0 && *p == '0')
            continue;
        if (digits >= 36)
            return TG_ERANGE;
        m = m * 10 + (unsigned)(*p - '0');
        digits++;
    }
    if (*p == '.') {
        p++;
        for (; *p >= '0' && *p <= '9'; p++) {
            any = 1;
            if (digits >= 36)
                continue; /* beyond 36 significant digits: far below a femto-USD */
            m = m * 10 + (unsigned)(*p - '0');
            if (m != 0)
                digits++;
            e--;
        }
    }
    if (!any)
        return TG_EINVAL;
    if (*p == 'e' || *p == 'E') {
        int sign = 1, x = 0, xd = 0;

        p++;
        if (*p == '+' || *p == '-') {
            sign = *p == '-' ? -1 : 1;
            p++;
        }
        for (; *p >= '0' && *p <= '9'; p++) {
            if (x < 10000)
                x = x * 10 + (*p - '0');
            xd++;
        }
        if (xd == 0)
            return TG_EINVAL;
        e += sign * x;
    }
    if (*p != '\0')
        return TG_EINVAL;
    *mant = m;
    *exp10 = e;
    return 0;
}

int tg_scale_round(unsigned __int128 m, int shift, int64_t *out)
{
    if (m == 0) {
        *out = 0;
        return 0;
    }
    if (shift >= 0) {
        for (int i = 0; i < shift; i++) {
            if (m > (unsigned __int128)INT64_MAX)
                return TG_ERANGE;
            m *= 10;
        }
    } else {
        int drop = -shift;
        unsigned __int128 rem_half;

        if (drop > 38) {
            *out = 0;
            return 0;
        }
        for (int i = 0; i < drop - 1; i++)
            m /= 10;
        rem_half = m % 10;
        m /= 10;
        if (rem_half >= 5)
            m += 1;
    }
    if (m > (unsigned __int128)INT64_MAX)
        return TG_ERANGE;
    *out = (int64_t)m;
    return 0;
}

int tg_parse_usd_fusd(const char *text, int64_t *fusd_out)
{
    unsigned __int128 m;
    int e, rc = tg_parse_decimal(text, &m, &e);

    return rc != 0 ? rc : tg_scale_round(m, e + 15, fusd_out);
}

int tg_parse_usd_nusd(const char *text, int64_t *nusd_out)
{
    unsigned __int128 m;
    int e, rc = tg_parse_decimal(text, &m, &e);

    return rc != 0 ? rc : tg_scale_round(m, e + 9, nusd_out);
}

int tg_parse_duration_s(const char *text, int64_t *seconds_out)
{
    char *end = NULL;
    long long v;
    int64_t mult = 1;

    if (text == NULL || text[0] < '0' || text[0] > '9')
        return TG_EINVAL;
    errno = 0;
    v = strtoll(text, &end, 10);
    if (errno != 0 || v < 0)
        return TG_EINVAL;
    if (strcmp(end, "") == 0 || strcmp(end, "s") == 0)
        mult = 1;
    else if (strcmp(end, "m") == 0)
        mult = 60;
    else if (strcmp(end, "h") == 0)
        mult = 3600;
    else if (strcmp(end, "d") == 0)
        mult = 86400;
    else if (strcmp(end, "w") == 0)
        mult = 7 * 86400;
    else if (strcmp(end, "mo") == 0)
        mult = 30 * 86400;
    else
        return TG_EINVAL;
    if (v > INT64_MAX / mult)
        return TG_EINVAL;
    *seconds_out = (int64_t)v * mult;
    return 0;
}
