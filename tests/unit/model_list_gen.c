#include "model_list_gen.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

char *model_list_gen(int n, int per_group, const char *params, const char *tail, size_t *len)
{
    size_t cap = (size_t)n * (112 + strlen(params)) + strlen(tail) + 32, used = 0;
    char *yaml = malloc(cap);

    assert_non_null(yaml);
    used += (size_t)snprintf(yaml + used, cap - used, "model_list:\n");
    for (int i = 0; i < n; i++)
        used += (size_t)snprintf(yaml + used, cap - used,
                                 "  - {model_name: g-%d, litellm_params: {model: openai/m%d%s%s}, "
                                 "model_info: {id: d-%d}}\n",
                                 i / per_group, i, params[0] != '\0' ? ", " : "", params, i);
    used += (size_t)snprintf(yaml + used, cap - used, "%s", tail);
    assert_true(used < cap);
    *len = used;
    return yaml;
}
