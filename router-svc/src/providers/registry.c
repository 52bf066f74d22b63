/* registry: the provider families by their litellm_params.model prefix. */
#include "providers/provider.h"

#include <string.h>

static const struct rt_provider *const providers[] = {
    &rt_provider_openai,
    &rt_provider_anthropic,
};

const struct rt_provider *rt_provider_find(const char *name)
{
    for (size_t i = 0; i < sizeof(providers) / sizeof(providers[0]); i++) {
        if (strcmp(providers[i]->name, name) == 0)
            return providers[i];
    }
    return NULL;
}

const struct rt_provider *rt_provider_default(void)
{
    return &rt_provider_openai;
}

const char *rt_provider_base(const struct rt_deployment_conf *dep, const struct rt_provider *p,
                             size_t *len)
{
    const char *base = dep->api_base[0] != '\0' ? dep->api_base : p->default_base;
    size_t n = strlen(base);

    while (n > 0 && base[n - 1] == '/')
        n--;
    *len = n;
    return base;
}
