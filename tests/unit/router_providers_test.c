/* providers: each family's wire API per client API, URLs from api_base (or the default), and
 * headers; the registry's lookup by prefix. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "providers/provider.h"
#include "tg_err.h"

static struct rt_deployment_conf dep(const char *base, const char *key)
{
    struct rt_deployment_conf d;

    memset(&d, 0, sizeof(d));
    snprintf(d.id, sizeof(d.id), "dep-1");
    snprintf(d.model, sizeof(d.model), "m");
    snprintf(d.api_base, sizeof(d.api_base), "%s", base);
    snprintf(d.api_key, sizeof(d.api_key), "%s", key);
    return d;
}

/* The attempt's URL for api (stream or not) into url (RT_PROVIDER_URL_CAP bytes). */
static void url_of(const struct rt_provider *p, const struct rt_deployment_conf *d, enum rt_api api,
                   int stream, char *url)
{
    struct rt_provider_attempt a;

    memset(&a, 0, sizeof(a));
    a.dep = d;
    a.wire = api;
    a.stream = stream;
    a.body = "{}";
    a.body_len = 2;
    p->url(&a, url, RT_PROVIDER_URL_CAP);
}

/* The attempt's headers (with token, may be NULL); returns what headers() returns. */
static int hdrs_of(const struct rt_provider *p, const struct rt_deployment_conf *d,
                   const char *token, char hdr[][RT_PROVIDER_HEADER_CAP])
{
    struct rt_provider_attempt a;
    char url[RT_PROVIDER_URL_CAP];

    memset(&a, 0, sizeof(a));
    a.dep = d;
    a.wire = RT_API_CHAT;
    a.body = "{}";
    a.body_len = 2;
    a.token = token;
    p->url(&a, url, sizeof(url));
    return p->headers(&a, url, hdr);
}

static void test_registry(void **state)
{
    (void)state;
    assert_ptr_equal(rt_provider_find("openai"), &rt_provider_openai);
    assert_ptr_equal(rt_provider_find("anthropic"), &rt_provider_anthropic);
    assert_null(rt_provider_find("no-such-family"));
    assert_ptr_equal(rt_provider_find("groq"), &rt_provider_compat[0]);
    assert_true(rt_provider_unsupported("sagemaker"));
    assert_false(rt_provider_unsupported("groq"));
    /* one row per name; every row complete */
    for (size_t i = 0; i < rt_provider_count(); i++) {
        const struct rt_provider *p = rt_provider_at(i);

        assert_non_null(p->name);
        assert_ptr_equal(rt_provider_find(p->name), p);
        assert_false(rt_provider_unsupported(p->name));
        assert_non_null(p->wire);
        assert_non_null(p->url);
        assert_non_null(p->headers);
        /* a key from a variable, or a token from an endpoint */
        assert_true((p->key_env != NULL && p->key_env[0] != NULL) || p->needs_token != NULL);
        /* a default base is https, or plain http on the local machine (self-hosted rows) */
        if (p->default_base != NULL && strncmp(p->default_base, "https://", 8) != 0) {
            assert_true(p->flags & RT_PROVIDER_SELF_HOSTED);
            assert_int_equal(strncmp(p->default_base, "http://localhost:", 17), 0);
        }
        /* without a default, a variable can name the base */
        if (p->default_base == NULL)
            assert_true((p->base_env != NULL && p->base_env[0] != NULL) || p->prepare != NULL);
        /* a family with a token endpoint has all three token functions */
        assert_true((p->needs_token == NULL) == (p->token_request == NULL));
        assert_true((p->token_request == NULL) == (p->token_parse == NULL));
    }
    assert_null(rt_provider_at(rt_provider_count()));
}

