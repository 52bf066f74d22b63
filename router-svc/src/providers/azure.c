/* azure: Azure OpenAI (azure/<deployment>) and Azure AI Foundry model inference
 * (azure_ai/<model>). Both speak OpenAI's dialect; what differs is where and how.
 *
 * Azure OpenAI (facts from learn.microsoft.com, "Azure OpenAI in Azure AI Foundry Models REST API
 * reference" and "Microsoft identity platform and the OAuth 2.0 client credentials flow"; names
 * of the parameters and variables from LiteLLM's azure handler, litellm/llms/azure/):
 *   URL   {api_base}/openai/deployments/{deployment}/chat/completions?api-version={v}
 *         .../embeddings?api-version={v}; responses: {api_base}/openai/responses?api-version={v}
 *         v: api_version, else AZURE_API_VERSION, else RT_AZURE_API_VERSION (the data-plane
 *         inference API's latest GA release, 2024-10-21; the Responses API needs a newer
 *         preview version: set api_version for it).
 *   auth  api_key (or AZURE_OPENAI_API_KEY / AZURE_API_KEY when the base is AZURE_API_BASE):
 *         "api-key: <key>"; else azure_ad_token: "Authorization: Bearer <token>"; else Microsoft
 *         Entra ID client credentials (tenant_id, client_id, client_secret): a token from
 *         {azure_authority_host}/{tenant_id}/oauth2/v2.0/token (grant_type=client_credentials,
 *         scope azure_scope, default https://cognitiveservices.azure.com/.default), kept fresh by
 *         creds.c off the request path, sent as a bearer token.
 *   errors a prompt refused by the content filter is a 400 whose error.code is "content_filter"
 *         (error.innererror.code "ResponsibleAIPolicyViolation"): content policy.
 *
 * Azure AI Foundry model inference (LiteLLM's azure_ai: AzureAIStudioConfig):
 *   URL   {api_base}/chat/completions, or {api_base}/models/chat/completions for a
 *         *.services.ai.azure.com host whose base does not name /models; embeddings the same;
 *         ?api-version={api_version} when one is given. No responses API.
 *   auth  "api-key: <key>" for *.services.ai.azure.com and *.openai.azure.com hosts, else
 *         "Authorization: Bearer <key>"; key api_key or AZURE_AI_API_KEY (base AZURE_AI_API_BASE).
 */
#include "providers/provider.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "tg_err.h"

#define RT_AZURE_API_VERSION "2024-10-21"
#define RT_AZURE_SCOPE "https://cognitiveservices.azure.com/.default"
#define RT_AZURE_AUTHORITY "https://login.microsoftonline.com"
#define AZURE_FORM_MAX_BYTES 2048

/* Entra ID client credentials are complete and nothing else authenticates the deployment. */
static int azure_uses_entra(const struct rt_deployment_conf *dep)
{
    return dep->api_key[0] == '\0' && rt_provider_cloud(dep)->azure_ad_token[0] == '\0' &&
           rt_provider_cloud(dep)->tenant_id[0] != '\0' &&
           rt_provider_cloud(dep)->client_id[0] != '\0' &&
           rt_provider_cloud(dep)->client_secret[0] != '\0';
}

