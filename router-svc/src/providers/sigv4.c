/* sigv4: AWS Signature Version 4 for request headers (docs.aws.amazon.com/IAM/latest/UserGuide/
 * reference_sigv-create-signed-request.html, checked against the AWS SigV4 test suite in
 * awslabs/aws-c-auth, tests/aws-signing-test-suite/v4; see router_bedrock_test). See provider.h.
 *
 * Canonical request: method, the path as sent URI-encoded once more (every byte but RFC 3986's
 * unreserved ones and '/'; services other than S3 sign the path encoded twice, so a path sent as
 * /model/a%3A0/converse is signed as /model/a%253A0/converse), the query's pairs encoded and
 * sorted, the signed headers lower-cased with their values trimmed and inner runs of spaces
 * folded, sorted, the list of their names, the payload's SHA-256. String to sign:
 * "AWS4-HMAC-SHA256", the date-time, the scope date/region/service/aws4_request, the canonical
 * request's SHA-256. Key: HMAC chain over "AWS4"+secret, date, region, service, "aws4_request". */
#include "providers/provider.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "tg_err.h"

#define SIGV4_CANON_MAX (16u * 1024u) /* canonical request, bytes */

static void hex(const unsigned char *d, size_t n, char *out)
{
    static const char h[] = "0123456789abcdef";

    for (size_t i = 0; i < n; i++) {
        out[2 * i] = h[d[i] >> 4];
        out[2 * i + 1] = h[d[i] & 15];
    }
    out[2 * n] = '\0';
}

void rt_sigv4_payload_hash(const void *body, size_t len, char out[65])
{
    unsigned char d[32];

    rt_crypto_sha256(body, len, d);
    hex(d, 32, out);
}

/* Append s[0..n) to b (cap, *len), URI-encoded (keep_slash: '/' as is). 0 or TG_EFULL. */
static int enc(char *b, size_t cap, size_t *len, const char *s, size_t n, int keep_slash)
{
    char in[2048];
    size_t el;

    if (n >= sizeof(in) || *len >= cap)
        return TG_EFULL;
    memcpy(in, s, n);
    in[n] = '\0';
    if (memchr(in, '\0', n) != NULL)
        return TG_EFULL; /* no NUL in what is signed */
    rt_provider_segment(in, keep_slash ? "/" : NULL, b + *len, cap - *len);
    el = strlen(b + *len);
    if (*len + el + 1 >= cap || el < n)
        return TG_EFULL; /* cut */
    *len += el;
    return 0;
}

static int put(char *b, size_t cap, size_t *len, const char *s, size_t n)
{
    if (*len + n + 1 >= cap)
        return TG_EFULL;
    memcpy(b + *len, s, n);
    *len += n;
    b[*len] = '\0';
    return 0;
}

struct qpair {
    char *k, *v; /* encoded, owned by the scratch buffer */
};

static int qcmp(const void *a, const void *b)
{
    const struct qpair *x = a, *y = b;
    int c = strcmp(x->k, y->k);

    return c != 0 ? c : strcmp(x->v, y->v);
}

/* The canonical query of q (as sent, without '?') appended to b. */
static int canon_query(char *b, size_t cap, size_t *len, const char *q)
{
    struct qpair pairs[RT_SIGV4_QUERY_MAX];
    char scratch[2048];
    size_t n = 0, sl = 0;
    const char *p = q;

    while (*p != '\0') {
        const char *amp = strchr(p, '&');
        size_t seg = amp != NULL ? (size_t)(amp - p) : strlen(p);
        const char *eq = memchr(p, '=', seg);
        size_t kl = eq != NULL ? (size_t)(eq - p) : seg;

        if (seg > 0) {
            if (n >= RT_SIGV4_QUERY_MAX)
                return TG_EFULL;
            pairs[n].k = scratch + sl;
            if (enc(scratch, sizeof(scratch), &sl, p, kl, 0) != 0)
                return TG_EFULL;
            sl++;
            pairs[n].v = scratch + sl;
            if (enc(scratch, sizeof(scratch), &sl, eq != NULL ? eq + 1 : "",
                    eq != NULL ? seg - kl - 1 : 0, 0) != 0)
                return TG_EFULL;
            sl++;
            n++;
        }
        p += seg;
        if (*p == '&')
            p++;
    }
    qsort(pairs, n, sizeof(pairs[0]), qcmp);
    for (size_t i = 0; i < n; i++) {
        if ((i > 0 && put(b, cap, len, "&", 1) != 0) ||
            put(b, cap, len, pairs[i].k, strlen(pairs[i].k)) != 0 || put(b, cap, len, "=", 1) ||
            put(b, cap, len, pairs[i].v, strlen(pairs[i].v)) != 0)
            return TG_EFULL;
    }
    return 0;
}

/* A header value trimmed, inner runs of spaces folded into one. */
static int put_value(char *b, size_t cap, size_t *len, const char *v)
{
    int space = 0;

    while (*v == ' ' || *v == '\t')
        v++;
    for (; *v != '\0'; v++) {
        if (*v == ' ' || *v == '\t') {
            space = 1;
            continue;
        }
        if (space && put(b, cap, len, " ", 1) != 0)
            return TG_EFULL;
        space = 0;
        if (put(b, cap, len, v, 1) != 0)
            return TG_EFULL;
    }
    return 0;
}

