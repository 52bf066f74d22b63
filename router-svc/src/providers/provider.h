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
 * Families whose deployments authenticate with short-lived tokens (Entra ID, a Google service
 * account, AWS STS) describe the token request and parse its answer; creds.c fetches and
 * refreshes the tokens on its own thread and the call hands the current one to headers(). A
 * deployment without a token yet fails its attempt at once (503, retried elsewhere): the
 * request path never waits for a token.
 *
 * Every function is pure (no I/O, no clock; token_request allocates the body it returns), any
 * thread. */
#ifndef RT_PROVIDER_H
#define RT_PROVIDER_H

#include <stddef.h>

#include <jansson.h>
#include <stdint.h>

#include "api.h"
#include "config.h"
#include "tg_buf.h"
#include "router.h"
#include "translate.h"

#define RT_PROVIDER_HEADERS_MAX 4 /* headers a provider adds to an attempt */
/* one "Name: value" line, bytes: a bearer token from a token endpoint (Entra ID access tokens
 * run to 2-3 KB) and its name */
#define RT_PROVIDER_HEADER_CAP (RT_TOKEN_CAP + 64)
#define RT_PROVIDER_URL_CAP (RT_URL_CAP + RT_NAME_CAP + 192) /* base + path + query */
#define RT_PROVIDER_ENV_MAX 4                                /* names in key_env / base_env */
#define RT_PROVIDER_PARAMS_MAX 16 /* provider-specific litellm_params a family takes */

/* struct rt_provider.flags */
#define RT_PROVIDER_SELF_HOSTED                                                                    \
    1u                         /* the key variables name the user's own server: read them          \
                                * whatever the base */
#define RT_PROVIDER_BASE_V1 2u /* the OpenAI-compatible API is under "/v1" of the base */
#define RT_PROVIDER_NO_RESPONSES                                                                   \
    4u /* /v1/responses is bridged through the chat translation unless the deployment's        \
        * model_info.supported_endpoints lists it (LiteLLM's default for named OpenAI-        \
        * compatible providers) */

/* One attempt, as the provider sees it when it builds the URL and the headers. Borrowed for the
 * call. */
struct rt_provider_attempt {
    const struct rt_deployment_conf *dep;
    enum rt_api wire; /* the provider's API (struct rt_wire.api) */
    int stream;       /* the client asked for a stream */
    const char *body; /* the request body as it will be sent, body_len bytes */
    size_t body_len;
    int64_t now_s;     /* wall clock, epoch seconds (request signing) */
    const char *token; /* the deployment's current token from its token endpoint (creds.h),
                        * NULL when the deployment authenticates without one */
    const char *anthropic_beta;    /* the client's anthropic-beta, "" or NULL when none */
    const char *anthropic_version; /* the client's anthropic-version, "" or NULL when none */
    int count_tokens;              /* /v1/messages/count_tokens rather than /v1/messages */
};

/* The client's anthropic-beta value is forwarded up to this many bytes (NUL included). */
#define RT_ANTHROPIC_BETA_CAP 256

/* The request that obtains a token from a provider's token endpoint (made by creds.c on its own
 * thread, never on the request path). */
struct rt_token_request {
    char url[RT_PROVIDER_URL_CAP];
    char headers[RT_PROVIDER_HEADERS_MAX][RT_PROVIDER_HEADER_CAP];
    int n_headers;
    char *body; /* new (malloc'd), taken by the caller: the form or document to POST */
    size_t body_len;
};

/* A dialect of its own (Gemini's generateContent, Bedrock's Converse): the call speaks OpenAI
 * chat at the dialect's door (a /v1/messages request is translated to chat first, the answer
 * back after) and the dialect converts. Usage travels in the converted answer's "usage" in
 * OpenAI's shape (rt_dialect_usage: totals, the cache's reads in
 * prompt_tokens_details.cached_tokens, reasoning in completion_tokens_details.reasoning_tokens,
 * the cache's writes in cache_creation_input_tokens as LiteLLM writes them), so that the OpenAI
 * usage reader prices each part.
 *
 * Streams: the provider's stream is cut into events by event_len (NULL: server-sent events,
 * sse.h), each event converted by stream_event into OpenAI chat.completion.chunk events
 * ("data: {...}\n\n") appended to out; stream_end, once the provider's stream ended cleanly,
 * appends the closing chunk, the usage chunk (choices [] and usage) and "data: [DONE]", or
 * answers TG_EPROTO when the provider never said it had finished (a cut stream). The state is
 * fixed-size caller storage (struct rt_dialect_stream), zeroed before the first event. Every
 * function: 0, or TG_EPROTO (not the provider's shape; out unchanged or cut), TG_EFULL (out
 * full). */
