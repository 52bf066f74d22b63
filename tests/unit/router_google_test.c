/* google: the generateContent dialect (requests, answers, streams, embeddings), the Gemini API
 * and Vertex AI families (URLs, headers, classification, retry delays), service-account JSON,
 * the RS256 JWT (verified here with the public key), and vertex_ai configs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>
#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rsa.h>

#include "config.h"
#include "providers/provider.h"
#include "tg_err.h"
#include "tg_log.h"

static char key_pem[4096]; /* a throwaway RSA-2048 key made for this run */
static char pub_pem[1024];
static char sa_json[8192]; /* a service-account JSON around it */
static char sa_path[256];

static int setup(void **state)
{
    EVP_PKEY *k = EVP_RSA_gen(2048);
    BIO *b = BIO_new(BIO_s_mem());
    BIO *pb = BIO_new(BIO_s_mem());
    json_t *j;
    char *s;
    int n, fd;
    FILE *f;

    (void)state;
    tg_log_set_level(TG_LOG_OFF);
    if (k == NULL || b == NULL || pb == NULL ||
        PEM_write_bio_PrivateKey(b, k, NULL, NULL, 0, NULL, NULL) != 1 ||
        PEM_write_bio_PUBKEY(pb, k) != 1)
        return -1;
    n = BIO_read(b, key_pem, sizeof(key_pem) - 1);
    key_pem[n > 0 ? n : 0] = '\0';
    n = BIO_read(pb, pub_pem, sizeof(pub_pem) - 1);
    pub_pem[n > 0 ? n : 0] = '\0';
    BIO_free(b);
    BIO_free(pb);
    EVP_PKEY_free(k);
    j = json_pack("{s:s,s:s,s:s,s:s,s:s,s:s,s:s}", "type", "service_account", "project_id",
                  "proj-1", "private_key_id", "kid-0001", "private_key", key_pem, "client_email",
                  "svc@proj-1.iam.gserviceaccount.com", "client_id", "1234", "token_uri",
                  "http://127.0.0.1:9/token");
    s = json_dumps(j, 0);
    snprintf(sa_json, sizeof(sa_json), "%s", s);
    free(s);
    json_decref(j);
    snprintf(sa_path, sizeof(sa_path), "%s/router_google_test_sa_XXXXXX",
             getenv("TMPDIR") != NULL ? getenv("TMPDIR") : "/tmp");
    fd = mkstemp(sa_path);
    if (fd < 0)
        return -1;
    f = fdopen(fd, "w");
    fputs(sa_json, f);
    fclose(f);
    unsetenv("VERTEXAI_PROJECT");
    unsetenv("VERTEXAI_LOCATION");
    unsetenv("VERTEXAI_CREDENTIALS");
    unsetenv("GOOGLE_APPLICATION_CREDENTIALS");
    unsetenv("GEMINI_API_KEY");
    unsetenv("GEMINI_API_BASE");
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    unlink(sa_path);
    return 0;
}

static json_t *parse(const char *text)
{
    json_error_t e;
    json_t *j = json_loads(text, 0, &e);

    if (j == NULL)
        fail_msg("bad test JSON at %d: %s", e.position, e.text);
    return j;
}

/* j equals the JSON text want (compared as values). */
static void assert_json(const json_t *j, const char *want)
{
    json_t *w = parse(want);

    if (!json_equal((json_t *)j, w)) {
        char *got = json_dumps(j, JSON_SORT_KEYS | JSON_COMPACT);
        char *exp = json_dumps(w, JSON_SORT_KEYS | JSON_COMPACT);

        fprintf(stderr, "got  %s\nwant %s\n", got, exp);
        free(got);
        free(exp);
        json_decref(w);
        fail();
    }
    json_decref(w);
}

static struct rt_deployment_conf dep_of(const struct rt_provider *p, const char *model)
{
    struct rt_deployment_conf d;

    memset(&d, 0, sizeof(d));
    snprintf(d.id, sizeof(d.id), "g-1");
    snprintf(d.model, sizeof(d.model), "%s", model);
    d.prov = p;
    return d;
}

/* ---- the dialect: requests ---- */

/* A parameter named "strict" (or "additionalProperties") was dropped from the function's
 * parameters, taken for the keyword; a list of types (["integer", "null"], as OpenAI's strict
 * mode writes an optional field) went as it was, which Gemini refuses ("Proto field is not
 * repeating"). Names stay; a list of types is one type, nullable, or anyOf. */
static void test_request_schema_names_and_type_lists(void **state)
{
    struct rt_deployment_conf d = dep_of(&rt_provider_gemini, "gemini-2.0-flash");
    char err[256];
    json_t *chat = parse(
        "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
        "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"w\",\"strict\":true,"
        " \"parameters\":{\"type\":\"object\",\"additionalProperties\":false,"
        "  \"required\":[\"strict\",\"days\"],\"properties\":{"
        "   \"strict\":{\"type\":\"boolean\"},"
        "   \"additionalProperties\":{\"type\":\"string\"},"
        "   \"days\":{\"type\":[\"integer\",\"null\"],\"description\":\"d\"},"
        "   \"v\":{\"type\":[\"string\",\"number\"]},"
        "   \"o\":{\"type\":\"object\",\"additionalProperties\":false,"
        "    \"properties\":{\"strict\":{\"type\":[\"null\",\"string\"]}}}}}}}]}");
    json_t *b;

    (void)state;
    b = rt_dialect_gemini.request(chat, &d, 0, err, sizeof(err));
    if (b == NULL)
        fail_msg("%s", err);
    assert_json(json_object_get(b, "tools"),
                "[{\"functionDeclarations\":[{\"name\":\"w\",\"parameters\":{\"type\":\"object\","
                "\"required\":[\"strict\",\"days\"],\"properties\":{"
                "\"strict\":{\"type\":\"boolean\"},"
                "\"additionalProperties\":{\"type\":\"string\"},"
                "\"days\":{\"type\":\"integer\",\"nullable\":true,\"description\":\"d\"},"
                "\"v\":{\"anyOf\":[{\"type\":\"string\"},{\"type\":\"number\"}]},"
                "\"o\":{\"type\":\"object\",\"properties\":{\"strict\":{\"type\":\"string\","
                "\"nullable\":true}}}}}}]}]");
    json_decref(b);
    json_decref(chat);
}