static int azure_check(const struct rt_deployment_conf *dep, char *err, size_t errlen)
{
    int given = (rt_provider_cloud(dep)->tenant_id[0] != '\0') +
                (rt_provider_cloud(dep)->client_id[0] != '\0') +
                (rt_provider_cloud(dep)->client_secret[0] != '\0');

    if (given > 0 && given < 3) {
        snprintf(err, errlen,
                 "Microsoft Entra ID client credentials need tenant_id, client_id "
                 "and client_secret together");
        return TG_ECONFIG;
    }
    /* the tenant goes into the token endpoint's path: a GUID or a domain name */
    for (const char *s = rt_provider_cloud(dep)->tenant_id; *s != '\0'; s++) {
        if (!((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') ||
              *s == '-' || *s == '.')) {
            snprintf(err, errlen, "tenant_id: expected a tenant id (GUID) or domain name");
            return TG_ECONFIG;
        }
    }
    return 0;
}

static void azure_url(const struct rt_provider_attempt *a, char *out, size_t cap)
{
    size_t bl;
    const char *base = rt_provider_base(a->dep, &rt_provider_azure, &bl);
    const char *ver = rt_provider_cloud(a->dep)->api_version[0] != '\0'
                          ? rt_provider_cloud(a->dep)->api_version
                          : RT_AZURE_API_VERSION;
    char seg[RT_NAME_CAP * 3 + 1];
    char qv[RT_CLOUD_ID_CAP * 3 + 1];

    rt_provider_segment(ver, NULL, qv, sizeof(qv));
    if (a->wire == RT_API_RESPONSES) {
        snprintf(out, cap, "%.*s/openai/responses?api-version=%s", (int)bl, base, qv);
        return;
    }
    snprintf(out, cap, "%.*s/openai/deployments/%s/%s?api-version=%s", (int)bl, base,
             rt_provider_segment(a->dep->model, NULL, seg, sizeof(seg)),
             a->wire == RT_API_EMBEDDINGS ? "embeddings" : "chat/completions", qv);
}

static int azure_headers(const struct rt_provider_attempt *a, const char *url,
                         char hdr[][RT_PROVIDER_HEADER_CAP])
{
    const struct rt_deployment_conf *dep = a->dep;

    (void)url;
    if (dep->api_key[0] != '\0') {
        snprintf(hdr[0], RT_PROVIDER_HEADER_CAP, "api-key: %s", dep->api_key);
        return 1;
    }
    if (rt_provider_cloud(dep)->azure_ad_token[0] != '\0') {
        snprintf(hdr[0], RT_PROVIDER_HEADER_CAP, "Authorization: Bearer %s",
                 rt_provider_cloud(dep)->azure_ad_token);
        return 1;
    }
    if (azure_uses_entra(dep)) {
        if (a->token == NULL || a->token[0] == '\0')
            return TG_EAGAIN;
        snprintf(hdr[0], RT_PROVIDER_HEADER_CAP, "Authorization: Bearer %s", a->token);
        return 1;
    }
    return 0;
}

static int azure_token_request(const struct rt_deployment_conf *dep, int64_t now_s,
                               struct rt_token_request *out, char *err, size_t errlen)
{
    const char *auth = rt_provider_cloud(dep)->azure_authority_host[0] != '\0'
                           ? rt_provider_cloud(dep)->azure_authority_host
                           : RT_AZURE_AUTHORITY;
    size_t al = strlen(auth);
    char form[AZURE_FORM_MAX_BYTES];
    size_t n = 0;

    (void)now_s;
    if (!azure_uses_entra(dep))
        return TG_ENOTFOUND;
    while (al > 0 && auth[al - 1] == '/')
        al--;
    if (rt_oauth_form_append(form, sizeof(form), &n, "grant_type", "client_credentials") != 0 ||
        rt_oauth_form_append(form, sizeof(form), &n, "client_id",
                             rt_provider_cloud(dep)->client_id) != 0 ||
        rt_oauth_form_append(form, sizeof(form), &n, "client_secret",
                             rt_provider_cloud(dep)->client_secret) != 0 ||
        rt_oauth_form_append(form, sizeof(form), &n, "scope",
                             rt_provider_cloud(dep)->azure_scope[0] != '\0'
                                 ? rt_provider_cloud(dep)->azure_scope
                                 : RT_AZURE_SCOPE) != 0) {
        snprintf(err, errlen, "token request too large");
        return TG_EFULL;
    }
    out->body = strdup(form);
    memset(form, 0, sizeof(form)); /* it held the client secret */
    if (out->body == NULL) {
        snprintf(err, errlen, "out of memory");
        return TG_ENOMEM;
    }
    out->body_len = n;
    snprintf(out->url, sizeof(out->url), "%.*s/%s/oauth2/v2.0/token", (int)al, auth,
             rt_provider_cloud(dep)->tenant_id);
    snprintf(out->headers[0], RT_PROVIDER_HEADER_CAP,
             "Content-Type: application/x-www-form-urlencoded");
    snprintf(out->headers[1], RT_PROVIDER_HEADER_CAP, "Accept: application/json");
    out->n_headers = 2;
    return 0;
}

/* Content filter refusals first (Azure's own codes), then the generic rules. */
static enum rt_error_class azure_classify(int status, const char *body, size_t len)
{
    if (status == 400 && body != NULL && len > 0) {
        /* error.code "content_filter", error.innererror.code "ResponsibleAIPolicyViolation" */
        if (memmem(body, len, "ResponsibleAIPolicyViolation", 28) != NULL ||
            memmem(body, len, "\"content_filter\"", 16) != NULL)
            return RT_ERR_CONTENT_POLICY;
    }
    return rt_router_classify(status, body, len);
}

/* chat and embeddings as sent; /v1/messages and /v1/responses through the chat translation
 * (model inference has no Responses API) */
static int azure_ai_wire(const struct rt_deployment_conf *dep, enum rt_api client,
                         struct rt_wire *out)
{
    if (client == RT_API_RESPONSES)
        return rt_wire_responses_via_chat(rt_openai_wire, dep, out);
    return rt_openai_wire(dep, client, out);
}

/* The host of base (after the scheme, up to a port or path) ends with suffix. */
static int host_ends_with(const char *base, size_t bl, const char *suffix)
{
    const char *h = memmem(base, bl, "://", 3);
    size_t hl = 0, sl = strlen(suffix);

    h = h != NULL ? h + 3 : base;
    while (h + hl < base + bl && h[hl] != '/' && h[hl] != ':' && h[hl] != '?')
        hl++;
    return hl >= sl && strncasecmp(h + hl - sl, suffix, sl) == 0;
}

static void azure_ai_url(const struct rt_provider_attempt *a, char *out, size_t cap)
{
    size_t bl;
    const char *base = rt_provider_base(a->dep, &rt_provider_azure_ai, &bl);
    const char *ver = rt_provider_cloud(a->dep)->api_version;
    char qv[RT_CLOUD_ID_CAP * 3 + 1];
    int models = host_ends_with(base, bl, ".services.ai.azure.com") &&
                 memmem(base, bl, "/models", 7) == NULL;

    snprintf(out, cap, "%.*s%s/%s%s%s", (int)bl, base, models ? "/models" : "",
             a->wire == RT_API_EMBEDDINGS ? "embeddings" : "chat/completions",
             ver[0] != '\0' ? "?api-version=" : "",
             ver[0] != '\0' ? rt_provider_segment(ver, NULL, qv, sizeof(qv)) : "");
}

static int azure_ai_headers(const struct rt_provider_attempt *a, const char *url,
                            char hdr[][RT_PROVIDER_HEADER_CAP])
{
    size_t bl;
    const char *base = rt_provider_base(a->dep, &rt_provider_azure_ai, &bl);

    (void)url;
    if (a->dep->api_key[0] == '\0')
        return 0;
    if (host_ends_with(base, bl, ".services.ai.azure.com") ||
        host_ends_with(base, bl, ".openai.azure.com"))
        snprintf(hdr[0], RT_PROVIDER_HEADER_CAP, "api-key: %s", a->dep->api_key);
    else
        snprintf(hdr[0], RT_PROVIDER_HEADER_CAP, "Authorization: Bearer %s", a->dep->api_key);
    return 1;
}

const struct rt_provider rt_provider_azure = {
    .name = "azure",
    .default_base = NULL, /* the resource's own endpoint */
    .key_env = (const char *const[]){"AZURE_OPENAI_API_KEY", "AZURE_API_KEY", NULL},
    .base_env = (const char *const[]){"AZURE_API_BASE", NULL},
    .param_env = (const char *const[]){"api_version", "AZURE_API_VERSION", NULL},
    .flags = 0,
    .params = (const char *const[]){"api_version", "azure_ad_token", "tenant_id", "client_id",
                                    "client_secret", "azure_scope", "azure_authority_host", NULL},
    .check = azure_check,
    .wire = rt_openai_wire,
    .url = azure_url,
    .headers = azure_headers,
    .classify = azure_classify,
    .needs_token = azure_uses_entra,
    .token_request = azure_token_request,
    .token_parse = rt_oauth_token_parse,
};

const struct rt_provider rt_provider_azure_ai = {
    .name = "azure_ai",
    .default_base = NULL,
    .key_env = (const char *const[]){"AZURE_AI_API_KEY", NULL},
    .base_env = (const char *const[]){"AZURE_AI_API_BASE", NULL},
    .flags = 0,
    .params = (const char *const[]){"api_version", NULL},
    .check = NULL,
    .wire = azure_ai_wire,
    .url = azure_ai_url,
    .headers = azure_ai_headers,
    .classify = azure_classify,
};