/* A named OpenAI-compatible row speaks OpenAI at its own base. */
static void test_compat(void **state)
{
    const struct rt_provider *p = rt_provider_find("deepinfra");
    struct rt_deployment_conf d = dep("", "di-key");
    char url[RT_PROVIDER_URL_CAP];
    char hdr[RT_PROVIDER_HEADERS_MAX][RT_PROVIDER_HEADER_CAP];
    struct rt_wire w;

    (void)state;
    assert_non_null(p);
    d.prov = p;
    url_of(p, &d, RT_API_CHAT, 0, url);
    assert_string_equal(url, "https://api.deepinfra.com/v1/openai/chat/completions");
    url_of(p, &d, RT_API_EMBEDDINGS, 0, url);
    assert_string_equal(url, "https://api.deepinfra.com/v1/openai/embeddings");
    assert_int_equal(p->wire(&d, RT_API_MESSAGES, &w), 0);
    assert_int_equal(w.api, RT_API_CHAT);
    assert_int_equal(w.dir, RT_TRANSLATE_CHAT_TO_MESSAGES);
    assert_int_equal(hdrs_of(p, &d, NULL, hdr), 1);
    assert_string_equal(hdr[0], "Authorization: Bearer di-key");
    snprintf(d.api_base, sizeof(d.api_base), "http://10.1.1.1:8000/v1");
    url_of(p, &d, RT_API_RESPONSES, 0, url);
    assert_string_equal(url, "http://10.1.1.1:8000/v1/responses");
    /* /v1/responses: bridged through chat on every named row (LiteLLM's default), as sent when
     * the deployment's model_info.supported_endpoints lists it */
    for (size_t i = 0; i < rt_provider_compat_count; i++) {
        d.prov = &rt_provider_compat[i];
        d.responses_native = 0;
        assert_int_equal(d.prov->wire(&d, RT_API_RESPONSES, &w), 0);
        assert_int_equal(w.api, RT_API_CHAT);
        assert_int_equal(w.responses, 1);
        d.responses_native = 1;
        assert_int_equal(d.prov->wire(&d, RT_API_RESPONSES, &w), 0);
        assert_int_equal(w.api, RT_API_RESPONSES);
        assert_int_equal(w.responses, 0);
    }
}

static void test_openai(void **state)
{
    const struct rt_provider *p = &rt_provider_openai;
    struct rt_deployment_conf d = dep("http://10.0.0.1:9/v1///", "sk-prov");
    char url[RT_PROVIDER_URL_CAP];
    char hdr[RT_PROVIDER_HEADERS_MAX][RT_PROVIDER_HEADER_CAP];
    struct rt_wire w;

    (void)state;
    for (int api = RT_API_CHAT; api <= RT_API_RESPONSES; api++) {
        assert_int_equal(p->wire(&d, (enum rt_api)api, &w), 0);
        assert_int_equal(w.api, api);
        assert_int_equal(w.dir, RT_TRANSLATE_NONE);
    }
    assert_int_equal(p->wire(&d, RT_API_MESSAGES, &w), 0);
    assert_int_equal(w.api, RT_API_CHAT);
    assert_int_equal(w.dir, RT_TRANSLATE_CHAT_TO_MESSAGES);
    url_of(p, &d, RT_API_CHAT, 0, url);
    assert_string_equal(url, "http://10.0.0.1:9/v1/chat/completions");
    url_of(p, &d, RT_API_EMBEDDINGS, 0, url);
    assert_string_equal(url, "http://10.0.0.1:9/v1/embeddings");
    url_of(p, &d, RT_API_RESPONSES, 0, url);
    assert_string_equal(url, "http://10.0.0.1:9/v1/responses");
    d.api_base[0] = '\0';
    url_of(p, &d, RT_API_CHAT, 0, url);
    assert_string_equal(url, "https://api.openai.com/v1/chat/completions");
    assert_int_equal(hdrs_of(p, &d, NULL, hdr), 1);
    assert_string_equal(hdr[0], "Authorization: Bearer sk-prov");
    d.api_key[0] = '\0';
    assert_int_equal(hdrs_of(p, &d, NULL, hdr), 0);
}

