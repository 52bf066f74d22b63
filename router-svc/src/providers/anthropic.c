/* anthropic: Anthropic's Messages API. /v1/messages is spoken as sent; a chat completions
 * request is translated to a messages request and its answer back, a responses request goes
 * through the chat translation (responses -> chat -> messages, and back); embeddings are not
 * served. x-api-key: <api_key>, anthropic-version (the client's, else 2023-06-01) and the
 * client's anthropic-beta. */
#include "providers/provider.h"

#include <stdio.h>
#include <string.h>

#include "tg_err.h"

#define ANTHROPIC_VERSION "2023-06-01"

int rt_anthropic_wire(const struct rt_deployment_conf *dep, enum rt_api client, struct rt_wire *out)
{
    out->api = RT_API_MESSAGES;
    out->dialect = NULL;
    out->responses = 0;
    if (client == RT_API_RESPONSES)
        return rt_wire_responses_via_chat(rt_anthropic_wire, dep, out);
    if (client == RT_API_MESSAGES)
        out->dir = RT_TRANSLATE_NONE;
    else if (client == RT_API_CHAT)
        out->dir = RT_TRANSLATE_MESSAGES_TO_CHAT;
    else
        return TG_EINVAL;
    return 0;
}

static void anthropic_url(const struct rt_provider_attempt *a, char *out, size_t cap)
{
    size_t bl;
    const char *base = rt_provider_base(a->dep, &rt_provider_anthropic, &bl);

    /* an api_base given with its /v1 (LiteLLM's examples have both forms), or as the whole
     * endpoint (LiteLLM's ANTHROPIC_API_BASE examples) */
    const char *tail = a->count_tokens ? "/count_tokens" : "";

    if (bl >= 9 && strncmp(base + bl - 9, "/messages", 9) == 0)
        snprintf(out, cap, "%.*s%s", (int)bl, base, tail);
    else
        snprintf(out, cap, "%.*s%s%s", (int)bl, base,
                 bl >= 3 && strncmp(base + bl - 3, "/v1", 3) == 0 ? "/messages" : "/v1/messages",
                 tail);
}

static int anthropic_headers(const struct rt_provider_attempt *a, const char *url,
                             char hdr[][RT_PROVIDER_HEADER_CAP])
{
    const struct rt_deployment_conf *dep = a->dep;
    int n = 0;

    (void)url;
    if (dep->api_key[0] != '\0')
        snprintf(hdr[n++], RT_PROVIDER_HEADER_CAP, "x-api-key: %s", dep->api_key);
    /* the client's version and beta features as it sent them (Anthropic's SDKs send both) */
    snprintf(hdr[n++], RT_PROVIDER_HEADER_CAP, "anthropic-version: %s",
             a->anthropic_version != NULL && a->anthropic_version[0] != '\0' ? a->anthropic_version
                                                                            : ANTHROPIC_VERSION);
    if (a->anthropic_beta != NULL && a->anthropic_beta[0] != '\0')
        snprintf(hdr[n++], RT_PROVIDER_HEADER_CAP, "anthropic-beta: %s", a->anthropic_beta);
    return n;
}

/* Variables: LiteLLM's Anthropic handler reads ANTHROPIC_API_KEY, and ANTHROPIC_API_BASE then
 * ANTHROPIC_BASE_URL for the base (litellm/main.py, completion(), the "anthropic" branch). */
const struct rt_provider rt_provider_anthropic = {
    .name = "anthropic",
    .default_base = "https://api.anthropic.com",
    .key_env = (const char *const[]){"ANTHROPIC_API_KEY", NULL},
    .base_env = (const char *const[]){"ANTHROPIC_API_BASE", "ANTHROPIC_BASE_URL", NULL},
    .flags = 0,
    .wire = rt_anthropic_wire,
    .url = anthropic_url,
    .headers = anthropic_headers,
    .classify = NULL,
};