static void test_request(void **state)
{
    struct rt_deployment_conf d = dep_of(&rt_provider_gemini, "gemini-2.0-flash");
    char err[256];
    json_t *chat = parse(
        "{\"model\":\"g\",\"messages\":["
        "{\"role\":\"system\",\"content\":\"be brief\"},"
        "{\"role\":\"developer\",\"content\":[{\"type\":\"text\",\"text\":\"and kind\"}]},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"what is this?\"},"
        " {\"type\":\"image_url\",\"image_url\":{\"url\":\"data:image/png;base64,iVBOR\"}},"
        " {\"type\":\"image_url\",\"image_url\":{\"url\":\"https://x.test/a.JPG?s=1\"}}]},"
        "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":["
        " {\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"look\","
        "  \"arguments\":\"{\\\"q\\\":1}\"}},"
        " {\"id\":\"c2\",\"type\":\"function\",\"function\":{\"name\":\"zoom\","
        "  \"arguments\":\"not json\"}}]},"
        "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"{\\\"found\\\":true}\"},"
        "{\"role\":\"tool\",\"tool_call_id\":\"c2\",\"content\":\"plain\"},"
        "{\"role\":\"user\",\"content\":\"thanks\"}],"
        "\"temperature\":0.2,\"top_p\":0.9,\"max_tokens\":64,\"stop\":\"END\",\"seed\":7,"
        "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"x\","
        " \"schema\":{\"$schema\":\"s\",\"type\":\"object\",\"additionalProperties\":false,"
        "  \"properties\":{\"a\":{\"type\":\"string\",\"additionalProperties\":true}}}}},"
        "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"look\",\"description\":\"d\","
        " \"parameters\":{\"type\":\"object\",\"properties\":{\"q\":{\"type\":\"integer\"}},"
        " \"additionalProperties\":false}}}],"
        "\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"look\"}},"
        "\"user\":\"u-1\",\"stream\":true}");
    json_t *b;

    (void)state;
    b = rt_dialect_gemini.request(chat, &d, 1, err, sizeof(err));
    if (b == NULL)
        fail_msg("%s", err);
    assert_json(
        b,
        "{\"contents\":["
        "{\"role\":\"user\",\"parts\":[{\"text\":\"what is this?\"},"
        " {\"inlineData\":{\"mimeType\":\"image/png\",\"data\":\"iVBOR\"}},"
        " {\"fileData\":{\"mimeType\":\"image/jpeg\",\"fileUri\":\"https://x.test/a.JPG?s=1\"}}]},"
        "{\"role\":\"model\",\"parts\":[{\"functionCall\":{\"name\":\"look\",\"args\":{\"q\":1}}},"
        " {\"functionCall\":{\"name\":\"zoom\",\"args\":{\"value\":\"not json\"}}}]},"
        "{\"role\":\"user\",\"parts\":["
        " {\"functionResponse\":{\"name\":\"look\",\"response\":{\"found\":true}}},"
        " {\"functionResponse\":{\"name\":\"zoom\",\"response\":{\"content\":\"plain\"}}}]},"
        "{\"role\":\"user\",\"parts\":[{\"text\":\"thanks\"}]}],"
        "\"systemInstruction\":{\"parts\":[{\"text\":\"be brief\"},{\"text\":\"and kind\"}]},"
        "\"generationConfig\":{\"temperature\":0.2,\"topP\":0.9,\"maxOutputTokens\":64,"
        " \"stopSequences\":[\"END\"],\"seed\":7,\"responseMimeType\":\"application/json\","
        " \"responseSchema\":{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"}}}},"
        "\"tools\":[{\"functionDeclarations\":[{\"name\":\"look\",\"description\":\"d\","
        " \"parameters\":{\"type\":\"object\",\"properties\":{\"q\":{\"type\":\"integer\"}}}}]}],"
        "\"toolConfig\":{\"functionCallingConfig\":{\"mode\":\"ANY\","
        " \"allowedFunctionNames\":[\"look\"]}}}");
    json_decref(b);
    json_decref(chat);

    /* refusals with the reason */
    chat = parse("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\","
                 "\"image_url\":{\"url\":\"https://x.test/picture\"}}]}]}");
    assert_null(rt_dialect_gemini.request(chat, &d, 0, err, sizeof(err)));
    assert_string_equal(err, "messages: an image URL must be a data: URL or end in .png, .jpg, "
                             ".jpeg, .gif, .webp or .pdf");
    json_decref(chat);
    /* a PDF file part inline (the Gemini API refuses a displayName: the filename is left
     * out; Vertex AI keeps it, test_request_tool_result_media); an upload refused */
    chat = parse("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"file\",\"file\":{"
                 "\"file_data\":\"data:application/pdf;base64,JVBERi0x\",\"filename\":\"a.pdf\"}},"
                 "{\"type\":\"text\",\"text\":\"sum\"}]}]}");
    b = rt_dialect_gemini.request(chat, &d, 0, err, sizeof(err));
    if (b == NULL)
        fail_msg("%s", err);
    assert_json(json_object_get(b, "contents"),
                "[{\"role\":\"user\",\"parts\":[{\"inlineData\":{\"mimeType\":"
                "\"application/pdf\",\"data\":\"JVBERi0x\"}},{\"text\":\"sum\"}]}]");
    json_decref(b);
    json_decref(chat);
    chat = parse("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"file\",\"file\":{"
                 "\"file_id\":\"file-9\"}}]}]}");
    assert_null(rt_dialect_gemini.request(chat, &d, 0, err, sizeof(err)));
    assert_string_equal(err, "messages: content[0].file.file_id: an uploaded file cannot be "
                             "translated (send the PDF as file_data)");
    json_decref(chat);
    chat = parse("{\"messages\":[{\"role\":\"narrator\",\"content\":\"x\"}]}");
    assert_null(rt_dialect_gemini.request(chat, &d, 0, err, sizeof(err)));
    assert_string_equal(err, "messages: role \"narrator\" is not supported");
    json_decref(chat);
    chat = parse("{\"messages\":[]}");
    assert_null(rt_dialect_gemini.request(chat, &d, 0, err, sizeof(err)));
    json_decref(chat);
    chat =
        parse("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tool_choice\":\"maybe\"}");
    assert_null(rt_dialect_gemini.request(chat, &d, 0, err, sizeof(err)));
    json_decref(chat);
    /* Claude's reasoning of an earlier turn (reasoning_content, thinking_blocks with their
     * signatures) has no place in Gemini, whose model could not check a Claude signature: not
     * sent, as OpenAI chat sends no reasoning back either */
    chat = parse("{\"messages\":[{\"role\":\"user\",\"content\":\"q\"},{\"role\":"
                 "\"assistant\",\"content\":\"a\",\"reasoning_content\":\"t\",\"thinking_blocks\":["
                 "{\"type\":\"thinking\",\"thinking\":\"t\",\"signature\":\"s\"},{\"type\":"
                 "\"redacted_thinking\",\"data\":\"d\"}]},{\"role\":\"user\",\"content\":\"r\"}]}");
    b = rt_dialect_gemini.request(chat, &d, 0, err, sizeof(err));
    if (b == NULL)
        fail_msg("%s", err);
    assert_json(json_object_get(b, "contents"),
                "[{\"role\":\"user\",\"parts\":[{\"text\":\"q\"}]},{\"role\":\"model\","
                "\"parts\":[{\"text\":\"a\"}]},{\"role\":\"user\",\"parts\":[{\"text\":\"r\"}]}]");
    json_decref(b);
    json_decref(chat);
    /* the simple case: tool_choice none, max_completion_tokens wins */
    chat = parse("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"tool_choice\":\"none\","
                 "\"max_completion_tokens\":5,\"max_tokens\":9,\"stop\":[\"a\",\"b\"]}");
    b = rt_dialect_gemini.request(chat, &d, 0, err, sizeof(err));
    assert_json(b, "{\"contents\":[{\"role\":\"user\",\"parts\":[{\"text\":\"hi\"}]}],"
                   "\"generationConfig\":{\"maxOutputTokens\":5,\"stopSequences\":[\"a\",\"b\"]},"
                   "\"toolConfig\":{\"functionCallingConfig\":{\"mode\":\"NONE\"}}}");
    json_decref(b);
    json_decref(chat);
}