static void test_anthropic(void **state)
{
    const struct rt_provider *p = &rt_provider_anthropic;
    struct rt_deployment_conf d = dep("http://10.0.0.1:9", "sk-ant");
    char url[RT_PROVIDER_URL_CAP];
    char hdr[RT_PROVIDER_HEADERS_MAX][RT_PROVIDER_HEADER_CAP];
    struct rt_wire w;

    (void)state;
    assert_int_equal(p->wire(&d, RT_API_MESSAGES, &w), 0);
    assert_int_equal(w.api, RT_API_MESSAGES);
    assert_int_equal(w.dir, RT_TRANSLATE_NONE);
    assert_int_equal(p->wire(&d, RT_API_CHAT, &w), 0);
    assert_int_equal(w.api, RT_API_MESSAGES);
    assert_int_equal(w.dir, RT_TRANSLATE_MESSAGES_TO_CHAT);
    assert_int_equal(p->wire(&d, RT_API_EMBEDDINGS, &w), TG_EINVAL);
    assert_int_equal(w.responses, 0);
    /* responses through chat: Responses -> chat -> messages, and back */
    assert_int_equal(p->wire(&d, RT_API_RESPONSES, &w), 0);
    assert_int_equal(w.api, RT_API_MESSAGES);
    assert_int_equal(w.dir, RT_TRANSLATE_MESSAGES_TO_CHAT);
    assert_int_equal(w.responses, 1);
    url_of(p, &d, RT_API_MESSAGES, 0, url);
    assert_string_equal(url, "http://10.0.0.1:9/v1/messages");
    /* a base given with its /v1 */
    snprintf(d.api_base, sizeof(d.api_base), "http://10.0.0.1:9/v1/");
    url_of(p, &d, RT_API_MESSAGES, 0, url);
    assert_string_equal(url, "http://10.0.0.1:9/v1/messages");
    d.api_base[0] = '\0';
    url_of(p, &d, RT_API_MESSAGES, 0, url);
    assert_string_equal(url, "https://api.anthropic.com/v1/messages");
    /* the whole endpoint as a base (LiteLLM's ANTHROPIC_API_BASE examples) */
    snprintf(d.api_base, sizeof(d.api_base), "https://gw.example/anthropic/v1/messages");
    url_of(p, &d, RT_API_MESSAGES, 0, url);
    assert_string_equal(url, "https://gw.example/anthropic/v1/messages");
    d.api_base[0] = '\0';
    assert_int_equal(hdrs_of(p, &d, NULL, hdr), 2);
    assert_string_equal(hdr[0], "x-api-key: sk-ant");
    assert_string_equal(hdr[1], "anthropic-version: 2023-06-01");
    d.api_key[0] = '\0';
    assert_int_equal(hdrs_of(p, &d, NULL, hdr), 1);
    assert_string_equal(hdr[0], "anthropic-version: 2023-06-01");
}

static struct rt_dep_cloud cloud;