#define RT_DIALECT_TOOLS_MAX 32 /* tool calls tracked in one streamed answer */

struct rt_wire; /* below */

struct rt_dialect_stream {
    int started;             /* the first chunk (with the role) went out */
    int finished;            /* the provider said it finished (finish reason seen) */
    int ended;               /* stream_end wrote the closing events */
    char id[64];             /* chat.completion.chunk id */
    char model[RT_NAME_CAP]; /* the model name shown to the client */
    int64_t created_s;
    char finish[24];       /* finish_reason in OpenAI's vocabulary */
    int64_t prompt_tokens; /* usage as last reported: every input token, the cache's included */
    int64_t completion_tokens;     /* every output token, reasoning included */
    int64_t cache_read_tokens;     /* of prompt_tokens: read from the provider's cache */
    int64_t cache_creation_tokens; /* of prompt_tokens: written to it */
    int64_t reasoning_tokens;      /* of completion_tokens */
    int usage_found;
    int n_tools;   /* tool calls started (their index in the chunks) */
    int open_tool; /* Bedrock: index of the tool call whose input is streaming, -1 */
    int open_tool_args; /* Bedrock: 1 once that call's input had a byte */
    char tool_ids[RT_DIALECT_TOOLS_MAX][64];
    char call_prefix[48]; /* Gemini: what makes the stream's tool call ids unique, "" before
                           * the first call */
};

struct rt_dialect {
    /* request: the OpenAI chat request (borrowed, not modified) as the provider's body for dep
     * (stream: the client asked for a stream). New (json_decref) or NULL with err (a client
     * error: 400). */
    json_t *(*request)(const json_t *chat, const struct rt_deployment_conf *dep, int stream,
                       char *err, size_t errlen);
    /* response: the provider's answer (borrowed) as an OpenAI chat.completion for model (the
     * name shown to the client). New or NULL with err. */
    json_t *(*response)(const json_t *answer, const char *model, char *err, size_t errlen);
    /* embeddings (NULL: the provider has none here): OpenAI embeddings request -> provider
     * body, provider answer -> OpenAI embeddings list. */
    json_t *(*embed_request)(const json_t *req, const struct rt_deployment_conf *dep, char *err,
                             size_t errlen);
    json_t *(*embed_response)(const json_t *answer, const char *model, char *err, size_t errlen);
    size_t (*event_len)(const char *p, size_t n); /* NULL: rt_sse_event_len */
    const char *stream_accept; /* the Accept header of a stream; NULL: text/event-stream */
    int (*stream_event)(struct rt_dialect_stream *st, const char *raw, size_t len,
                        struct tg_buf *out);
    int (*stream_end)(struct rt_dialect_stream *st, struct tg_buf *out);
};

/* rt_dialect_stream_init: zero st for a stream shown to the client as model. */
void rt_dialect_stream_init(struct rt_dialect_stream *st, const char *model, int64_t created_s);

/* Helpers for dialects writing OpenAI chunks (dialect.c): one chat.completion.chunk with the
 * given delta (new reference taken; NULL: {}) and finish reason (NULL: null), or the usage chunk,
 * or the closing [DONE]; 0 or TG_EFULL. */
int rt_dialect_chunk(struct rt_dialect_stream *st, json_t *delta, const char *finish,
                     struct tg_buf *out);
int rt_dialect_usage_chunk(struct rt_dialect_stream *st, struct tg_buf *out);
int rt_dialect_done(struct tg_buf *out);

/* More of what the dialects share (dialect.c):
 * rt_dialect_wire: dialect d behind OpenAI chat for chat and embeddings, /v1/messages and
 * /v1/responses through the chat translation.
 * rt_dialect_content: an OpenAI message's content (a string, an array of parts, or null)
 * appended to out as {"text": ...} blocks and image() blocks for image_url parts; other part
 * types are refused (TG_EINVAL with err); skip_empty: an empty string adds no block.
 * rt_dialect_call_args: a tool call's arguments (a JSON text) as an object; a text that is not
 * one becomes {"value": text}, none {}. New.
 * rt_dialect_count: a non-negative integer member of o, 0 otherwise.
 * rt_dialect_stream_close: a stream_end for dialects whose provider says it finished
 * (st->finished, st->finish): the closing chunk, the usage chunk and [DONE], once. */