/* Pydantic writes nested models as "$ref": "#/$defs/Name", which Gemini refuses: references
 * are inlined (the $ref's siblings kept), $defs left out; a recursive one cannot be, nor one
 * that points nowhere, nor one whose inlining multiplies past the bound: 400s naming the
 * field. */
static void test_request_schema_refs_inlined(void **state)
{
    struct rt_deployment_conf d = dep_of(&rt_provider_gemini, "gemini-2.0-flash");
    char err[256], in[2048];
    json_t *chat, *b;

    (void)state;
    chat = parse(
        "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
        "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"w\",\"parameters\":{"
        " \"$defs\":{\"Pet\":{\"type\":\"object\",\"properties\":{\"kind\":{"
        "   \"$ref\":\"#/$defs/Kind\"}},\"additionalProperties\":false},"
        "  \"Kind\":{\"type\":\"string\",\"enum\":[\"cat\",\"dog\"]}},"
        " \"type\":\"object\",\"properties\":{"
        "  \"pet\":{\"$ref\":\"#/$defs/Pet\",\"description\":\"the pet\"},"
        "  \"pets\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/definitions/a~1b\"}},"
        "  \"$ref\":{\"type\":\"string\"}},"
        " \"definitions\":{\"a/b\":{\"type\":\"integer\"}}}}}],"
        "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"r\","
        " \"schema\":{\"type\":\"object\",\"properties\":{\"k\":{\"$ref\":\"#/$defs/K\"}},"
        "  \"$defs\":{\"K\":{\"type\":\"boolean\"}}}}}}");
    b = rt_dialect_gemini.request(chat, &d, 0, err, sizeof(err));
    if (b == NULL)
        fail_msg("%s", err);
    assert_json(json_object_get(json_array_get(json_object_get(json_array_get(
                                    json_object_get(b, "tools"), 0), "functionDeclarations"), 0),
                                "parameters"),
                "{\"type\":\"object\",\"properties\":{"
                "\"pet\":{\"type\":\"object\",\"description\":\"the pet\",\"properties\":{"
                " \"kind\":{\"type\":\"string\",\"enum\":[\"cat\",\"dog\"]}}},"
                "\"pets\":{\"type\":\"array\",\"items\":{\"type\":\"integer\"}},"
                "\"$ref\":{\"type\":\"string\"}}}");
    assert_json(json_object_get(json_object_get(b, "generationConfig"), "responseSchema"),
                "{\"type\":\"object\",\"properties\":{\"k\":{\"type\":\"boolean\"}}}");
    json_decref(b);
    json_decref(chat);

    /* a recursive model (a tree) */
    chat = parse("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":["
                 "{\"type\":\"function\",\"function\":{\"name\":\"v\"}},"
                 "{\"type\":\"function\",\"function\":{\"name\":\"w\",\"parameters\":{"
                 " \"$ref\":\"#/$defs/Node\",\"$defs\":{\"Node\":{\"type\":\"object\","
                 " \"properties\":{\"kids\":{\"type\":\"array\",\"items\":{"
                 "  \"$ref\":\"#/$defs/Node\"}}}}}}}}]}");
    assert_null(rt_dialect_gemini.request(chat, &d, 0, err, sizeof(err)));
    assert_string_equal(err, "tools[1].function.parameters: $ref \"#/$defs/Node\" is recursive: "
                             "Gemini takes no references and a recursive one cannot be inlined");
    json_decref(chat);
    /* one that points nowhere */
    chat = parse("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                 "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"r\","
                 " \"schema\":{\"$ref\":\"https://x.test/s.json\"}}}}");
    assert_null(rt_dialect_gemini.request(chat, &d, 0, err, sizeof(err)));
    assert_string_equal(err, "response_format.json_schema.schema: $ref \"https://x.test/s.json\" "
                             "does not point to a schema in this one (Gemini takes no references: "
                             "they are inlined)");
    json_decref(chat);
    /* each level used five times: 5^6 copies once inlined */
    {
        size_t n = 0;

        n += (size_t)snprintf(in + n, sizeof(in) - n,
                              "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":["
                              "{\"type\":\"function\",\"function\":{\"name\":\"w\","
                              "\"parameters\":{\"$ref\":\"#/$defs/d0\",\"$defs\":{");
        for (int k = 0; k < 6; k++) {
            n += (size_t)snprintf(in + n, sizeof(in) - n,
                                  "\"d%d\":{\"type\":\"object\",\"properties\":{", k);
            for (char c = 'a'; c <= 'e'; c++)
                n += (size_t)snprintf(in + n, sizeof(in) - n, "\"%c\":{\"$ref\":\"#/$defs/d%d\"}%s",
                                      c, k + 1, c < 'e' ? "," : "}},");
        }
        snprintf(in + n, sizeof(in) - n, "\"d6\":{\"type\":\"string\"}}}}}]}");
    }
    chat = parse(in);
    assert_null(rt_dialect_gemini.request(chat, &d, 0, err, sizeof(err)));
    assert_string_equal(err, "tools[0].function.parameters: larger than 10000 objects once its "
                             "references are inlined");
    json_decref(chat);
}

/* A tool result marked as an error (an Anthropic tool_result with is_error, through chat)
 * lost the mark's meaning: it goes as functionResponse.response {"error": ...}, the key Google's
 * reference gives for a failed call. */
static void test_request_tool_error(void **state)
{
    struct rt_deployment_conf d = dep_of(&rt_provider_gemini, "gemini-2.0-flash");
    char err[256];
    json_t *chat = parse(
        "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"},"
        "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":["
        " {\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"look\",\"arguments\":\"{}\"}},"
        " {\"id\":\"c2\",\"type\":\"function\",\"function\":{\"name\":\"zoom\",\"arguments\":\"{}\"}},"
        " {\"id\":\"c3\",\"type\":\"function\",\"function\":{\"name\":\"pan\",\"arguments\":\"{}\"}}]},"
        "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"[tool error] no such file\"},"
        "{\"role\":\"tool\",\"tool_call_id\":\"c2\",\"content\":[{\"type\":\"text\","
        " \"text\":\"[tool error]\"},{\"type\":\"text\",\"text\":\"{\\\"code\\\":7}\"}]},"
        "{\"role\":\"tool\",\"tool_call_id\":\"c3\",\"content\":\"[tool error]x\"}]}");
    json_t *b;

    (void)state;
    b = rt_dialect_gemini.request(chat, &d, 0, err, sizeof(err));
    if (b == NULL)
        fail_msg("%s", err);
    assert_json(json_array_get(json_object_get(b, "contents"), 2),
                "{\"role\":\"user\",\"parts\":["
                "{\"functionResponse\":{\"name\":\"look\",\"response\":{\"error\":\"no such file\"}}},"
                "{\"functionResponse\":{\"name\":\"zoom\",\"response\":{\"error\":{\"code\":7}}}},"
                "{\"functionResponse\":{\"name\":\"pan\",\"response\":{\"content\":"
                "\"[tool error]x\"}}}]}");
    json_decref(b);
    json_decref(chat);

}

/* Images and PDFs in a tool result (an Anthropic tool_result with an image, a chat tool
 * message's image_url part) go as functionResponse.parts, Gemini's multimodal function
 * responses: inline data on both APIs, a URL by reference on Vertex AI only (the Gemini API
 * takes no fileData there: a 400 naming the part, as for a part of another type). Before, every
 * such result was refused. Vertex AI also keeps a PDF's filename as inlineData.displayName, a
 * field the Gemini API refuses. */
static void test_request_tool_result_media(void **state)
{
    struct rt_deployment_conf d = dep_of(&rt_provider_gemini, "gemini-3-flash");
    char err[256];
#define MEDIA_CALL(parts)                                                                      \
    "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"},"                                     \
    "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"c1\","                   \
    " \"type\":\"function\",\"function\":{\"name\":\"shot\",\"arguments\":\"{}\"}}]},"          \
    "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":[" parts "]}]}"
    json_t *chat, *b;

    (void)state;
    chat = parse(MEDIA_CALL(
        "{\"type\":\"text\",\"text\":\"[tool error] \"},{\"type\":\"text\",\"text\":\"blurred\"},"
        "{\"type\":\"image_url\",\"image_url\":{\"url\":\"data:image/png;base64,iVBOR\"}},"
        "{\"type\":\"file\",\"file\":{\"file_data\":"
        " \"data:application/pdf;base64,JVBERi0x\",\"filename\":\"r.pdf\"}}"));
    b = rt_dialect_gemini.request(chat, &d, 0, err, sizeof(err));
    if (b == NULL)
        fail_msg("%s", err);
    assert_json(json_array_get(json_object_get(b, "contents"), 2),
                "{\"role\":\"user\",\"parts\":[{\"functionResponse\":{\"name\":\"shot\","
                "\"response\":{\"error\":\"blurred\"},\"parts\":["
                "{\"inlineData\":{\"mimeType\":\"image/png\",\"data\":\"iVBOR\"}},"
                "{\"inlineData\":{\"mimeType\":\"application/pdf\",\"data\":\"JVBERi0x\"}}]}}]}");
    json_decref(b);
    b = rt_dialect_vertex_gemini.request(chat, &d, 0, err, sizeof(err));
    if (b == NULL)
        fail_msg("%s", err);
    assert_json(json_object_get(json_array_get(json_object_get(json_array_get(json_object_get(
                                                   b, "contents"), 2), "parts"), 0),
                                "functionResponse"),
                "{\"name\":\"shot\",\"response\":{\"error\":\"blurred\"},\"parts\":["
                "{\"inlineData\":{\"mimeType\":\"image/png\",\"data\":\"iVBOR\"}},"
                "{\"inlineData\":{\"mimeType\":\"application/pdf\",\"data\":\"JVBERi0x\","
                "\"displayName\":\"r.pdf\"}}]}");
    json_decref(b);
    json_decref(chat);

    /* by URL: Vertex AI only */
    chat = parse(MEDIA_CALL("{\"type\":\"image_url\",\"image_url\":{\"url\":\"gs://b/p.jpg\"}}"));
    assert_null(rt_dialect_gemini.request(chat, &d, 0, err, sizeof(err)));
    assert_string_equal(err, "messages[2].content[0].image_url.url: the Gemini API takes an image "
                             "in a tool result inline only (a data: URL), not by URL");
    b = rt_dialect_vertex_gemini.request(chat, &d, 0, err, sizeof(err));
    if (b == NULL)
        fail_msg("%s", err);
    assert_json(json_object_get(json_array_get(json_object_get(json_array_get(json_object_get(
                                                   b, "contents"), 2), "parts"), 0),
                                "functionResponse"),
                "{\"name\":\"shot\",\"response\":{\"content\":\"\"},\"parts\":["
                "{\"fileData\":{\"mimeType\":\"image/jpeg\",\"fileUri\":\"gs://b/p.jpg\"}}]}");
    json_decref(b);
    json_decref(chat);

    /* a part of another kind, and a bad image, are refused naming them */
    chat = parse(MEDIA_CALL("{\"type\":\"input_audio\",\"input_audio\":{}}"));
    assert_null(rt_dialect_vertex_gemini.request(chat, &d, 0, err, sizeof(err)));
    assert_string_equal(err, "messages[2].content[0]: a tool result's \"input_audio\" part "
                             "cannot be translated: Gemini's functionResponse takes text, images "
                             "and PDFs");
    json_decref(chat);
    chat = parse(
        MEDIA_CALL("{\"type\":\"image_url\",\"image_url\":{\"url\":\"data:image/png,raw\"}}"));
    assert_null(rt_dialect_gemini.request(chat, &d, 0, err, sizeof(err)));
    assert_string_equal(err, "messages: a data: URL must be base64 (data:<type>;base64,...)");
    json_decref(chat);

    /* a user turn's PDF keeps its name on Vertex AI */
    chat = parse("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"file\",\"file\":{"
                 "\"file_data\":\"data:application/pdf;base64,JVBERi0x\","
                 "\"filename\":\"a.pdf\"}}]}]}");
    b = rt_dialect_vertex_gemini.request(chat, &d, 0, err, sizeof(err));
    if (b == NULL)
        fail_msg("%s", err);
    assert_json(json_object_get(b, "contents"),
                "[{\"role\":\"user\",\"parts\":[{\"inlineData\":{\"mimeType\":"
                "\"application/pdf\",\"data\":\"JVBERi0x\",\"displayName\":\"a.pdf\"}}]}]");
    json_decref(b);
    json_decref(chat);