/* Azure OpenAI: the deployment in the path, api-version, api-key; Entra ID as the alternative. */
static void test_azure(void **state)
{
    const struct rt_provider *p = rt_provider_find("azure");
    struct rt_deployment_conf d = dep("https://res-1.openai.azure.com/", "az-key");
    char url[RT_PROVIDER_URL_CAP];
    char hdr[RT_PROVIDER_HEADERS_MAX][RT_PROVIDER_HEADER_CAP];
    char err[256];
    struct rt_token_request tr;
    struct rt_wire w;

    (void)state;
    assert_ptr_equal(p, &rt_provider_azure);
    memset(&cloud, 0, sizeof(cloud));
    d.prov = p;
    snprintf(d.model, sizeof(d.model), "gpt-4o deploy/1");
    url_of(p, &d, RT_API_CHAT, 0, url);
    assert_string_equal(url, "https://res-1.openai.azure.com/openai/deployments/"
                             "gpt-4o%20deploy%2F1/chat/completions?api-version=2024-10-21");
    snprintf(d.model, sizeof(d.model), "emb-3");
    d.cloud = &cloud;
    snprintf(cloud.api_version, sizeof(cloud.api_version), "2025-04-01-preview");
    url_of(p, &d, RT_API_EMBEDDINGS, 0, url);
    assert_string_equal(url, "https://res-1.openai.azure.com/openai/deployments/emb-3/"
                             "embeddings?api-version=2025-04-01-preview");
    url_of(p, &d, RT_API_RESPONSES, 1, url);
    assert_string_equal(url, "https://res-1.openai.azure.com/openai/responses?"
                             "api-version=2025-04-01-preview");
    assert_int_equal(p->wire(&d, RT_API_MESSAGES, &w), 0);
    assert_int_equal(w.api, RT_API_CHAT);
    assert_int_equal(w.dir, RT_TRANSLATE_CHAT_TO_MESSAGES);
    /* api-key first; an Entra ID token only without one */
    assert_int_equal(hdrs_of(p, &d, NULL, hdr), 1);
    assert_string_equal(hdr[0], "api-key: az-key");
    assert_false(rt_provider_needs_token(&d));
    d.api_key[0] = '\0';
    snprintf(cloud.azure_ad_token, sizeof(cloud.azure_ad_token), "eyJ.static");
    assert_int_equal(hdrs_of(p, &d, NULL, hdr), 1);
    assert_string_equal(hdr[0], "Authorization: Bearer eyJ.static");
    cloud.azure_ad_token[0] = '\0';
    assert_int_equal(hdrs_of(p, &d, NULL, hdr), 0);
    snprintf(cloud.tenant_id, sizeof(cloud.tenant_id), "contoso.onmicrosoft.com");
    snprintf(cloud.client_id, sizeof(cloud.client_id), "app-1");
    assert_int_equal(p->check(&d, err, sizeof(err)), TG_ECONFIG);
    assert_string_equal(err, "Microsoft Entra ID client credentials need tenant_id, client_id "
                             "and client_secret together");
    snprintf(cloud.client_secret, sizeof(cloud.client_secret), "s3cr&t =x");
    assert_int_equal(p->check(&d, err, sizeof(err)), 0);
    assert_true(rt_provider_needs_token(&d));
    /* no token yet: the attempt cannot be made (the call fails it at once) */
    assert_int_equal(hdrs_of(p, &d, NULL, hdr), TG_EAGAIN);
    assert_int_equal(hdrs_of(p, &d, "", hdr), TG_EAGAIN);
    assert_int_equal(hdrs_of(p, &d, "tok-1", hdr), 1);
    assert_string_equal(hdr[0], "Authorization: Bearer tok-1");
    /* the client-credentials request */
    memset(&tr, 0, sizeof(tr));
    assert_int_equal(p->token_request(&d, 0, &tr, err, sizeof(err)), 0);
    assert_string_equal(
        tr.url, "https://login.microsoftonline.com/contoso.onmicrosoft.com/oauth2/v2.0/token");
    assert_int_equal(tr.n_headers, 2);
    assert_string_equal(tr.headers[0], "Content-Type: application/x-www-form-urlencoded");
    assert_string_equal(tr.body, "grant_type=client_credentials&client_id=app-1&client_secret="
                                 "s3cr%26t+%3Dx&scope=https%3A%2F%2Fcognitiveservices.azure.com%2F"
                                 ".default");
    assert_int_equal(tr.body_len, strlen(tr.body));
    free(tr.body);
    snprintf(cloud.azure_authority_host, sizeof(cloud.azure_authority_host), "http://127.0.0.1:9/");
    memset(&tr, 0, sizeof(tr));
    assert_int_equal(p->token_request(&d, 0, &tr, err, sizeof(err)), 0);
    assert_string_equal(tr.url, "http://127.0.0.1:9/contoso.onmicrosoft.com/oauth2/v2.0/token");
    free(tr.body);
    /* a tenant that would change the path is refused at load */
    snprintf(cloud.tenant_id, sizeof(cloud.tenant_id), "../x");
    assert_int_equal(p->check(&d, err, sizeof(err)), TG_ECONFIG);
    /* an api_key configured: no token needed */
    snprintf(d.api_key, sizeof(d.api_key), "k");
    assert_false(rt_provider_needs_token(&d));
    memset(&tr, 0, sizeof(tr));
    assert_int_equal(p->token_request(&d, 0, &tr, err, sizeof(err)), TG_ENOTFOUND);
    assert_null(tr.body);
}