/* rt_dialect_tool_content: a chat tool message's content (borrowed) without the error mark
 * (RT_TRANSLATE_TOOL_ERROR_MARK, translate.h): *is_error 1 when it was there (and the content
 * returned without it: a string, or the array without the mark, its part dropped when nothing
 * else was in it), else 0 and the content itself (null when there is none). Returns a new
 * reference, or NULL when out of memory. */
json_t *rt_dialect_tool_content(const json_t *content, int *is_error);
/* rt_dialect_messages: the chat request's messages checked (a non-empty array, each with a
 * role), the system and developer messages' content appended to sys as rt_dialect_content
 * does; the array (borrowed from chat) or NULL with err. The caller walks the others, skipping
 * those rt_dialect_is_system names. */
const json_t *rt_dialect_messages(const json_t *chat, json_t *sys,
                                  json_t *(*image)(const json_t *image_url, char *err,
                                                   size_t errlen),
                                  int skip_empty, char *err, size_t errlen);
int rt_dialect_is_system(const char *role);
int rt_dialect_wire(const struct rt_dialect *d, enum rt_api client, struct rt_wire *out);
/* rt_dialect_content also takes file parts when file is not NULL: file() makes the block of a
 * part's "file" object (k: the part's index, for the error); with NULL they are refused. */
int rt_dialect_content(const json_t *content, json_t *out,
                       json_t *(*image)(const json_t *image_url, char *err, size_t errlen),
                       json_t *(*file)(const json_t *file, size_t k, char *err, size_t errlen),
                       int skip_empty, char *err, size_t errlen);
/* rt_dialect_pdf: an OpenAI file part's file object (part k of a message) as a PDF: *data its
 * base64 bytes, *filename its filename or NULL (both borrowed from file). 0, or TG_EINVAL with
 * err naming what cannot be translated: a file_id (an upload the other side does not have), a
 * file_data that is not a data:application/pdf;base64, URL. */
int rt_dialect_pdf(const json_t *file, size_t k, const char **data, const char **filename,
                   char *err, size_t errlen);
json_t *rt_dialect_call_args(const json_t *fn);
/* rt_dialect_thinking_blocks: assistant message i's thinking_blocks (LiteLLM's field: entries
 * {"type":"thinking","thinking","signature"} and {"type":"redacted_thinking","data"}) appended
 * to out, in order, signatures and data unchanged: as Anthropic thinking / redacted_thinking
 * blocks, or (converse) as Bedrock reasoningContent blocks (reasoningText {text, signature},
 * redactedContent). Absent or null: nothing. 0, or TG_EINVAL with err naming the entry's field,
 * e.g. messages[3].thinking_blocks[0].signature. */
int rt_dialect_thinking_blocks(const json_t *m, size_t i, json_t *out, int converse, char *err,
                               size_t errlen);
int64_t rt_dialect_count(const json_t *o, const char *k);
/* rt_dialect_usage: an OpenAI usage object for the counts (parts cut to their totals). New. */
json_t *rt_dialect_usage(int64_t prompt, int64_t cache_read, int64_t cache_creation,
                         int64_t completion, int64_t reasoning);
int rt_dialect_stream_close(struct rt_dialect_stream *st, struct tg_buf *out);

/* rt_dialect_embeddings_base64: an OpenAI embeddings list whose vectors are number arrays, made
 * into what a client asking encoding_format "base64" gets (each vector as little-endian
 * float32 bytes in base64; the official OpenAI clients ask for it by default). 0 or
 * TG_ENOMEM. */
int rt_dialect_embeddings_base64(json_t *list);

/* How the provider is spoken to for one client API. */
struct rt_wire {
    enum rt_api api;           /* the API at the provider's door (OpenAI chat for a dialect) */
    enum rt_translate_dir dir; /* RT_TRANSLATE_NONE when it is the client's own */
    const struct rt_dialect *dialect; /* NULL, or the provider's own dialect behind api */
    int responses; /* 1: the client's /v1/responses request goes as an OpenAI chat request
                    * (rt_translate_responses_to_chat), then through dir and dialect as a chat
                    * request would; the chat answer or stream comes back as a Responses one */
};

/* rt_wire_responses_via_chat: for a provider without a Responses API, out is what its wire
 * gave for a chat client (wire(dep, RT_API_CHAT, out)) marked to translate Responses to chat
 * and back. 0, or what wire answered. */
