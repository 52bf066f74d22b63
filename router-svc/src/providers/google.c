/* google: the Gemini API (gemini/<model>) and Vertex AI (vertex_ai/<model>: Gemini models, and
 * Anthropic's Claude models through their rawPredict form). Both speak the generateContent
 * dialect (gemini.c) for Gemini models.
 *
 * Facts (URLs, headers, grant) from Google's documentation: ai.google.dev/api (generateContent,
 * streamGenerateContent?alt=sse, batchEmbedContents, the x-goog-api-key header),
 * cloud.google.com/vertex-ai/docs/reference/rest (projects.locations.publishers.models:
 * generateContent, streamGenerateContent, predict, rawPredict, streamRawPredict; the regional
 * host {location}-aiplatform.googleapis.com, aiplatform.googleapis.com for "global"),
 * cloud.google.com/vertex-ai/generative-ai/docs/partner-models/claude (anthropic_version
 * "vertex-2023-10-16" in the body, no model member), developers.google.com/identity/protocols/
 * oauth2/service-account (the JWT: RS256, iss the client_email, scope, aud the token_uri, iat,
 * exp at most an hour later; POST grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer and
 * assertion). Names of the parameters and variables from LiteLLM (litellm/llms/gemini,
 * litellm/llms/vertex_ai: GEMINI_API_KEY, GEMINI_API_BASE, VERTEXAI_PROJECT, VERTEXAI_LOCATION,
 * VERTEXAI_CREDENTIALS; GOOGLE_APPLICATION_CREDENTIALS as Google's client libraries read it).
 * A 429 says how long to wait in its body (google.rpc.RetryInfo retryDelay "37s"). */
#include "providers/provider.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "tg_err.h"
#include "usage.h"

#define GOOGLE_SCOPE "https://www.googleapis.com/auth/cloud-platform"
#define GOOGLE_TOKEN_URI "https://oauth2.googleapis.com/token"
#define VERTEX_LOCATION "us-central1"
#define VERTEX_ANTHROPIC_VERSION "vertex-2023-10-16"
#define GOOGLE_JWT_LIFETIME_S 3600
#define GOOGLE_JWT_MAX_BYTES 4096
#define SA_MAX_DEPTH 8
#define SA_MAX_ELEMENTS 256

/* ---- service-account credentials ---- */

static int sa_member(const json_t *j, const char *k, char *out, size_t cap, int required, char *err,
                     size_t errlen)
{
    const json_t *v = json_object_get(j, k);

    if (v == NULL && !required)
        return 0;
    if (!json_is_string(v) || json_string_length(v) == 0) {
        snprintf(err, errlen, "service-account JSON: %s must be a non-empty string", k);
        return TG_EINVAL;
    }
    if (json_string_length(v) >= cap || strlen(json_string_value(v)) != json_string_length(v)) {
        snprintf(err, errlen, "service-account JSON: %s is too long or has a NUL byte", k);
        return TG_EINVAL;
    }
    memcpy(out, json_string_value(v), json_string_length(v) + 1);
    return 0;
}