#undef MEDIA_CALL
}

/* ---- the dialect: answers ---- */

static void test_response(void **state)
{
    char err[256];
    json_t *a = parse(
        "{\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":["
        " {\"text\":\"let me think\",\"thought\":true},{\"text\":\"Hello \"},{\"text\":\"there\"},"
        " {\"functionCall\":{\"name\":\"look\",\"args\":{\"q\":2}}}]},"
        " \"finishReason\":\"STOP\",\"index\":0}],"
        "\"usageMetadata\":{\"promptTokenCount\":10,\"candidatesTokenCount\":4,"
        " \"thoughtsTokenCount\":3,\"cachedContentTokenCount\":4,\"totalTokenCount\":17},"
        "\"responseId\":\"r-1\"}");
    json_t *c;

    (void)state;
    c = rt_dialect_gemini.response(a, "my-model", err, sizeof(err));
    assert_non_null(c);
    json_object_del(c, "created");
    assert_json(c, "{\"id\":\"chatcmpl-r-1\",\"object\":\"chat.completion\",\"model\":\"my-model\","
                   "\"choices\":[{\"index\":0,\"finish_reason\":\"tool_calls\",\"message\":{"
                   " \"role\":\"assistant\",\"content\":\"Hello there\","
                   " \"reasoning_content\":\"let me think\",\"tool_calls\":[{\"id\":\"call_r-1_0\","
                   " \"type\":\"function\",\"function\":{\"name\":\"look\","
                   " \"arguments\":\"{\\\"q\\\":2}\"}}]}}],"
                   "\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":7,\"total_tokens\":17,"
                   " \"prompt_tokens_details\":{\"cached_tokens\":4},"
                   " \"completion_tokens_details\":{\"reasoning_tokens\":3}}}");
    json_decref(c);
    json_decref(a);
    a = parse("{\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"cut\"}]},"
              "\"finishReason\":\"MAX_TOKENS\"}],\"usageMetadata\":{\"promptTokenCount\":1}}");
    c = rt_dialect_gemini.response(a, "m", err, sizeof(err));
    assert_string_equal(json_string_value(json_object_get(
                            json_array_get(json_object_get(c, "choices"), 0), "finish_reason")),
                        "length");
    json_decref(c);
    json_decref(a);
    /* a prompt refused before any candidate */
    a = parse("{\"promptFeedback\":{\"blockReason\":\"SAFETY\"},\"usageMetadata\":"
              "{\"promptTokenCount\":8}}");
    c = rt_dialect_gemini.response(a, "m", err, sizeof(err));
    assert_string_equal(json_string_value(json_object_get(
                            json_array_get(json_object_get(c, "choices"), 0), "finish_reason")),
                        "content_filter");
    json_decref(c);
    json_decref(a);
    a = parse("{\"candidates\":{}}");
    assert_null(rt_dialect_gemini.response(a, "m", err, sizeof(err)));
    json_decref(a);
    a = parse("{\"candidates\":[{\"content\":{\"parts\":[{\"functionCall\":{\"args\":{}}}]}}]}");
    assert_null(rt_dialect_gemini.response(a, "m", err, sizeof(err)));
    json_decref(a);
}

/* ---- the dialect: streams ---- */

/* The id of tool call k of an answer's first choice, or NULL. Borrowed from a. */
static const char *call_id(const json_t *a, size_t k)
{
    const json_t *c = json_array_get(json_object_get(a, "choices"), 0);
    const json_t *calls = json_object_get(json_object_get(c, "message"), "tool_calls");

    return json_string_value(json_object_get(json_array_get(calls, k), "id"));
}

/* Gemini has no call ids: every answer's calls were call_0, call_1, ..., so a client matching
 * results by id mixed up turns. The ids are unique to the answer (its responseId, else the
 * clock and a counter), and the results sent back still reach the right functionResponse
 * name. */
static void test_call_ids_unique_across_turns(void **state)
{
    struct rt_deployment_conf d = dep_of(&rt_provider_gemini, "gemini-2.0-flash");
    char err[256], in[2048];
    json_t *ans = parse("{\"candidates\":[{\"content\":{\"parts\":["
                        "{\"functionCall\":{\"name\":\"look\",\"args\":{}}},"
                        "{\"functionCall\":{\"name\":\"zoom\",\"args\":{}}}]}}]}");
    json_t *a1, *a2, *chat, *b;
    const char *id1, *id2, *id3;

    (void)state;
    a1 = rt_dialect_gemini.response(ans, "m", err, sizeof(err));
    a2 = rt_dialect_gemini.response(ans, "m", err, sizeof(err));
    assert_non_null(a1);
    assert_non_null(a2);
    id1 = call_id(a1, 0);
    id2 = call_id(a2, 0);
    id3 = call_id(a2, 1);
    assert_non_null(id1);
    assert_non_null(id2);
    assert_non_null(id3);
    assert_string_not_equal(id1, id2);
    assert_string_not_equal(id2, id3);
    assert_int_equal(strspn(id1, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-"),
                     strlen(id1));
    /* two turns: each result answers its own call */
    snprintf(in, sizeof(in),
             "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"},"
             "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"%s\","
             " \"type\":\"function\",\"function\":{\"name\":\"look\",\"arguments\":\"{}\"}}]},"
             "{\"role\":\"tool\",\"tool_call_id\":\"%s\",\"content\":\"one\"},"
             "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"%s\","
             " \"type\":\"function\",\"function\":{\"name\":\"zoom\",\"arguments\":\"{}\"}}]},"
             "{\"role\":\"tool\",\"tool_call_id\":\"%s\",\"content\":\"two\"}]}",
             id1, id1, id3, id3);
    chat = parse(in);
    b = rt_dialect_gemini.request(chat, &d, 0, err, sizeof(err));
    if (b == NULL)
        fail_msg("%s", err);
    assert_json(json_array_get(json_object_get(b, "contents"), 2),
                "{\"role\":\"user\",\"parts\":[{\"functionResponse\":{\"name\":\"look\","
                "\"response\":{\"content\":\"one\"}}}]}");
    assert_json(json_array_get(json_object_get(b, "contents"), 4),
                "{\"role\":\"user\",\"parts\":[{\"functionResponse\":{\"name\":\"zoom\","
                "\"response\":{\"content\":\"two\"}}}]}");
    json_decref(b);
    json_decref(chat);
    json_decref(a1);
    json_decref(a2);
    json_decref(ans);
}

static int ev(struct rt_dialect_stream *st, const char *data, struct tg_buf *out)
{
    char raw[2048];

    snprintf(raw, sizeof(raw), "data: %s\r\n\r\n", data);
    return rt_dialect_gemini.stream_event(st, raw, strlen(raw), out);
}

static void test_stream(void **state)
{
    struct rt_dialect_stream st;
    struct tg_buf out;
    const char *p;
    int n = 0;

    (void)state;
    assert_int_equal(tg_buf_init(&out, 8192), 0);
    rt_dialect_stream_init(&st, "shown", 100);
    assert_int_equal(ev(&st,
                        "{\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":"
                        "[{\"text\":\"Hel\"}]}}],\"usageMetadata\":{\"promptTokenCount\":9},"
                        "\"responseId\":\"s/9=\"}",
                        &out),
                     0);
    assert_int_equal(ev(&st,
                        "{\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"lo\"},"
                        "{\"functionCall\":{\"name\":\"f\",\"args\":{}}}]}}]}",
                        &out),
                     0);
    /* the end before the provider said it finished: a cut stream */
    assert_int_equal(rt_dialect_gemini.stream_end(&st, &out), TG_EPROTO);
    assert_int_equal(ev(&st,
                        "{\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"\"}]},"
                        "\"finishReason\":\"STOP\"}],\"usageMetadata\":"
                        "{\"promptTokenCount\":9,\"candidatesTokenCount\":3}}",
                        &out),
                     0);
    assert_int_equal(rt_dialect_gemini.stream_end(&st, &out), 0);
    assert_int_equal(rt_dialect_gemini.stream_end(&st, &out), 0); /* once */
    /* every event a chat chunk; role first; the tool call indexed; finish, usage, [DONE] */
    for (p = out.data; (p = strstr(p, "data: ")) != NULL; p += 6)
        n++;
    assert_int_equal(n, 6);
    assert_non_null(strstr(out.data, "\"delta\":{\"content\":\"Hel\",\"role\":\"assistant\"}"));
    assert_non_null(strstr(out.data, "\"tool_calls\":[{\"id\":\"call_s9_0\",\"type\":\"function\","
                                     "\"function\":{\"name\":\"f\",\"arguments\":\"{}\"},"
                                     "\"index\":0}]"));
    assert_non_null(strstr(out.data, "\"finish_reason\":\"tool_calls\""));
    assert_non_null(strstr(out.data, "\"choices\":[],\"usage\":{\"prompt_tokens\":9,"
                                     "\"completion_tokens\":3,\"total_tokens\":12}"));
    assert_non_null(strstr(out.data, "\"model\":\"shown\""));
    assert_int_equal(strcmp(out.data + out.len - 14, "data: [DONE]\n\n"), 0);
    /* not Gemini's shape, or an in-band error */
    tg_buf_reset(&out);
    rt_dialect_stream_init(&st, "m", 1);
    assert_int_equal(ev(&st, "[1]", &out), TG_EPROTO);
    assert_int_equal(ev(&st, "{\"error\":{\"code\":500}}", &out), TG_EPROTO);
    assert_int_equal(ev(&st, "{\"candidates\":[{\"content\":{\"parts\":7}}]}", &out), TG_EPROTO);
    /* a prompt refused in a stream */
    assert_int_equal(ev(&st, "{\"promptFeedback\":{\"blockReason\":\"OTHER\"}}", &out), 0);
    assert_int_equal(rt_dialect_gemini.stream_end(&st, &out), 0);
    assert_non_null(strstr(out.data, "\"finish_reason\":\"content_filter\""));
    tg_buf_fini(&out);
}

/* ---- embeddings ---- */

static void test_embeddings(void **state)
{
    struct rt_deployment_conf d = dep_of(&rt_provider_gemini, "text-embedding-004");
    char err[256];
    json_t *req = parse("{\"model\":\"e\",\"input\":[\"a\",\"b\"],\"dimensions\":8}");
    json_t *b, *a, *o;

    (void)state;
    b = rt_dialect_gemini.embed_request(req, &d, err, sizeof(err));
    assert_json(b, "{\"requests\":[{\"model\":\"models/text-embedding-004\",\"content\":{\"parts\":"
                   "[{\"text\":\"a\"}]},\"outputDimensionality\":8},{\"model\":"
                   "\"models/text-embedding-004\",\"content\":{\"parts\":[{\"text\":\"b\"}]},"
                   "\"outputDimensionality\":8}]}");
    json_decref(b);
    a = parse("{\"embeddings\":[{\"values\":[0.1,0.2]},{\"values\":[0.3]}]}");
    o = rt_dialect_gemini.embed_response(a, "shown", err, sizeof(err));
    assert_json(o, "{\"object\":\"list\",\"model\":\"shown\",\"data\":["
                   "{\"object\":\"embedding\",\"index\":0,\"embedding\":[0.1,0.2]},"
                   "{\"object\":\"embedding\",\"index\":1,\"embedding\":[0.3]}],"
                   "\"usage\":{\"prompt_tokens\":0,\"total_tokens\":0}}");
    json_decref(o);
    json_decref(a);
    b = rt_dialect_vertex_gemini.embed_request(req, &d, err, sizeof(err));
    assert_json(b, "{\"instances\":[{\"content\":\"a\"},{\"content\":\"b\"}],"
                   "\"parameters\":{\"outputDimensionality\":8}}");
    json_decref(b);
    a = parse("{\"predictions\":[{\"embeddings\":{\"values\":[1],\"statistics\":{\"token_count\":"
              "4}}},{\"embeddings\":{\"values\":[2],\"statistics\":{\"token_count\":3}}}]}");
    o = rt_dialect_vertex_gemini.embed_response(a, "shown", err, sizeof(err));
    assert_int_equal(
        json_integer_value(json_object_get(json_object_get(o, "usage"), "prompt_tokens")), 7);
    json_decref(o);
    json_decref(a);
    /* OpenAI's base64 form, for a client that asked for it */
    o = parse("{\"data\":[{\"index\":0,\"embedding\":[0.5,0.25]},{\"index\":1,"
              "\"embedding\":[]}]}");
    assert_int_equal(rt_dialect_embeddings_base64(o), 0);
    assert_json(o, "{\"data\":[{\"index\":0,\"embedding\":\"AAAAPwAAgD4=\"},{\"index\":1,"
                   "\"embedding\":\"\"}]}");
    json_decref(o);
    json_decref(req);
    req = parse("{\"input\":[[1,2,3]]}");
    assert_null(rt_dialect_gemini.embed_request(req, &d, err, sizeof(err)));
    assert_string_equal(err, "input: token arrays are not supported by this provider");
    json_decref(req);
}

/* ---- families: URLs, headers, classes, retry delays ---- */

static void url_of(const struct rt_deployment_conf *d, enum rt_api api, int stream, char *url)
{
    struct rt_provider_attempt a;

    memset(&a, 0, sizeof(a));
    a.dep = d;
    a.wire = api;
    a.stream = stream;
    d->prov->url(&a, url, RT_PROVIDER_URL_CAP);
}

static void test_gemini_family(void **state)
{
    struct rt_deployment_conf d = dep_of(&rt_provider_gemini, "gemini-2.0-flash");
    char url[RT_PROVIDER_URL_CAP];
    char hdr[RT_PROVIDER_HEADERS_MAX][RT_PROVIDER_HEADER_CAP];
    struct rt_provider_attempt a;
    struct rt_wire w;
    const char *blocked = "{\"promptFeedback\":{\"blockReason\":\"SAFETY\"}}";
    const char *big = "{\"error\":{\"code\":400,\"message\":\"The input token count (1200000) "
                      "exceeds the maximum number of tokens allowed (1048576).\",\"status\":"
                      "\"INVALID_ARGUMENT\"}}";
    const char *quota = "{\"error\":{\"code\":429,\"status\":\"RESOURCE_EXHAUSTED\",\"details\":"
                        "[{\"@type\":\"type.googleapis.com/google.rpc.RetryInfo\","
                        "\"retryDelay\": \"37s\"}]}}";

    (void)state;
    url_of(&d, RT_API_CHAT, 0, url);
    assert_string_equal(url, "https://generativelanguage.googleapis.com/v1beta/models/"
                             "gemini-2.0-flash:generateContent");
    snprintf(d.api_base, sizeof(d.api_base), "http://127.0.0.1:9/v1beta");
    url_of(&d, RT_API_CHAT, 1, url);
    assert_string_equal(url, "http://127.0.0.1:9/v1beta/models/gemini-2.0-flash:"
                             "streamGenerateContent?alt=sse");
    url_of(&d, RT_API_EMBEDDINGS, 0, url);
    assert_string_equal(url, "http://127.0.0.1:9/v1beta/models/gemini-2.0-flash:"
                             "batchEmbedContents");
    snprintf(d.api_key, sizeof(d.api_key), "AIza-test");
    memset(&a, 0, sizeof(a));
    a.dep = &d;
    assert_int_equal(d.prov->headers(&a, url, hdr), 1);
    assert_string_equal(hdr[0], "x-goog-api-key: AIza-test");
    assert_int_equal(d.prov->wire(&d, RT_API_MESSAGES, &w), 0);
    assert_ptr_equal(w.dialect, &rt_dialect_gemini);
    assert_int_equal(w.api, RT_API_CHAT);
    assert_int_equal(w.dir, RT_TRANSLATE_CHAT_TO_MESSAGES);
    assert_int_equal(d.prov->wire(&d, RT_API_RESPONSES, &w), 0);
    assert_ptr_equal(w.dialect, &rt_dialect_gemini);
    assert_int_equal(w.api, RT_API_CHAT);
    assert_int_equal(w.dir, RT_TRANSLATE_NONE);
    assert_int_equal(w.responses, 1);
    assert_int_equal(d.prov->classify(200, blocked, strlen(blocked)), RT_ERR_CONTENT_POLICY);
    assert_int_equal(d.prov->classify(400, big, strlen(big)), RT_ERR_CONTEXT_WINDOW);
    assert_int_equal(d.prov->classify(429, quota, strlen(quota)), RT_ERR_RATE_LIMIT);
    assert_int_equal(d.prov->classify(200, "{\"candidates\":[]}", 17), RT_ERR_NONE);
    /* Gemini's answer to a bad key (ai.google.dev troubleshooting: 400 INVALID_ARGUMENT) */
    {
        static const char badkey[] =
            "{\"error\":{\"code\":400,\"message\":\"API key not valid. Please pass a valid API "
            "key.\",\"status\":\"INVALID_ARGUMENT\",\"details\":[{\"@type\":"
            "\"type.googleapis.com/google.rpc.ErrorInfo\",\"reason\":\"API_KEY_INVALID\"}]}}";

        assert_int_equal(d.prov->classify(400, badkey, strlen(badkey)), RT_ERR_AUTH);
    }
    assert_int_equal(d.prov->retry_after(quota, strlen(quota)), 37);
    assert_int_equal(d.prov->retry_after("{\"retryDelay\":\"1.5s\"}", 21), 2);
    assert_int_equal(d.prov->retry_after("{\"retryDelay\":\"s\"}", 18), -1);
    assert_int_equal(d.prov->retry_after("{}", 2), -1);
}

/* ---- service accounts and the JWT ---- */

#define SA_TEXT(s) (s), strlen(s)

static size_t b64url_decode(const char *s, size_t n, unsigned char *out)
{
    size_t o = 0;
    unsigned v = 0;
    int bits = 0;

    for (size_t i = 0; i < n; i++) {
        const char *tab = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        const char *p = strchr(tab, s[i]);

        if (p == NULL)
            return 0;
        v = (v << 6) | (unsigned)(p - tab);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[o++] = (unsigned char)(v >> bits);
        }
    }
    return o;
}