/* Azure's content filter refusal is content policy; the rest the generic rules. */
static void test_azure_classify(void **state)
{
    const struct rt_provider *p = &rt_provider_azure;
    const char *filt = "{\"error\":{\"message\":\"The response was filtered due to the prompt "
                       "triggering Azure OpenAI's content management policy.\",\"type\":null,"
                       "\"param\":\"prompt\",\"code\":\"content_filter\",\"status\":400,"
                       "\"innererror\":{\"code\":\"ResponsibleAIPolicyViolation\","
                       "\"content_filter_result\":{\"hate\":{\"filtered\":true,"
                       "\"severity\":\"high\"}}}}}";
    const char *inner = "{\"error\":{\"code\":\"x\",\"innererror\":{\"code\":"
                        "\"ResponsibleAIPolicyViolation\"}}}";
    const char *cw = "{\"error\":{\"code\":\"context_length_exceeded\",\"message\":\"This "
                     "model's maximum context length is 8192 tokens.\"}}";

    (void)state;
    assert_int_equal(p->classify(400, filt, strlen(filt)), RT_ERR_CONTENT_POLICY);
    assert_int_equal(p->classify(400, inner, strlen(inner)), RT_ERR_CONTENT_POLICY);
    assert_int_equal(p->classify(400, cw, strlen(cw)), RT_ERR_CONTEXT_WINDOW);
    assert_int_equal(p->classify(429, NULL, 0), RT_ERR_RATE_LIMIT);
    assert_int_equal(p->classify(401, filt, strlen(filt)), RT_ERR_AUTH);
    assert_int_equal(p->classify(404, filt, strlen(filt)), RT_ERR_BAD_REQUEST);
    assert_int_equal(p->classify(503, NULL, 0), RT_ERR_SERVER);
    assert_int_equal(p->classify(200, NULL, 0), RT_ERR_NONE);
}

/* Azure AI Foundry model inference. */
static void test_azure_ai(void **state)
{
    const struct rt_provider *p = rt_provider_find("azure_ai");
    struct rt_deployment_conf d = dep("https://hub-1.services.ai.azure.com", "ai-key");
    char url[RT_PROVIDER_URL_CAP];
    char hdr[RT_PROVIDER_HEADERS_MAX][RT_PROVIDER_HEADER_CAP];
    struct rt_wire w;

    (void)state;
    assert_ptr_equal(p, &rt_provider_azure_ai);
    memset(&cloud, 0, sizeof(cloud));
    d.prov = p;
    url_of(p, &d, RT_API_CHAT, 0, url);
    assert_string_equal(url, "https://hub-1.services.ai.azure.com/models/chat/completions");
    d.cloud = &cloud;
    snprintf(cloud.api_version, sizeof(cloud.api_version), "2024-05-01-preview");
    url_of(p, &d, RT_API_EMBEDDINGS, 0, url);
    assert_string_equal(url, "https://hub-1.services.ai.azure.com/models/embeddings?"
                             "api-version=2024-05-01-preview");
    assert_int_equal(hdrs_of(p, &d, NULL, hdr), 1);
    assert_string_equal(hdr[0], "api-key: ai-key");
    snprintf(d.api_base, sizeof(d.api_base), "https://mistral-x.eastus2.models.ai.azure.com");
    url_of(p, &d, RT_API_CHAT, 0, url);
    assert_string_equal(url, "https://mistral-x.eastus2.models.ai.azure.com/chat/completions?"
                             "api-version=2024-05-01-preview");
    assert_int_equal(hdrs_of(p, &d, NULL, hdr), 1);
    assert_string_equal(hdr[0], "Authorization: Bearer ai-key");
    /* model inference has no Responses API: through chat */
    assert_int_equal(p->wire(&d, RT_API_RESPONSES, &w), 0);
    assert_int_equal(w.api, RT_API_CHAT);
    assert_int_equal(w.dir, RT_TRANSLATE_NONE);
    assert_int_equal(w.responses, 1);
    assert_int_equal(p->wire(&d, RT_API_EMBEDDINGS, &w), 0);
    assert_int_equal(w.responses, 0);
}