int rt_google_sa_parse(const char *text, size_t len, struct rt_google_sa *out, char *err,
                       size_t errlen)
{
    json_error_t jerr;
    json_t *j;
    const char *type;
    int rc = TG_EINVAL;

    memset(out, 0, sizeof(*out));
    if (len == 0 || len > RT_SA_JSON_MAX_BYTES) {
        snprintf(err, errlen, "service-account JSON: empty or over %u bytes", RT_SA_JSON_MAX_BYTES);
        return TG_EINVAL;
    }
    j = rt_json_load_bounded(text, len, SA_MAX_DEPTH, SA_MAX_ELEMENTS, &jerr);
    if (!json_is_object(j)) {
        /* jansson's message may quote the text: only the position */
        snprintf(err, errlen, "service-account JSON: not a JSON object (line %d)", jerr.line);
        goto out;
    }
    type = json_string_value(json_object_get(j, "type"));
    if (type == NULL || strcmp(type, "service_account") != 0) {
        snprintf(err, errlen, "service-account JSON: type must be \"service_account\"");
        goto out;
    }
    if (sa_member(j, "client_email", out->client_email, sizeof(out->client_email), 1, err,
                  errlen) != 0 ||
        sa_member(j, "private_key", out->private_key, sizeof(out->private_key), 1, err, errlen) !=
            0 ||
        sa_member(j, "private_key_id", out->private_key_id, sizeof(out->private_key_id), 0, err,
                  errlen) != 0 ||
        sa_member(j, "token_uri", out->token_uri, sizeof(out->token_uri), 0, err, errlen) != 0 ||
        sa_member(j, "project_id", out->project_id, sizeof(out->project_id), 0, err, errlen) != 0)
        goto out;
    if (out->token_uri[0] == '\0')
        snprintf(out->token_uri, sizeof(out->token_uri), "%s", GOOGLE_TOKEN_URI);
    if (strncmp(out->token_uri, "https://", 8) != 0 && strncmp(out->token_uri, "http://", 7) != 0) {
        snprintf(err, errlen, "service-account JSON: token_uri must be an http(s) URL");
        goto out;
    }
    for (const char *s = out->client_email; *s != '\0'; s++) {
        if (*s <= 0x20 || *s >= 0x7f || *s == '"' || *s == '\\') {
            snprintf(err, errlen, "service-account JSON: client_email has a byte it cannot have");
            goto out;
        }
    }
    for (const char *s = out->private_key_id; *s != '\0'; s++) {
        if (*s <= 0x20 || *s >= 0x7f || *s == '"' || *s == '\\') {
            snprintf(err, errlen, "service-account JSON: private_key_id has a byte it cannot have");
            goto out;
        }
    }
    rc = 0;
out:
    json_decref(j);
    if (rc != 0)
        memset(out, 0, sizeof(*out));
    return rc;
}

int rt_google_jwt(const struct rt_dep_cloud *sa, int64_t now_s, char *out, size_t cap, char *err,
                  size_t errlen)
{
    char head[512], claims[1536];
    char h64[700], c64[2100];
    unsigned char sig[1024];
    char s64[1400];
    size_t sl = 0, n;
    int hl, cl;

    hl = sa->sa_private_key_id[0] != '\0'
             ? snprintf(head, sizeof(head), "{\"alg\":\"RS256\",\"typ\":\"JWT\",\"kid\":\"%s\"}",
                        sa->sa_private_key_id)
             : snprintf(head, sizeof(head), "{\"alg\":\"RS256\",\"typ\":\"JWT\"}");
    cl = snprintf(claims, sizeof(claims),
                  "{\"iss\":\"%s\",\"scope\":\"%s\",\"aud\":\"%s\",\"iat\":%lld,\"exp\":%lld}",
                  sa->sa_client_email, GOOGLE_SCOPE, sa->sa_token_uri, (long long)now_s,
                  (long long)(now_s + GOOGLE_JWT_LIFETIME_S));
    if (hl < 0 || (size_t)hl >= sizeof(head) || cl < 0 || (size_t)cl >= sizeof(claims) ||
        rt_base64(head, (size_t)hl, h64, sizeof(h64), 1) == 0 ||
        rt_base64(claims, (size_t)cl, c64, sizeof(c64), 1) == 0) {
        snprintf(err, errlen, "JWT too large");
        return TG_EFULL;
    }
    n = (size_t)snprintf(out, cap, "%s.%s", h64, c64);
    if (n >= cap) {
        snprintf(err, errlen, "JWT too large");
        return TG_EFULL;
    }
    if (rt_crypto_rs256(sa->sa_private_key, out, n, sig, sizeof(sig), &sl) != 0) {
        snprintf(err, errlen, "the service account's private key cannot sign (RS256)");
        return TG_EINVAL;
    }
    if (rt_base64(sig, sl, s64, sizeof(s64), 1) == 0 || n + 1 + strlen(s64) >= cap) {
        snprintf(err, errlen, "JWT too large");
        return TG_EFULL;
    }
    out[n] = '.';
    memcpy(out + n + 1, s64, strlen(s64) + 1);
    return 0;
}

/* ---- shared ---- */

/* A prompt refused before any candidate answers 200 with promptFeedback.blockReason: content
 * policy. A request over the model's input limit: 400 INVALID_ARGUMENT "The input token count
 * (N) exceeds the maximum number of tokens allowed (M)". */
