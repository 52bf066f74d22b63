/* mask: remove secrets from free text before it enters a trail, a log line or an error body.
 *
 * Replaced with "***":
 * - every configured secret (provider api_keys, master key, ...: the list given at create) found
 *   anywhere in the text (secrets shorter than RT_MASK_SECRET_MIN bytes are ignored: they would
 *   mask ordinary words; such short values are also caught by the rules below when key-shaped);
 * - tokens (runs of [A-Za-z0-9_-]) starting with "sk-" (sk-..., sk-proj-..., sk-ant-...) or
 *   "sk_", and tokens starting with "key-"/"pk-"/"rk-" followed by >= 16 characters;
 * - the value after "Bearer " / "Basic " (any case), and the value after a secret-looking name
 *   followed by ':' or '=' (with optional quotes and spaces): x-api-key, api_key, api-key,
 *   apikey, authorization, proxy-authorization, password, passwd, secret, client_secret,
 *   access_token, refresh_token, token, master_key, private_key;
 * - AWS access key ids (AKIA/ASIA + 16);
 * - long high-entropy tokens: a run of >= 24 characters of [A-Za-z0-9_-+/=.] in which some
 *   segment between '-', '_', '.', '/' separators is >= 16 characters long (so
 *   "claude-3-5-sonnet-20241022", URLs and UUIDs stay readable while base64, hex, JWT and
 *   similar secrets are masked).
 *
 * Fail closed: invalid UTF-8 and control characters are dropped (tab/newline become a space);
 * only the first RT_MASK_INPUT_MAX bytes are inspected and the rest is dropped; a token cut by
 * that limit is dropped whole (a partial secret is never emitted). The output is capped by the
 * caller's buffer and cut at a UTF-8 boundary.
 *
 * Threads: a struct rt_mask is immutable after create; rt_mask_apply may run on any number of
 * threads at once. */
#ifndef RT_MASK_H
#define RT_MASK_H

#include <stddef.h>

#define RT_MASK_SECRET_MIN 6     /* configured secrets shorter than this are not matched */
#define RT_MASK_SECRETS_MAX 1024 /* configured secrets kept (more: create fails) */
#define RT_MASK_INPUT_MAX 4096   /* bytes of input inspected per call */
#define RT_MASK_REPLACEMENT "***"

struct rt_mask;

/* rt_mask_create: a masker for the n secrets in secrets (borrowed, copied; NULL entries and
 * empty strings skipped). Secrets are kept and matched in the form they take in cleaned text
 * (see "Fail closed"); one shorter than RT_MASK_SECRET_MIN bytes in that form is ignored.
 * Returns a new masker (caller destroys with rt_mask_destroy) or NULL with a message in err
 * (n > RT_MASK_SECRETS_MAX, out of memory). */
struct rt_mask *rt_mask_create(const char *const *secrets, size_t n, char *err, size_t errlen);

/* rt_mask_destroy: free and set *mask to NULL. Accepts NULL. */
void rt_mask_destroy(struct rt_mask **mask);

/* rt_mask_apply: write the masked form of in[0..inlen) into out (outcap >= 1 bytes, always
 * NUL-terminated). mask may be NULL (built-in rules only). in need not be NUL-terminated and may
 * be NULL when inlen == 0. Returns the output length (excluding the NUL). Any thread. */
size_t rt_mask_apply(const struct rt_mask *mask, const char *in, size_t inlen, char *out,
                     size_t outcap);

#endif