static int hcmp(const void *a, const void *b)
{
    const struct rt_sigv4_header *x = a, *y = b;

    return strcasecmp(x->name, y->name);
}

int rt_sigv4_authorization(const struct rt_sigv4_request *r, char *out, size_t cap)
{
    struct rt_sigv4_header h[RT_SIGV4_HEADERS_MAX + 3];
    size_t nh = 0, len = 0, sl = 0;
    char *canon = malloc(SIGV4_CANON_MAX);
    char signed_names[512];
    char sts[512];
    char chash[65], sig[65];
    char date[9];
    char kbuf[RT_SECRET_CAP + 8];
    unsigned char k[32], d[32];
    int rc = TG_EFULL;

    if (canon == NULL)
        return TG_ENOMEM;
    if (r->n_headers > RT_SIGV4_HEADERS_MAX || strlen(r->amz_date) != 16)
        goto out;
    memcpy(date, r->amz_date, 8);
    date[8] = '\0';
    h[nh++] = (struct rt_sigv4_header){"host", r->host};
    h[nh++] = (struct rt_sigv4_header){"x-amz-date", r->amz_date};
    if (r->session_token != NULL && r->session_token[0] != '\0')
        h[nh++] = (struct rt_sigv4_header){"x-amz-security-token", r->session_token};
    for (size_t i = 0; i < r->n_headers; i++)
        h[nh++] = r->headers[i];
    qsort(h, nh, sizeof(h[0]), hcmp);
    signed_names[0] = '\0';
    for (size_t i = 0; i < nh; i++) {
        size_t n = strlen(h[i].name);

        if (sl + n + 2 >= sizeof(signed_names))
            goto out;
        if (i > 0)
            signed_names[sl++] = ';';
        for (size_t j = 0; j < n; j++) {
            char c = h[i].name[j];

            signed_names[sl++] = (char)(c >= 'A' && c <= 'Z' ? c + 32 : c);
        }
        signed_names[sl] = '\0';
    }
    /* the canonical request */
    if (put(canon, SIGV4_CANON_MAX, &len, r->method, strlen(r->method)) != 0 ||
        put(canon, SIGV4_CANON_MAX, &len, "\n", 1) != 0 ||
        enc(canon, SIGV4_CANON_MAX, &len, r->path, strlen(r->path), 1) != 0 ||
        put(canon, SIGV4_CANON_MAX, &len, "\n", 1) != 0 ||
        canon_query(canon, SIGV4_CANON_MAX, &len, r->query != NULL ? r->query : "") != 0 ||
        put(canon, SIGV4_CANON_MAX, &len, "\n", 1) != 0)
        goto out;
    for (size_t i = 0; i < nh; i++) {
        size_t n = strlen(h[i].name);

        for (size_t j = 0; j < n; j++) {
            char c = h[i].name[j];

            c = (char)(c >= 'A' && c <= 'Z' ? c + 32 : c);
            if (put(canon, SIGV4_CANON_MAX, &len, &c, 1) != 0)
                goto out;
        }
        if (put(canon, SIGV4_CANON_MAX, &len, ":", 1) != 0 ||
            put_value(canon, SIGV4_CANON_MAX, &len, h[i].value) != 0 ||
            put(canon, SIGV4_CANON_MAX, &len, "\n", 1) != 0)
            goto out;
    }
    if (put(canon, SIGV4_CANON_MAX, &len, "\n", 1) != 0 ||
        put(canon, SIGV4_CANON_MAX, &len, signed_names, sl) != 0 ||
        put(canon, SIGV4_CANON_MAX, &len, "\n", 1) != 0 ||
        put(canon, SIGV4_CANON_MAX, &len, r->payload_hash, strlen(r->payload_hash)) != 0)
        goto out;
    rt_crypto_sha256(canon, len, d);
    hex(d, 32, chash);
    /* the string to sign and the key */
    if ((size_t)snprintf(sts, sizeof(sts), "AWS4-HMAC-SHA256\n%s\n%s/%s/%s/aws4_request\n%s",
                         r->amz_date, date, r->region, r->service, chash) >= sizeof(sts) ||
        (size_t)snprintf(kbuf, sizeof(kbuf), "AWS4%s", r->secret) >= sizeof(kbuf))
        goto out;
    rt_crypto_hmac_sha256(kbuf, strlen(kbuf), date, 8, k);
    rt_crypto_hmac_sha256(k, 32, r->region, strlen(r->region), k);
    rt_crypto_hmac_sha256(k, 32, r->service, strlen(r->service), k);
    rt_crypto_hmac_sha256(k, 32, "aws4_request", 12, k);
    rt_crypto_hmac_sha256(k, 32, sts, strlen(sts), d);
    hex(d, 32, sig);
    if ((size_t)snprintf(out, cap,
                         "AWS4-HMAC-SHA256 Credential=%s/%s/%s/%s/aws4_request, SignedHeaders=%s, "
                         "Signature=%s",
                         r->access_key_id, date, r->region, r->service, signed_names, sig) >= cap)
        goto out;
    rc = 0;
out:
    memset(kbuf, 0, sizeof(kbuf));
    memset(k, 0, sizeof(k));
    free(canon);
    return rc;
}

void rt_sigv4_amz_date(int64_t now_s, char out[17])
{
    time_t t = (time_t)now_s;
    struct tm tm;

    gmtime_r(&t, &tm);
    strftime(out, 17, "%Y%m%dT%H%M%SZ", &tm);
}