static enum rt_error_class google_classify(int status, const char *body, size_t len)
{
    if (status >= 200 && status < 300 && body != NULL && len > 0 &&
        memmem(body, len, "\"blockReason\"", 13) != NULL &&
        memmem(body, len, "\"candidates\"", 12) == NULL)
        return RT_ERR_CONTENT_POLICY;
    if (status == 400 && body != NULL && len > 0 &&
        (memmem(body, len, "exceeds the maximum number of tokens", 36) != NULL ||
         memmem(body, len, "input token count", 17) != NULL))
        return RT_ERR_CONTEXT_WINDOW;
    /* Gemini's API refuses a bad key with 400 INVALID_ARGUMENT, reason API_KEY_INVALID */
    if (status == 400 && body != NULL && len > 0 &&
        memmem(body, len, "API_KEY_INVALID", 15) != NULL)
        return RT_ERR_AUTH;
    return rt_router_classify(status, body, len);
}

/* google.rpc.RetryInfo: "retryDelay": "37s" (or "1.5s": rounded up). */
static long google_retry_after(const char *body, size_t len)
{
    const char *p = body != NULL ? memmem(body, len, "\"retryDelay\"", 12) : NULL;
    const char *end = body + len;
    long v = 0;
    int digits = 0, frac = 0;

    if (p == NULL)
        return -1;
    p += 12;
    while (p < end && (*p == ' ' || *p == ':' || *p == '\t'))
        p++;
    if (p >= end || *p != '"')
        return -1;
    for (p++; p < end && *p >= '0' && *p <= '9' && v < 86400; p++, digits++)
        v = v * 10 + (*p - '0');
    if (p < end && *p == '.') {
        for (p++; p < end && *p >= '0' && *p <= '9'; p++)
            frac |= *p != '0';
    }
    if (digits == 0 || p >= end || *p != 's')
        return -1;
    return v + (frac ? 1 : 0);
}

/* ---- gemini/ (the Gemini API) ---- */

static int gemini_wire(const struct rt_deployment_conf *dep, enum rt_api client,
                       struct rt_wire *out)
{
    (void)dep;
    return rt_dialect_wire(&rt_dialect_gemini, client, out);
}

static void gemini_url(const struct rt_provider_attempt *a, char *out, size_t cap)
{
    size_t bl;
    const char *base = rt_provider_base(a->dep, &rt_provider_gemini, &bl);
    const char *model = a->dep->model;
    char seg[RT_NAME_CAP * 3 + 1];

    if (strncmp(model, "models/", 7) == 0)
        model += 7;
    snprintf(out, cap, "%.*s/models/%s:%s", (int)bl, base,
             rt_provider_segment(model, "@", seg, sizeof(seg)),
             a->wire == RT_API_EMBEDDINGS ? "batchEmbedContents"
             : a->stream                  ? "streamGenerateContent?alt=sse"
                                          : "generateContent");
}

static int gemini_headers(const struct rt_provider_attempt *a, const char *url,
                          char hdr[][RT_PROVIDER_HEADER_CAP])
{
    (void)url;
    if (a->dep->api_key[0] == '\0')
        return 0;
    snprintf(hdr[0], RT_PROVIDER_HEADER_CAP, "x-goog-api-key: %s", a->dep->api_key);
    return 1;
}

const struct rt_provider rt_provider_gemini = {
    .name = "gemini",
    .default_base = "https://generativelanguage.googleapis.com/v1beta",
    .key_env = (const char *const[]){"GEMINI_API_KEY", NULL},
    .base_env = (const char *const[]){"GEMINI_API_BASE", NULL},
    .flags = 0,
    .wire = gemini_wire,
    .url = gemini_url,
    .headers = gemini_headers,
    .classify = google_classify,
    .retry_after = google_retry_after,
};

/* ---- vertex_ai/ ---- */

static int is_claude(const struct rt_deployment_conf *dep)
{
    return strncmp(dep->model, "claude", 6) == 0;
}

/* Read the credentials named by vertex_credentials (a path, or the JSON itself when it starts
 * with '{'), or by GOOGLE_APPLICATION_CREDENTIALS through the param variables, into the sa_
 * fields; the project and the location default; the regional host as the base. */