static void test_service_account(void **state)
{
    struct rt_google_sa sa;
    struct rt_dep_cloud cloud;
    char err[256];
    char jwt[4096];
    unsigned char buf[2048];
    const char *dot1, *dot2;
    size_t n;
    json_t *j;
    BIO *b;
    EVP_PKEY *pub;
    EVP_MD_CTX *ctx;

    (void)state;
    assert_int_equal(rt_google_sa_parse(sa_json, strlen(sa_json), &sa, err, sizeof(err)), 0);
    assert_string_equal(sa.client_email, "svc@proj-1.iam.gserviceaccount.com");
    assert_string_equal(sa.private_key_id, "kid-0001");
    assert_string_equal(sa.project_id, "proj-1");
    assert_string_equal(sa.token_uri, "http://127.0.0.1:9/token");
    assert_int_equal(rt_crypto_rsa_key_check(sa.private_key, err, sizeof(err)), 0);
    /* refusals name the member, never a value */
    assert_int_equal(
        rt_google_sa_parse(SA_TEXT("{\"type\":\"authorized_user\"}"), &sa, err, sizeof(err)),
        TG_EINVAL);
    assert_string_equal(err, "service-account JSON: type must be \"service_account\"");
    assert_int_equal(rt_google_sa_parse(SA_TEXT("{\"type\":\"service_account\",\"client_email\":"
                                                "\"a\"}"),
                                        &sa, err, sizeof(err)),
                     TG_EINVAL);
    assert_string_equal(err, "service-account JSON: private_key must be a non-empty string");
    assert_int_equal(rt_google_sa_parse(SA_TEXT("{\"type\":\"service_account\",\"private_key\":"
                                                "\"SECRET\",\"client_email\":\"a b\"}"),
                                        &sa, err, sizeof(err)),
                     TG_EINVAL);
    assert_string_equal(err, "service-account JSON: client_email has a byte it cannot have");
    assert_int_equal(rt_google_sa_parse(SA_TEXT("not json SECRET"), &sa, err, sizeof(err)),
                     TG_EINVAL);
    assert_null(strstr(err, "SECRET"));
    assert_int_equal(
        rt_crypto_rsa_key_check("-----BEGIN PRIVATE KEY-----\nAAAA\n", err, sizeof(err)),
        TG_EINVAL);

    /* the JWT: header and claims as Google wants them, the signature checks out */
    memset(&cloud, 0, sizeof(cloud));
    snprintf(cloud.sa_client_email, sizeof(cloud.sa_client_email), "svc@x.test");
    snprintf(cloud.sa_private_key_id, sizeof(cloud.sa_private_key_id), "kid-0001");
    snprintf(cloud.sa_private_key, sizeof(cloud.sa_private_key), "%s", key_pem);
    snprintf(cloud.sa_token_uri, sizeof(cloud.sa_token_uri), "https://oauth2.googleapis.com/token");
    assert_int_equal(rt_google_jwt(&cloud, 1700000000, jwt, sizeof(jwt), err, sizeof(err)), 0);
    dot1 = strchr(jwt, '.');
    dot2 = dot1 != NULL ? strchr(dot1 + 1, '.') : NULL;
    assert_non_null(dot2);
    n = b64url_decode(jwt, (size_t)(dot1 - jwt), buf);
    j = json_loadb((char *)buf, n, 0, NULL);
    assert_json(j, "{\"alg\":\"RS256\",\"typ\":\"JWT\",\"kid\":\"kid-0001\"}");
    json_decref(j);
    n = b64url_decode(dot1 + 1, (size_t)(dot2 - dot1 - 1), buf);
    j = json_loadb((char *)buf, n, 0, NULL);
    assert_json(j, "{\"iss\":\"svc@x.test\",\"scope\":"
                   "\"https://www.googleapis.com/auth/cloud-platform\",\"aud\":"
                   "\"https://oauth2.googleapis.com/token\",\"iat\":1700000000,"
                   "\"exp\":1700003600}");
    json_decref(j);
    n = b64url_decode(dot2 + 1, strlen(dot2 + 1), buf);
    assert_int_equal(n, 256);
    b = BIO_new_mem_buf(pub_pem, -1);
    pub = PEM_read_bio_PUBKEY(b, NULL, NULL, NULL);
    ctx = EVP_MD_CTX_new();
    assert_int_equal(EVP_DigestVerifyInit(ctx, NULL, EVP_sha256(), NULL, pub), 1);
    assert_int_equal(
        EVP_DigestVerify(ctx, buf, n, (const unsigned char *)jwt, (size_t)(dot2 - jwt)), 1);
    /* a changed claim does not verify */
    jwt[dot1 - jwt + 3] ^= 1;
    EVP_MD_CTX_free(ctx);
    ctx = EVP_MD_CTX_new();
    EVP_DigestVerifyInit(ctx, NULL, EVP_sha256(), NULL, pub);
    assert_int_not_equal(
        EVP_DigestVerify(ctx, buf, n, (const unsigned char *)jwt, (size_t)(dot2 - jwt)), 1);
    EVP_MD_CTX_free(ctx);
    EVP_PKEY_free(pub);
    BIO_free(b);
}

