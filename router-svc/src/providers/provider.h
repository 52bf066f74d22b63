/* provider: what router-svc needs to know to send an attempt to one provider family, behind one
 * interface, one file per family (providers/<name>.c) and a row in the table (registry.c).
 *
 * For an attempt the call asks the deployment's provider:
 *   - wire: which API the provider is spoken to for the client's API, and the translation
 *     between the two (translate.h) — or that it cannot serve that API;
 *   - url: the attempt's URL from the deployment's api_base (or the provider's default);
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

/* How the provider is spoken to for one client API. */
struct rt_wire {
    enum rt_api api;           /* the provider's API for this request */
    enum rt_translate_dir dir; /* RT_TRANSLATE_NONE when it is the client's own */
};

struct rt_provider {
    const char *name;         /* the litellm_params.model prefix ("openai", "anthropic") */
    const char *default_base; /* api_base of a deployment that gives none */

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

/* rt_provider_default: the family of a prefix no row names: OpenAI-compatible. */
const struct rt_provider *rt_provider_default(void);

/* rt_provider_base: dep's api_base without trailing slashes, or the provider's default; its
 * length in *len. */
const char *rt_provider_base(const struct rt_deployment_conf *dep, const struct rt_provider *p,
                             size_t *len);

/* The families (one file each). */
extern const struct rt_provider rt_provider_openai;
extern const struct rt_provider rt_provider_anthropic;

#endif
