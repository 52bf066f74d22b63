/* openai: OpenAI and every OpenAI-compatible server (the named ones are rows of
 * openai_compat.c sharing these functions). Chat completions, embeddings and responses are
 * spoken as the client sent them (responses through the chat translation for a row flagged
 * RT_PROVIDER_NO_RESPONSES, unless the deployment's model_info.supported_endpoints lists
 * /v1/responses); an Anthropic /v1/messages request is translated to chat
 * completions and its answer back. Authorization: Bearer <api_key>. */
#include "providers/provider.h"

#include <stdio.h>

#include "tg_err.h"
#include "tg_str.h"

int rt_openai_wire(const struct rt_deployment_conf *dep, enum rt_api client, struct rt_wire *out)
{
    out->dialect = NULL;
    out->responses = 0;
    if (client == RT_API_RESPONSES && dep->prov != NULL &&
        (dep->prov->flags & RT_PROVIDER_NO_RESPONSES) && !dep->responses_native)
        return rt_wire_responses_via_chat(rt_openai_wire, dep, out);
    if (client == RT_API_MESSAGES) {
        out->api = RT_API_CHAT;
        out->dir = RT_TRANSLATE_CHAT_TO_MESSAGES;
    } else {
        out->api = client;
        out->dir = RT_TRANSLATE_NONE;
    }
    return 0;
}

int rt_wire_responses_via_chat(int (*wire)(const struct rt_deployment_conf *dep,
                                           enum rt_api client, struct rt_wire *out),
                               const struct rt_deployment_conf *dep, struct rt_wire *out)
{
    int rc = wire(dep, RT_API_CHAT, out);

    if (rc == 0)
        out->responses = 1;
    return rc;
}

void rt_openai_url(const struct rt_provider_attempt *a, char *out, size_t cap)
{
    const struct rt_deployment_conf *dep = a->dep;
    size_t bl;
    const char *base =
        rt_provider_base(dep, dep->prov != NULL ? dep->prov : &rt_provider_openai, &bl);
    const char *path;

    switch (a->wire) {
    case RT_API_EMBEDDINGS:
        path = "/embeddings";
        break;
    case RT_API_RESPONSES:
        path = "/responses";
        break;
    default:
        path = "/chat/completions";
        break;
    }
    if (bl > cap - 1)
        bl = cap - 1;
    memcpy(out, base, bl);
    tg_strcpy_cap(out + bl, cap - bl, path);
}

int rt_openai_headers(const struct rt_provider_attempt *a, const char *url,
                      char hdr[][RT_PROVIDER_HEADER_CAP])
{
    (void)url;
    if (a->dep->api_key[0] == '\0')
        return 0;
    memcpy(hdr[0], "Authorization: Bearer ", 22);
    tg_strcpy_cap(hdr[0] + 22, RT_PROVIDER_HEADER_CAP - 22, a->dep->api_key);
    return 1;
}

/* Variables: LiteLLM's OpenAI handler reads OPENAI_API_KEY, and OPENAI_BASE_URL then
 * OPENAI_API_BASE for the base (litellm/main.py, completion(), the "openai" branch). */
const struct rt_provider rt_provider_openai = {
    .name = "openai",
    .default_base = "https://api.openai.com/v1",
    .key_env = (const char *const[]){"OPENAI_API_KEY", NULL},
    .base_env = (const char *const[]){"OPENAI_BASE_URL", "OPENAI_API_BASE", NULL},
    .flags = 0,
    .wire = rt_openai_wire,
    .url = rt_openai_url,
    .headers = rt_openai_headers,
    .classify = NULL,
};
