/* providers: each family's wire API per client API, URLs from api_base (or the default), and
 * headers; the registry's lookup by prefix. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
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

static void test_registry(void **state)
{
    (void)state;
    assert_ptr_equal(rt_provider_find("openai"), &rt_provider_openai);
    assert_ptr_equal(rt_provider_find("anthropic"), &rt_provider_anthropic);
    assert_null(rt_provider_find("no-such-family"));
    assert_ptr_equal(rt_provider_find("groq"), &rt_provider_compat[0]);
    assert_true(rt_provider_unsupported("bedrock"));
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
        assert_non_null(p->key_env);
        assert_non_null(p->key_env[0]);
        /* a default base is https, or plain http on the local machine (self-hosted rows) */
        if (p->default_base != NULL && strncmp(p->default_base, "https://", 8) != 0) {
            assert_true(p->flags & RT_PROVIDER_SELF_HOSTED);
            assert_int_equal(strncmp(p->default_base, "http://localhost:", 17), 0);
        }
        if (p->default_base == NULL)
            assert_true(p->flags & RT_PROVIDER_SELF_HOSTED);
    }
    assert_null(rt_provider_at(rt_provider_count()));
}

/* A named OpenAI-compatible row speaks OpenAI at its own base. */
static void test_compat(void **state)
{
    const struct rt_provider *p = rt_provider_find("deepinfra");
    struct rt_deployment_conf d = dep("", "di-key");
    char url[256];
    char hdr[RT_PROVIDER_HEADERS_MAX][RT_PROVIDER_HEADER_CAP];
    struct rt_wire w;

    (void)state;
    assert_non_null(p);
    d.prov = p;
    p->url(&d, RT_API_CHAT, url, sizeof(url));
    assert_string_equal(url, "https://api.deepinfra.com/v1/openai/chat/completions");
    p->url(&d, RT_API_EMBEDDINGS, url, sizeof(url));
    assert_string_equal(url, "https://api.deepinfra.com/v1/openai/embeddings");
    assert_int_equal(p->wire(RT_API_MESSAGES, &w), 0);
    assert_int_equal(w.api, RT_API_CHAT);
    assert_int_equal(w.dir, RT_TRANSLATE_CHAT_TO_MESSAGES);
    assert_int_equal(p->headers(&d, hdr), 1);
    assert_string_equal(hdr[0], "Authorization: Bearer di-key");
    snprintf(d.api_base, sizeof(d.api_base), "http://10.1.1.1:8000/v1");
    p->url(&d, RT_API_RESPONSES, url, sizeof(url));
    assert_string_equal(url, "http://10.1.1.1:8000/v1/responses");
}

static void test_openai(void **state)
{
    const struct rt_provider *p = &rt_provider_openai;
    struct rt_deployment_conf d = dep("http://10.0.0.1:9/v1///", "sk-prov");
    char url[256];
    char hdr[RT_PROVIDER_HEADERS_MAX][RT_PROVIDER_HEADER_CAP];
    struct rt_wire w;

    (void)state;
    for (int api = RT_API_CHAT; api <= RT_API_RESPONSES; api++) {
        assert_int_equal(p->wire((enum rt_api)api, &w), 0);
        assert_int_equal(w.api, api);
        assert_int_equal(w.dir, RT_TRANSLATE_NONE);
    }
    assert_int_equal(p->wire(RT_API_MESSAGES, &w), 0);
    assert_int_equal(w.api, RT_API_CHAT);
    assert_int_equal(w.dir, RT_TRANSLATE_CHAT_TO_MESSAGES);
    p->url(&d, RT_API_CHAT, url, sizeof(url));
    assert_string_equal(url, "http://10.0.0.1:9/v1/chat/completions");
    p->url(&d, RT_API_EMBEDDINGS, url, sizeof(url));
    assert_string_equal(url, "http://10.0.0.1:9/v1/embeddings");
    p->url(&d, RT_API_RESPONSES, url, sizeof(url));
    assert_string_equal(url, "http://10.0.0.1:9/v1/responses");
    d.api_base[0] = '\0';
    p->url(&d, RT_API_CHAT, url, sizeof(url));
    assert_string_equal(url, "https://api.openai.com/v1/chat/completions");
    assert_int_equal(p->headers(&d, hdr), 1);
    assert_string_equal(hdr[0], "Authorization: Bearer sk-prov");
    d.api_key[0] = '\0';
    assert_int_equal(p->headers(&d, hdr), 0);
}

static void test_anthropic(void **state)
{
    const struct rt_provider *p = &rt_provider_anthropic;
    struct rt_deployment_conf d = dep("http://10.0.0.1:9", "sk-ant");
    char url[256];
    char hdr[RT_PROVIDER_HEADERS_MAX][RT_PROVIDER_HEADER_CAP];
    struct rt_wire w;

    (void)state;
    assert_int_equal(p->wire(RT_API_MESSAGES, &w), 0);
    assert_int_equal(w.api, RT_API_MESSAGES);
    assert_int_equal(w.dir, RT_TRANSLATE_NONE);
    assert_int_equal(p->wire(RT_API_CHAT, &w), 0);
    assert_int_equal(w.api, RT_API_MESSAGES);
    assert_int_equal(w.dir, RT_TRANSLATE_MESSAGES_TO_CHAT);
    assert_int_equal(p->wire(RT_API_EMBEDDINGS, &w), TG_EINVAL);
    assert_int_equal(p->wire(RT_API_RESPONSES, &w), TG_EINVAL);
    p->url(&d, RT_API_MESSAGES, url, sizeof(url));
    assert_string_equal(url, "http://10.0.0.1:9/v1/messages");
    /* a base given with its /v1 */
    snprintf(d.api_base, sizeof(d.api_base), "http://10.0.0.1:9/v1/");
    p->url(&d, RT_API_MESSAGES, url, sizeof(url));
    assert_string_equal(url, "http://10.0.0.1:9/v1/messages");
    d.api_base[0] = '\0';
    p->url(&d, RT_API_MESSAGES, url, sizeof(url));
    assert_string_equal(url, "https://api.anthropic.com/v1/messages");
    /* the whole endpoint as a base (LiteLLM's ANTHROPIC_API_BASE examples) */
    snprintf(d.api_base, sizeof(d.api_base), "https://gw.example/anthropic/v1/messages");
    p->url(&d, RT_API_MESSAGES, url, sizeof(url));
    assert_string_equal(url, "https://gw.example/anthropic/v1/messages");
    d.api_base[0] = '\0';
    assert_int_equal(p->headers(&d, hdr), 2);
    assert_string_equal(hdr[0], "x-api-key: sk-ant");
    assert_string_equal(hdr[1], "anthropic-version: 2023-06-01");
    d.api_key[0] = '\0';
    assert_int_equal(p->headers(&d, hdr), 1);
    assert_string_equal(hdr[0], "anthropic-version: 2023-06-01");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_registry),
        cmocka_unit_test(test_openai),
        cmocka_unit_test(test_anthropic),
        cmocka_unit_test(test_compat),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
