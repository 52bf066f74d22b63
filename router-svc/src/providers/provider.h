/* provider: what router-svc needs to know to send an attempt to one provider family, behind one
 * interface, one file per family (providers/<name>.c) and a row in the table (registry.c; the
 * named OpenAI-compatible services are rows of openai_compat.c).
 *
 * At load (config.c) a deployment's provider is found by its litellm_params.model prefix and its
 * base URL and key are resolved once:
 *   - base: api_base, else the first of the provider's base variables that is set (LiteLLM's
 *     names, e.g. GROQ_API_BASE), else the provider's default base; a provider without a default
 *     (hosted_vllm) needs one of the first two. RT_PROVIDER_BASE_V1 appends "/v1" to a base
 *     without it (Ollama's OpenAI-compatible API lives under /v1; LiteLLM's ollama examples give
 *     the server's root).
 *   - key: api_key, else the first of the provider's key variables that is set (e.g.
 *     GROQ_API_KEY) — but only when the base is the provider's own (its default or its base
 *     variable), or the provider is self-hosted (RT_PROVIDER_SELF_HOSTED: the variables name the
 *     user's own server). A key from the environment is never sent to an api_base written in the
 *     config: that is how a key meant for one service would reach another host.
 *   - a prefix no row names is a configuration error unless api_base is given (then the
 *     deployment is a generic OpenAI-compatible server, with no key from the environment); a
 *     prefix LiteLLM knows for an API Tollgate does not speak is always an error.
 *
 * For an attempt the call asks the deployment's provider:
 *   - wire: which API the provider is spoken to for the client's API, and the translation
 *     between the two (translate.h) — or that it cannot serve that API;
 *   - url: the attempt's URL from the deployment's base;
 *   - headers: authentication and protocol headers;
 *   - classify: the error class of an answer that is not a success (rate limit, context window,
 *     content policy, ...): the generic rules (rt_router_classify) unless the family has its
 *     own signals.
 * Answers and streams come back in the wire API's dialect: usage is read by that dialect
 * (usage.h) and translated back to the client's by the direction wire chose. A family with a
 * dialect of its own adds its translators and usage reader next to it.
 *
 * Every function is pure (no I/O, no allocation, no clock), any thread. */
#ifndef RT_PROVIDER_H
#define RT_PROVIDER_H

#include <stddef.h>

#include "api.h"
#include "config.h"
#include "router.h"
#include "translate.h"

#define RT_PROVIDER_HEADERS_MAX 4                   /* headers a provider adds to an attempt */
#define RT_PROVIDER_HEADER_CAP (RT_SECRET_CAP + 64) /* one "Name: value" line, bytes */
#define RT_PROVIDER_ENV_MAX 4                       /* names in key_env / base_env */

/* struct rt_provider.flags */
#define RT_PROVIDER_SELF_HOSTED                                                                    \
    1u                         /* the key variables name the user's own server: read them          \
                                * whatever the base */
#define RT_PROVIDER_BASE_V1 2u /* the OpenAI-compatible API is under "/v1" of the base */

/* How the provider is spoken to for one client API. */
struct rt_wire {
    enum rt_api api;           /* the provider's API for this request */
    enum rt_translate_dir dir; /* RT_TRANSLATE_NONE when it is the client's own */
};

struct rt_provider {
    const char *name;         /* the litellm_params.model prefix ("openai", "groq", ...) */
    const char *default_base; /* base of a deployment that gives none; NULL: api_base (or a
                               * base variable) is required */
    /* environment variables (LiteLLM's names), NULL-terminated, at most RT_PROVIDER_ENV_MAX;
     * NULL: none */
    const char *const *key_env;  /* the key when api_key is absent (rules above) */
    const char *const *base_env; /* the base when api_base is absent */
    unsigned flags;              /* RT_PROVIDER_* */

    /* wire: how to speak to the provider for the client API. Returns 0, or TG_EINVAL when the
     * provider cannot serve that API (the attempt is a 400 naming the deployment). */
    int (*wire)(enum rt_api client, struct rt_wire *out);

    /* url: the attempt's URL for the wire API into out (cap bytes, cut beyond). */
    void (*url)(const struct rt_deployment_conf *dep, enum rt_api wire, char *out, size_t cap);

    /* headers: the provider's "Name: value" lines into hdr[0..RT_PROVIDER_HEADERS_MAX);
     * returns how many. Secrets (api_key) go only here. */
    int (*headers)(const struct rt_deployment_conf *dep, char hdr[][RT_PROVIDER_HEADER_CAP]);

    /* classify: the class of an answer with this HTTP status and body (may be NULL); NULL in
     * the table means rt_router_classify. */
    enum rt_error_class (*classify)(int http_status, const char *body, size_t len);
};

/* rt_provider_find: the family of a litellm_params.model prefix, NULL when none is known by that
 * name. Static storage. */
const struct rt_provider *rt_provider_find(const char *name);

/* rt_provider_unsupported: 1 when name is a provider LiteLLM knows whose API Tollgate does not
 * speak (a config naming it is refused rather than sent an OpenAI request with its key). */
int rt_provider_unsupported(const char *name);

/* rt_provider_count / rt_provider_at: every family in the table, for listings and tests.
 * Static storage; i < rt_provider_count(). */
size_t rt_provider_count(void);
const struct rt_provider *rt_provider_at(size_t i);

/* rt_provider_base: the deployment's base URL without trailing slashes (config.c resolved it;
 * a hand-made deployment without one gets p's default, "" when p has none); its length in
 * *len. */
const char *rt_provider_base(const struct rt_deployment_conf *dep, const struct rt_provider *p,
                             size_t *len);

/* The families (one file each) and the named OpenAI-compatible providers (openai_compat.c). */
extern const struct rt_provider rt_provider_openai;
extern const struct rt_provider rt_provider_anthropic;
extern const struct rt_provider rt_provider_compat[];
extern const size_t rt_provider_compat_count;

/* OpenAI's functions, shared by every OpenAI-compatible row (openai.c). */
int rt_openai_wire(enum rt_api client, struct rt_wire *out);
void rt_openai_url(const struct rt_deployment_conf *dep, enum rt_api wire, char *out, size_t cap);
int rt_openai_headers(const struct rt_deployment_conf *dep, char hdr[][RT_PROVIDER_HEADER_CAP]);

#endif