/* ---- vertex_ai configs and requests ---- */

static struct rt_config *load(const char *text, struct rt_config_diag *diag)
{
    return rt_config_load_buffer("router.yaml", text, strlen(text), diag);
}

static void test_vertex(void **state)
{
    static struct rt_config_diag diag;
    struct rt_config *cfg;
    char text[12288];
    char url[RT_PROVIDER_URL_CAP];
    char hdr[RT_PROVIDER_HEADERS_MAX][RT_PROVIDER_HEADER_CAP];
    char err[256];
    struct rt_provider_attempt a;
    struct rt_token_request tr;
    struct rt_wire w;
    const struct rt_deployment_conf *g, *c;
    json_t *body;
    char *inline_json;

    (void)state;
    body = json_string(sa_json);
    inline_json = json_dumps(body, JSON_ENCODE_ANY); /* the JSON as a quoted YAML scalar */
    json_decref(body);
    snprintf(text, sizeof(text),
             "model_list:\n"
             "  - model_name: g\n"
             "    litellm_params: {model: vertex_ai/gemini-2.0-flash, vertex_credentials: %s,\n"
             "                     vertex_location: europe-west4}\n"
             "  - model_name: c\n"
             "    litellm_params: {model: vertex_ai/claude-3-5-sonnet@20240620,\n"
             "                     vertex_project: other-proj, vertex_location: global,\n"
             "                     vertex_credentials: %s}\n"
             "  - model_name: t\n"
             "    litellm_params: {model: vertex_ai/gemini-x, vertex_credentials: %s,\n"
             "                     api_base: \"http://127.0.0.1:9/\"}\n",
             sa_path, inline_json, sa_path);
    free(inline_json);
    cfg = load(text, &diag);
    if (cfg == NULL)
        fail_msg("%s", diag.error);
    g = &cfg->deployments[0];
    c = &cfg->deployments[1];
    assert_ptr_equal(g->prov, &rt_provider_vertex);
    /* the project from the credentials, the regional host, the key read and the raw value wiped */
    assert_string_equal(g->cloud->vertex_project, "proj-1");
    assert_string_equal(g->api_base, "https://europe-west4-aiplatform.googleapis.com");
    assert_string_equal(g->cloud->sa_client_email, "svc@proj-1.iam.gserviceaccount.com");
    assert_string_equal(g->cloud->vertex_credentials, "");
    assert_string_equal(c->cloud->vertex_credentials, "");
    assert_string_equal(c->api_base, "https://aiplatform.googleapis.com");
    assert_string_equal(cfg->deployments[2].cloud->vertex_location, "us-central1");
    assert_string_equal(cfg->deployments[2].api_base, "http://127.0.0.1:9");
    assert_true(rt_provider_needs_token(g));
    memset(&a, 0, sizeof(a));
    a.dep = g;
    a.wire = RT_API_CHAT;
    a.stream = 1;
    g->prov->url(&a, url, sizeof(url));
    assert_string_equal(url, "https://europe-west4-aiplatform.googleapis.com/v1/projects/proj-1/"
                             "locations/europe-west4/publishers/google/models/gemini-2.0-flash:"
                             "streamGenerateContent?alt=sse");
    a.wire = RT_API_EMBEDDINGS;
    a.stream = 0;
    g->prov->url(&a, url, sizeof(url));
    assert_non_null(strstr(url, "/publishers/google/models/gemini-2.0-flash:predict"));
    assert_int_equal(g->prov->headers(&a, url, hdr), TG_EAGAIN);
    a.token = "ya29.tok";
    assert_int_equal(g->prov->headers(&a, url, hdr), 1);
    assert_string_equal(hdr[0], "Authorization: Bearer ya29.tok");
    assert_int_equal(g->prov->wire(g, RT_API_CHAT, &w), 0);
    assert_ptr_equal(w.dialect, &rt_dialect_vertex_gemini);
    /* Claude on Vertex: Anthropic's API in its rawPredict form */
    a.dep = c;
    a.wire = RT_API_MESSAGES;
    c->prov->url(&a, url, sizeof(url));
    assert_string_equal(url, "https://aiplatform.googleapis.com/v1/projects/other-proj/locations/"
                             "global/publishers/anthropic/models/claude-3-5-sonnet@20240620:"
                             "rawPredict");
    a.stream = 1;
    c->prov->url(&a, url, sizeof(url));
    assert_non_null(strstr(url, ":streamRawPredict"));
    assert_int_equal(c->prov->wire(c, RT_API_CHAT, &w), 0);
    assert_null(w.dialect);
    assert_int_equal(w.api, RT_API_MESSAGES);
    assert_int_equal(w.dir, RT_TRANSLATE_MESSAGES_TO_CHAT);
    assert_int_equal(c->prov->wire(c, RT_API_EMBEDDINGS, &w), TG_EINVAL);
    body = parse("{\"model\":\"claude-3-5-sonnet@20240620\",\"max_tokens\":5,\"messages\":[]}");
    assert_int_equal(c->prov->edit_body(body, c, 0, err, sizeof(err)), 0);
    assert_json(body, "{\"anthropic_version\":\"vertex-2023-10-16\",\"max_tokens\":5,"
                      "\"messages\":[]}");
    json_decref(body);
    /* the token request: a JWT-bearer grant at the credentials' token_uri */
    memset(&tr, 0, sizeof(tr));
    assert_int_equal(g->prov->token_request(g, 1700000000, &tr, err, sizeof(err)), 0);
    assert_string_equal(tr.url, "http://127.0.0.1:9/token");
    assert_string_equal(tr.headers[0], "Content-Type: application/x-www-form-urlencoded");
    assert_int_equal(strncmp(tr.body,
                             "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3A"
                             "jwt-bearer&assertion=eyJ",
                             77),
                     0);
    free(tr.body);
    rt_config_destroy(&cfg);

    /* refusals */
    cfg = load("model_list:\n  - {model_name: a, litellm_params: {model: vertex_ai/gemini-x}}\n",
               &diag);
    assert_null(cfg);
    assert_string_equal(diag.error, "router.yaml:2: model_list[0].litellm_params.model: vertex_ai "
                                    "needs vertex_credentials (a service-account JSON or its "
                                    "path), VERTEXAI_CREDENTIALS or "
                                    "GOOGLE_APPLICATION_CREDENTIALS");
    cfg = load("model_list:\n  - {model_name: a, litellm_params: {model: vertex_ai/gemini-x,\n"
               "     vertex_credentials: /nonexistent/sa.json}}\n",
               &diag);
    assert_null(cfg);
    assert_non_null(strstr(diag.error, "vertex_credentials: cannot open the file it names"));
    setenv("GOOGLE_APPLICATION_CREDENTIALS", sa_path, 1);
    cfg = load("model_list:\n  - {model_name: a, litellm_params: {model: vertex_ai/gemini-x,\n"
               "     vertex_location: \"us-east1/../x\"}}\n",
               &diag);
    assert_null(cfg);
    assert_non_null(strstr(diag.error, "vertex_location: expected a region name"));
    cfg = load("model_list:\n  - {model_name: a, litellm_params: {model: vertex_ai/gemini-x}}\n",
               &diag);
    if (cfg == NULL)
        fail_msg("%s", diag.error);
    assert_string_equal(cfg->deployments[0].cloud->vertex_project, "proj-1");
    rt_config_destroy(&cfg);
    unsetenv("GOOGLE_APPLICATION_CREDENTIALS");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_request),       cmocka_unit_test(test_response),
        cmocka_unit_test(test_request_schema_names_and_type_lists),
        cmocka_unit_test(test_request_tool_error),
        cmocka_unit_test(test_request_tool_result_media),
        cmocka_unit_test(test_call_ids_unique_across_turns),
        cmocka_unit_test(test_request_schema_refs_inlined),
        cmocka_unit_test(test_stream),        cmocka_unit_test(test_embeddings),
        cmocka_unit_test(test_gemini_family), cmocka_unit_test(test_service_account),
        cmocka_unit_test(test_vertex),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
