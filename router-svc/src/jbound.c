#include "jbound.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "tg_err.h"

/* Nesting depth and values (array elements and object members, the containers themselves
 * included) of text[0..len), counted without validating it. 0 when within both bounds, else
 * TG_ERANGE with the reason in why. */
static int json_bounds(const char *text, size_t len, unsigned max_depth, unsigned max_elements,
                       char *why, size_t whycap)
{
    unsigned depth = 0;
    uint64_t values = 1; /* the top-level value */

    for (size_t i = 0; i < len; i++) {
        switch (text[i]) {
        case '"':
            for (i++; i < len && text[i] != '"'; i++) {
                if (text[i] == '\\')
                    i++;
            }
            break;
        case '{':
        case '[':
            if (++depth > max_depth) {
                snprintf(why, whycap, "JSON nested deeper than %u levels", max_depth);
                return TG_ERANGE;
            }
            break;
        case '}':
        case ']':
            if (depth > 0)
                depth--;
            break;
        case ',':
            if (++values > max_elements) {
                snprintf(why, whycap, "JSON with more than %u values", max_elements);
                return TG_ERANGE;
            }
            break;
        default:
            break;
        }
    }
    return 0;
}

json_t *rt_json_load_bounded(const char *text, size_t len, unsigned max_depth,
                             unsigned max_elements, json_error_t *jerr)
{
    char why[96];

    if (json_bounds(text, len, max_depth, max_elements, why, sizeof(why)) != 0) {
        memset(jerr, 0, sizeof(*jerr));
        jerr->line = -1;
        jerr->column = -1;
        jerr->position = -1;
        snprintf(jerr->text, sizeof(jerr->text), "%s", why);
        return NULL;
    }
    return json_loadb(text, len, 0, jerr);
}