static int vertex_prepare(struct rt_deployment_conf *dep, char *err, size_t errlen)
{
    struct rt_dep_cloud *c;
    struct rt_google_sa *sa = NULL;
    const char *raw;
    char *file = NULL;
    size_t len;
    int rc = TG_ECONFIG;

    if (dep->cloud == NULL)
        dep->cloud = calloc(1, sizeof(*dep->cloud));
    c = dep->cloud;
    sa = calloc(1, sizeof(*sa));
    if (c == NULL || sa == NULL) {
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    raw = c->vertex_credentials;
    while (*raw == ' ' || *raw == '\t' || *raw == '\n' || *raw == '\r')
        raw++;
    if (*raw == '\0') {
        snprintf(err, errlen,
                 "vertex_ai needs vertex_credentials (a service-account JSON or its "
                 "path), VERTEXAI_CREDENTIALS or GOOGLE_APPLICATION_CREDENTIALS");
        goto out;
    }
    if (*raw == '{') {
        len = strlen(raw);
    } else {
        FILE *f = fopen(raw, "rb");
        size_t got;

        if (f == NULL) {
            snprintf(err, errlen, "vertex_credentials: cannot open the file it names");
            goto out;
        }
        file = malloc(RT_SA_JSON_MAX_BYTES + 1);
        got = file != NULL ? fread(file, 1, RT_SA_JSON_MAX_BYTES + 1, f) : 0;
        fclose(f);
        if (file == NULL || got == 0 || got > RT_SA_JSON_MAX_BYTES) {
            snprintf(err, errlen, "vertex_credentials: the file is empty or over %u bytes",
                     RT_SA_JSON_MAX_BYTES);
            goto out;
        }
        file[got] = '\0';
        raw = file;
        len = got;
    }
    if (rt_google_sa_parse(raw, len, sa, err, errlen) != 0 ||
        rt_crypto_rsa_key_check(sa->private_key, err, errlen) != 0)
        goto out;
    snprintf(c->sa_client_email, sizeof(c->sa_client_email), "%s", sa->client_email);
    snprintf(c->sa_private_key_id, sizeof(c->sa_private_key_id), "%s", sa->private_key_id);
    memcpy(c->sa_private_key, sa->private_key, sizeof(c->sa_private_key));
    snprintf(c->sa_token_uri, sizeof(c->sa_token_uri), "%s", sa->token_uri);
    if (c->vertex_project[0] == '\0')
        snprintf(c->vertex_project, sizeof(c->vertex_project), "%s", sa->project_id);
    if (c->vertex_project[0] == '\0') {
        snprintf(err, errlen,
                 "vertex_ai needs vertex_project (or VERTEXAI_PROJECT, or a "
                 "project_id in the credentials)");
        goto out;
    }
    if (c->vertex_location[0] == '\0')
        snprintf(c->vertex_location, sizeof(c->vertex_location), "%s", VERTEX_LOCATION);
    /* both go into the URL's path and host */
    for (const char *s = c->vertex_location; *s != '\0'; s++) {
        if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '-')) {
            snprintf(err, errlen, "vertex_location: expected a region name (us-central1, global)");
            goto out;
        }
    }
    for (const char *s = c->vertex_project; *s != '\0'; s++) {
        if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '-' || *s == '.' ||
              *s == ':')) {
            snprintf(err, errlen, "vertex_project: expected a project id");
            goto out;
        }
    }
    if (dep->api_base[0] == '\0') {
        if (strcmp(c->vertex_location, "global") == 0)
            snprintf(dep->api_base, sizeof(dep->api_base), "https://aiplatform.googleapis.com");
        else
            snprintf(dep->api_base, sizeof(dep->api_base), "https://%s-aiplatform.googleapis.com",
                     c->vertex_location);
    }
    rc = 0;
out:
    if (c != NULL)
        memset(c->vertex_credentials, 0, sizeof(c->vertex_credentials)); /* may hold a key */
    if (file != NULL) {
        memset(file, 0, RT_SA_JSON_MAX_BYTES + 1);
        free(file);
    }
    if (sa != NULL) {
        memset(sa, 0, sizeof(*sa));
        free(sa);
    }
    return rc;
}

static int vertex_wire(const struct rt_deployment_conf *dep, enum rt_api client,
                       struct rt_wire *out)
{
    if (!is_claude(dep))
        return rt_dialect_wire(&rt_dialect_vertex_gemini, client, out);
    return rt_anthropic_wire(dep, client, out); /* Anthropic's API, rawPredict form */
}

static int vertex_edit_body(json_t *body, const struct rt_deployment_conf *dep, int stream,
                            char *err, size_t errlen)
{
    (void)stream;
    (void)err;
    (void)errlen;
    if (!is_claude(dep))
        return 0;
    json_object_del(body, "model"); /* the URL names it */
    if (json_object_get(body, "anthropic_version") == NULL)
        json_object_set_new(body, "anthropic_version", json_string(VERTEX_ANTHROPIC_VERSION));
    return 0;
}