int rt_wire_responses_via_chat(int (*wire)(const struct rt_deployment_conf *dep,
                                           enum rt_api client, struct rt_wire *out),
                               const struct rt_deployment_conf *dep, struct rt_wire *out);

struct rt_provider {
    const char *name;         /* the litellm_params.model prefix ("openai", "groq", ...) */
    const char *default_base; /* base of a deployment that gives none; NULL: api_base (or a
                               * base variable) is required */
    /* environment variables (LiteLLM's names), NULL-terminated, at most RT_PROVIDER_ENV_MAX;
     * NULL: none */
    const char *const *key_env;  /* the key when api_key is absent (rules above) */
    const char *const *base_env; /* the base when api_base is absent */
    unsigned flags;              /* RT_PROVIDER_* */
    /* pairs (param name, variable name), NULL-terminated: a provider-specific param the config
     * does not give is read from that variable (LiteLLM's names; never a secret). NULL: none */
    const char *const *param_env;
    /* the provider-specific litellm_params this family reads (config.h, struct rt_dep_cloud),
     * NULL-terminated, at most RT_PROVIDER_PARAMS_MAX; given to another family they are
     * ignored with a warning. NULL: none. */
    const char *const *params;

    /* check: the deployment's configuration as loaded is complete for this family (e.g.
     * credentials that go together); 0, or TG_ECONFIG with the problem in err (no key: config.c
     * prefixes FILE:LINE: key:). NULL: nothing to check. Load time. */
    int (*check)(const struct rt_deployment_conf *dep, char *err, size_t errlen);

    /* wire: how to speak to dep's provider for the client API. Returns 0, or TG_EINVAL when the
     * provider cannot serve that API (the attempt is a 400 naming the deployment). */
    int (*wire)(const struct rt_deployment_conf *dep, enum rt_api client, struct rt_wire *out);

    /* edit_body: a change the provider needs in a body of the wire API it speaks without a
     * dialect (Anthropic on Vertex: no "model", an "anthropic_version"); 0 or TG_EINVAL with
     * err. The body is then always built from the parsed request. NULL: none. */
    int (*edit_body)(json_t *body, const struct rt_deployment_conf *dep, int stream, char *err,
                     size_t errlen);

    /* url: the attempt's URL into out (cap bytes, cut beyond). */
    void (*url)(const struct rt_provider_attempt *a, char *out, size_t cap);

    /* headers: the provider's "Name: value" lines into hdr[0..RT_PROVIDER_HEADERS_MAX) for the
     * attempt at url; returns how many, or TG_EAGAIN when the deployment needs a token it does
     * not have yet (a->token NULL or ""). Secrets go only here. */
    int (*headers)(const struct rt_provider_attempt *a, const char *url,
                   char hdr[][RT_PROVIDER_HEADER_CAP]);

    /* classify: the class of an answer with this HTTP status and body (may be NULL); NULL in
     * the table means rt_router_classify. */
    enum rt_error_class (*classify)(int http_status, const char *body, size_t len);

    /* retry_after: the seconds a rate-limited answer asks to wait when the provider says it in
     * the body rather than in a retry-after header (Google's RetryInfo); -1 when it does not.
     * NULL: the header only. */
    long (*retry_after)(const char *body, size_t len);

    /* prepare: load-time completion of the deployment from what the config gave (reading a
     * credentials file named by it, deriving values); 0 or TG_ECONFIG with err. Main thread, at
     * load only (the one function that may read a file). NULL: nothing to do. */
    int (*prepare)(struct rt_deployment_conf *dep, char *err, size_t errlen);

