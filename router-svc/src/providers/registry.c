/* registry: the provider families by their litellm_params.model prefix: the families with a file
 * of their own, then the named OpenAI-compatible rows (openai_compat.c). */
#include "providers/provider.h"

#include <string.h>

static const struct rt_provider *const families[] = {
    &rt_provider_openai, &rt_provider_anthropic, &rt_provider_azure,   &rt_provider_azure_ai,
    &rt_provider_gemini, &rt_provider_vertex,    &rt_provider_bedrock,
};
#define N_FAMILIES (sizeof(families) / sizeof(families[0]))

/* Prefixes LiteLLM routes to an API that is not OpenAI's and Tollgate does not speak: a
 * deployment naming one is refused at load, with or without api_base, rather than sent an
 * OpenAI-shaped request carrying its credentials (names from LiteLLM's provider list,
 * litellm/types/utils.py, LlmProviders). */
static const char *const unsupported[] = {
    "azure_text", "sagemaker", "sagemaker_chat", "cohere", "cohere_chat", "huggingface",
    "replicate",  "watsonx",   "cloudflare",     "voyage", "palm",        "vertex_ai_beta",
};

size_t rt_provider_count(void)
{
    return N_FAMILIES + rt_provider_compat_count;
}

const struct rt_provider *rt_provider_at(size_t i)
{
    if (i < N_FAMILIES)
        return families[i];
    i -= N_FAMILIES;
    return i < rt_provider_compat_count ? &rt_provider_compat[i] : NULL;
}

const struct rt_provider *rt_provider_find(const char *name)
{
    for (size_t i = 0; i < rt_provider_count(); i++) {
        const struct rt_provider *p = rt_provider_at(i);

        if (strcmp(p->name, name) == 0)
            return p;
    }
    return NULL;
}

int rt_provider_unsupported(const char *name)
{
    for (size_t i = 0; i < sizeof(unsupported) / sizeof(unsupported[0]); i++) {
        if (strcmp(unsupported[i], name) == 0)
            return 1;
    }
    return 0;
}

int rt_provider_needs_token(const struct rt_deployment_conf *dep)
{
    return dep->prov != NULL && dep->prov->needs_token != NULL && dep->prov->needs_token(dep);
}

const char *rt_provider_base(const struct rt_deployment_conf *dep, const struct rt_provider *p,
                             size_t *len)
{
    const char *base = dep->api_base;
    size_t n;

    if (base[0] == '\0')
        base = p != NULL && p->default_base != NULL ? p->default_base : "";
    n = strlen(base);
    while (n > 0 && base[n - 1] == '/')
        n--;
    *len = n;
    return base;
}

const char *rt_provider_segment(const char *s, const char *keep, char *out, size_t cap)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t n = 0;

    for (; *s != '\0' && n + 4 < cap; s++) {
        unsigned char ch = (unsigned char)*s;

        if ((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
            ch == '-' || ch == '.' || ch == '_' || ch == '~' ||
            (ch != '\0' && keep != NULL && strchr(keep, ch) != NULL)) {
            out[n++] = (char)ch;
        } else {
            out[n++] = '%';
            out[n++] = hex[ch >> 4];
            out[n++] = hex[ch & 15];
        }
    }
    out[n] = '\0';
    return out;
}

const struct rt_dep_cloud *rt_provider_cloud(const struct rt_deployment_conf *dep)
{
    static const struct rt_dep_cloud none; /* every field "" */

    return dep->cloud != NULL ? dep->cloud : &none;
}