static void vertex_url(const struct rt_provider_attempt *a, char *out, size_t cap)
{
    size_t bl;
    const char *base = rt_provider_base(a->dep, &rt_provider_vertex, &bl);
    char seg[RT_NAME_CAP * 3 + 1];
    const char *method;

    if (is_claude(a->dep))
        method = a->stream ? "streamRawPredict" : "rawPredict";
    else if (a->wire == RT_API_EMBEDDINGS)
        method = "predict";
    else
        method = a->stream ? "streamGenerateContent?alt=sse" : "generateContent";
    snprintf(out, cap, "%.*s/v1/projects/%s/locations/%s/publishers/%s/models/%s:%s", (int)bl, base,
             rt_provider_cloud(a->dep)->vertex_project, rt_provider_cloud(a->dep)->vertex_location,
             is_claude(a->dep) ? "anthropic" : "google",
             rt_provider_segment(a->dep->model, "@", seg, sizeof(seg)), method);
}

static int vertex_headers(const struct rt_provider_attempt *a, const char *url,
                          char hdr[][RT_PROVIDER_HEADER_CAP])
{
    (void)url;
    if (a->token == NULL || a->token[0] == '\0')
        return TG_EAGAIN;
    snprintf(hdr[0], RT_PROVIDER_HEADER_CAP, "Authorization: Bearer %s", a->token);
    return 1;
}

static int vertex_needs_token(const struct rt_deployment_conf *dep)
{
    return dep->cloud != NULL && dep->cloud->sa_private_key[0] != '\0';
}

static int vertex_token_request(const struct rt_deployment_conf *dep, int64_t now_s,
                                struct rt_token_request *out, char *err, size_t errlen)
{
    char *jwt;
    char *form;
    size_t n = 0;
    int rc;

    if (!vertex_needs_token(dep))
        return TG_ENOTFOUND;
    jwt = malloc(GOOGLE_JWT_MAX_BYTES);
    form = malloc(GOOGLE_JWT_MAX_BYTES + 256);
    if (jwt == NULL || form == NULL) {
        free(jwt);
        free(form);
        snprintf(err, errlen, "out of memory");
        return TG_ENOMEM;
    }
    rc = rt_google_jwt(dep->cloud, now_s, jwt, GOOGLE_JWT_MAX_BYTES, err, errlen);
    if (rc == 0 &&
        (rt_oauth_form_append(form, GOOGLE_JWT_MAX_BYTES + 256, &n, "grant_type",
                              "urn:ietf:params:oauth:grant-type:jwt-bearer") != 0 ||
         rt_oauth_form_append(form, GOOGLE_JWT_MAX_BYTES + 256, &n, "assertion", jwt) != 0)) {
        snprintf(err, errlen, "token request too large");
        rc = TG_EFULL;
    }
    free(jwt);
    if (rc != 0) {
        free(form);
        return rc;
    }
    out->body = form;
    out->body_len = n;
    snprintf(out->url, sizeof(out->url), "%s", dep->cloud->sa_token_uri);
    snprintf(out->headers[0], RT_PROVIDER_HEADER_CAP,
             "Content-Type: application/x-www-form-urlencoded");
    snprintf(out->headers[1], RT_PROVIDER_HEADER_CAP, "Accept: application/json");
    out->n_headers = 2;
    return 0;
}

const struct rt_provider rt_provider_vertex = {
    .name = "vertex_ai",
    .default_base = NULL, /* from vertex_location (prepare) */
    .key_env = NULL,
    .base_env = NULL,
    .param_env =
        (const char *const[]){"vertex_project", "VERTEXAI_PROJECT", "vertex_location",
                              "VERTEXAI_LOCATION", "vertex_credentials", "VERTEXAI_CREDENTIALS",
                              "vertex_credentials", "GOOGLE_APPLICATION_CREDENTIALS", NULL},
    .flags = 0,
    .params =
        (const char *const[]){"vertex_project", "vertex_location", "vertex_credentials", NULL},
    .prepare = vertex_prepare,
    .wire = vertex_wire,
    .edit_body = vertex_edit_body,
    .url = vertex_url,
    .headers = vertex_headers,
    .classify = google_classify,
    .retry_after = google_retry_after,
    .needs_token = vertex_needs_token,
    .token_request = vertex_token_request,
    .token_parse = rt_oauth_token_parse,
};