    /* Tokens refreshed off the request path (creds.c), for families whose deployments may
     * authenticate with a short-lived token from an endpoint (NULL: never):
     * token_request: the request for a new token for dep; 0, TG_ENOTFOUND when dep authenticates
     * otherwise (no token needed), or a negative code with err.
     * token_parse: the endpoint's answer (HTTP status, body) into out (the token the family's
     * headers() will get, NUL-terminated, < cap bytes) and its lifetime in *expires_in_s; 0, or a
     * negative code with err (never a secret in it).
     * needs_token: 1 when dep authenticates with such a token. */
    int (*needs_token)(const struct rt_deployment_conf *dep);
    int (*token_request)(const struct rt_deployment_conf *dep, int64_t now_s,
                         struct rt_token_request *out, char *err, size_t errlen);
    int (*token_parse)(int http_status, const char *body, size_t len, char *out, size_t cap,
                       int64_t *expires_in_s, char *err, size_t errlen);
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
extern const struct rt_provider rt_provider_azure;
extern const struct rt_provider rt_provider_azure_ai;
extern const struct rt_provider rt_provider_compat[];
extern const size_t rt_provider_compat_count;

/* rt_provider_segment: s with every byte outside RFC 3986's unreserved set (and keep, may be
 * NULL) percent-encoded into out (cap bytes, cut beyond); returns out. For names that go into a
 * URL's path or query (deployments, model ids, versions). */
const char *rt_provider_segment(const char *s, const char *keep, char *out, size_t cap);

/* rt_provider_cloud: dep's provider-specific params, or one whose every field is "" when the
 * deployment gave none. Static storage or borrowed from dep; never NULL. */
const struct rt_dep_cloud *rt_provider_cloud(const struct rt_deployment_conf *dep);

/* rt_provider_needs_token: 1 when dep authenticates with a token from its provider's token
 * endpoint (creds.c keeps one for it). */
int rt_provider_needs_token(const struct rt_deployment_conf *dep);

/* Anthropic's wire (anthropic.c), shared with Claude on Vertex AI. */
int rt_anthropic_wire(const struct rt_deployment_conf *dep, enum rt_api client,
                      struct rt_wire *out);

/* OpenAI's functions, shared by every OpenAI-compatible row (openai.c). */
int rt_openai_wire(const struct rt_deployment_conf *dep, enum rt_api client, struct rt_wire *out);
void rt_openai_url(const struct rt_provider_attempt *a, char *out, size_t cap);
int rt_openai_headers(const struct rt_provider_attempt *a, const char *url,
                      char hdr[][RT_PROVIDER_HEADER_CAP]);

/* OAuth 2.0 helpers (oauth.c), for the families with a token endpoint:
 * rt_oauth_form_append: "&name=value" (no "&" when *len is 0) with value form-encoded
 * (application/x-www-form-urlencoded) into buf (cap bytes, *len used); 0 or TG_EFULL.
 * rt_oauth_token_parse: a token endpoint's JSON answer (RFC 6749 section 5.1: access_token,
 * expires_in; section 5.2 errors: error, error_description) into out/expires_in_s; a non-2xx
 * status or an error member is an error whose text names the status and the error code (never
 * a token). Bounded parse; any thread. */
int rt_oauth_form_append(char *buf, size_t cap, size_t *len, const char *name, const char *value);
int rt_oauth_token_parse(int http_status, const char *body, size_t len, char *out, size_t cap,
                         int64_t *expires_in_s, char *err, size_t errlen);

/* Signing primitives (crypto.c, on OpenSSL), any thread:
 * rt_base64: base64 of data into out: url = 1, base64url without padding (RFC 4648 section 5,
 * JWTs); url = 0, the standard alphabet with padding (section 4). Returns the length, or 0 when
 * cap is too small.
 * rt_crypto_rsa_key_check: pem (NUL-terminated) is an RSA private key in PEM; 0 or TG_EINVAL
 * with err.
 * rt_crypto_rs256: RSASSA-PKCS1-v1_5 over SHA-256 (JWT "RS256") of data with the key in pem
 * into sig (cap bytes: the key's size; 256 for RSA-2048); 0 or TG_EINVAL.
 * rt_crypto_sha256 / rt_crypto_hmac_sha256: digests, 32 bytes. */
size_t rt_base64(const void *data, size_t len, char *out, size_t cap, int url);
int rt_crypto_rsa_key_check(const char *pem, char *err, size_t errlen);
int rt_crypto_rs256(const char *pem, const void *data, size_t len, unsigned char *sig, size_t cap,
                    size_t *sig_len);
void rt_crypto_sha256(const void *data, size_t len, unsigned char out[32]);
void rt_crypto_hmac_sha256(const void *key, size_t klen, const void *data, size_t len,
                           unsigned char out[32]);

/* Google service-account credentials (google.c): the JSON file Google issues for a service
 * account ("type": "service_account"), as vertex_credentials gives it. */
#define RT_SA_JSON_MAX_BYTES (64u * 1024u) /* a service-account file is about 2.4 KB */

struct rt_google_sa {
    char client_email[RT_CLOUD_ID_CAP];
    char private_key_id[RT_CLOUD_ID_CAP];
    char private_key[RT_SA_KEY_CAP]; /* PEM; secret */
    char token_uri[RT_URL_CAP];      /* default https://oauth2.googleapis.com/token */
    char project_id[RT_CLOUD_ID_CAP];
};

/* rt_google_sa_parse: text[0..len) as a service-account JSON into out (zeroed first). 0, or
 * TG_EINVAL with err naming the member at fault (never a value). Bounded parse; any thread. */
int rt_google_sa_parse(const char *text, size_t len, struct rt_google_sa *out, char *err,
                       size_t errlen);

/* rt_google_jwt: the signed JWT assertion of sa for Google's OAuth 2.0 JWT-bearer grant (scope
 * cloud-platform, audience the token_uri, issued at now_s, an hour) into out (cap bytes). 0, or
 * TG_EINVAL / TG_EFULL with err. Any thread. */
int rt_google_jwt(const struct rt_dep_cloud *sa, int64_t now_s, char *out, size_t cap, char *err,
                  size_t errlen);

/* AWS Signature Version 4 (sigv4.c), any thread. */
#define RT_SIGV4_HEADERS_MAX 8 /* headers signed besides host, x-amz-date, x-amz-security-token */
#define RT_SIGV4_QUERY_MAX 32  /* query parameters */

struct rt_sigv4_header {
    const char *name;
    const char *value;
};

struct rt_sigv4_request {
    const char *method;
    const char *host;                      /* as in the Host header ("h" or "h:port") */
    const char *path;                      /* as sent ("/model/a%3A0/converse") */
    const char *query;                     /* as sent, without '?'; NULL or "" when none */
    const struct rt_sigv4_header *headers; /* further signed headers (content-type, ...) */
    size_t n_headers;
    const char *payload_hash; /* hex SHA-256 of the body (rt_sigv4_payload_hash) */
    const char *amz_date;     /* "YYYYMMDDTHHMMSSZ" (rt_sigv4_amz_date) */
    const char *region;
    const char *service;
    const char *access_key_id;
    const char *secret;        /* secret */
    const char *session_token; /* signed as x-amz-security-token when given; NULL: none */
};

/* rt_sigv4_authorization: the Authorization header's value for r into out; 0, TG_EFULL (a value
 * too long for its bound) or TG_ENOMEM. */
int rt_sigv4_authorization(const struct rt_sigv4_request *r, char *out, size_t cap);
void rt_sigv4_payload_hash(const void *body, size_t len, char out[65]);
void rt_sigv4_amz_date(int64_t now_s, char out[17]);

/* AWS event-stream framing (eventstream.c; the binary framing of ConverseStream, documented in
 * the AWS SDKs' event-stream specification): a 12-byte prelude (total length, headers length,
 * CRC32 of the first 8 bytes, big-endian), headers, payload, CRC32 of all before it. */
#define RT_EVS_MIN_BYTES 16 /* prelude and message CRC */

struct rt_evs_message {
    char message_type[32];   /* :message-type: event, exception, error */
    char event_type[64];     /* :event-type */
    char exception_type[64]; /* :exception-type, or :error-code */
    const char *payload;     /* into the frame */
    size_t payload_len;
};

/* rt_evs_frame_len: the length of the first frame of p[0, n) once all of it is there, else 0.
 * A frame whose total length is below RT_EVS_MIN_BYTES is reported as RT_EVS_MIN_BYTES bytes
 * long (rt_evs_decode refuses it). */
size_t rt_evs_frame_len(const char *p, size_t n);

/* rt_evs_decode: one whole frame p[0, n) (n its total length) into out; 0, or TG_EPROTO for a
 * frame that is not one: lengths, CRCs, header encoding. Any thread. */
int rt_evs_decode(const char *p, size_t n, struct rt_evs_message *out);

/* rt_aws_sts_parse: STS AssumeRoleWithWebIdentity's XML answer into out as
 * "AccessKeyId\nSecretAccessKey\nSessionToken" (bedrock.c's headers() reads that) and its
 * lifetime; errors name the status and the error code only. A token_parse. Any thread. */
int rt_aws_sts_parse(int http_status, const char *body, size_t len, char *out, size_t cap,
                     int64_t *expires_in_s, char *err, size_t errlen);

extern const struct rt_provider rt_provider_bedrock;
extern const struct rt_dialect rt_dialect_converse;
extern const struct rt_provider rt_provider_gemini;
extern const struct rt_provider rt_provider_vertex;
extern const struct rt_dialect rt_dialect_gemini;
extern const struct rt_dialect rt_dialect_vertex_gemini;

#endif