/* Token endpoint answers (RFC 6749 5.1 / 5.2), and the form encoding. */
static void test_oauth(void **state)
{
    char tok[64];
    char err[256];
    char form[64];
    size_t n = 0;
    int64_t exp;
    static const char ok[] = "{\"token_type\":\"Bearer\",\"expires_in\":3599,"
                             "\"ext_expires_in\":3599,\"access_token\":\"eyJ0.abc-_\"}";
    static const char str_exp[] = "{\"token_type\":\"Bearer\",\"expires_in\":\"3600\","
                                  "\"access_token\":\"a\"}";
    static const char bad[] = "{\"error\":\"invalid_client\",\"error_description\":\"AADSTS7000215:"
                              " Invalid client secret provided: s3cr3t\"}";
    static const char crlf[] = "{\"access_token\":\"a\\r\\nX-Evil: 1\",\"expires_in\":60}";

    (void)state;
    assert_int_equal(
        rt_oauth_token_parse(200, ok, strlen(ok), tok, sizeof(tok), &exp, err, sizeof(err)), 0);
    assert_string_equal(tok, "eyJ0.abc-_");
    assert_int_equal(exp, 3599);
    assert_int_equal(rt_oauth_token_parse(200, str_exp, strlen(str_exp), tok, sizeof(tok), &exp,
                                          err, sizeof(err)),
                     0);
    assert_int_equal(exp, 3600);
    /* the error code is reported, never the description (it may quote what was sent) */
    assert_int_equal(
        rt_oauth_token_parse(401, bad, strlen(bad), tok, sizeof(tok), &exp, err, sizeof(err)),
        TG_EPROTO);
    assert_string_equal(err, "token endpoint answered HTTP 401, error \"invalid_client\"");
    assert_string_equal(tok, "");
    assert_int_equal(
        rt_oauth_token_parse(200, crlf, strlen(crlf), tok, sizeof(tok), &exp, err, sizeof(err)),
        TG_EPROTO);
    assert_int_equal(rt_oauth_token_parse(200, "nope", 4, tok, sizeof(tok), &exp, err, sizeof(err)),
                     TG_EPROTO);
    assert_int_equal(rt_oauth_token_parse(200, "{\"access_token\":\"a\"}", 20, tok, sizeof(tok),
                                          &exp, err, sizeof(err)),
                     TG_EPROTO);
    assert_string_equal(err, "token endpoint answer has no positive expires_in");
    assert_int_equal(rt_oauth_token_parse(200, ok, strlen(ok), tok, 4, &exp, err, sizeof(err)),
                     TG_EPROTO);
    assert_int_equal(rt_oauth_form_append(form, sizeof(form), &n, "a b", "x/y~z"), 0);
    assert_string_equal(form, "a+b=x%2Fy~z");
    assert_int_equal(rt_oauth_form_append(form, 16, &n, "k", "0123456789"), TG_EFULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_registry),  cmocka_unit_test(test_openai),
        cmocka_unit_test(test_anthropic), cmocka_unit_test(test_compat),
        cmocka_unit_test(test_azure),     cmocka_unit_test(test_azure_classify),
        cmocka_unit_test(test_azure_ai),  cmocka_unit_test(test_oauth),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
