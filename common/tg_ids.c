#include "tg_ids.h"

#include <ctype.h>
#include <pthread.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include "tg_err.h"

static const char hexdig[] = "0123456789abcdef";

/* The digest is fetched once and each thread keeps one context: EVP_Digest would look the
 * algorithm up in the provider tables and allocate a context on every call (a key lookup per
 * request). */
static pthread_once_t sha_once = PTHREAD_ONCE_INIT;
static pthread_key_t sha_key;
static EVP_MD *sha_md;

static void sha_ctx_free(void *p)
{
    EVP_MD_CTX_free(p);
}

static void sha_init(void)
{
    sha_md = EVP_MD_fetch(NULL, "SHA256", NULL);
    pthread_key_create(&sha_key, sha_ctx_free);
}

void tg_sha256_hex(const void *data, size_t len, char out[TG_SHA256_HEX_LEN + 1])
{
    unsigned char md[32];
    unsigned int mdlen = 0;
    EVP_MD_CTX *ctx;

    pthread_once(&sha_once, sha_init);
    ctx = pthread_getspecific(sha_key);
    if (ctx == NULL && sha_md != NULL) {
        ctx = EVP_MD_CTX_new();
        if (ctx != NULL && pthread_setspecific(sha_key, ctx) != 0) {
            EVP_MD_CTX_free(ctx);
            ctx = NULL;
        }
    }
    if (ctx == NULL || EVP_DigestInit_ex2(ctx, sha_md, NULL) != 1 ||
        EVP_DigestUpdate(ctx, data, len) != 1 || EVP_DigestFinal_ex(ctx, md, &mdlen) != 1)
        EVP_Digest(data, len, md, &mdlen, EVP_sha256(), NULL);
    for (unsigned int i = 0; i < 32; i++) {
        out[2 * i] = hexdig[md[i] >> 4];
        out[2 * i + 1] = hexdig[md[i] & 15];
    }
    out[TG_SHA256_HEX_LEN] = '\0';
}

int tg_bytes_eq(const void *a, const void *b, size_t n)
{
    return CRYPTO_memcmp(a, b, n) == 0;
}

int tg_secret_eq(const char *a, size_t alen, const char *b, size_t blen)
{
    char ha[TG_SHA256_HEX_LEN + 1];
    char hb[TG_SHA256_HEX_LEN + 1];

    tg_sha256_hex(a, alen, ha);
    tg_sha256_hex(b, blen, hb);
    return tg_bytes_eq(ha, hb, TG_SHA256_HEX_LEN) && alen > 0 && blen > 0;
}

int tg_random_bytes(void *out, size_t n)
{
    return RAND_bytes(out, (int)n) == 1 ? 0 : TG_EIO;
}

static void uuid_format(const unsigned char b[16], char out[TG_UUID_STR_LEN + 1])
{
    size_t o = 0;

    for (int i = 0; i < 16; i++) {
        if (i == 4 || i == 6 || i == 8 || i == 10)
            out[o++] = '-';
        out[o++] = hexdig[b[i] >> 4];
        out[o++] = hexdig[b[i] & 15];
    }
    out[o] = '\0';
}

int tg_uuid_v4(char out[TG_UUID_STR_LEN + 1])
{
    unsigned char b[16];

    if (tg_random_bytes(b, sizeof(b)) != 0)
        return TG_EIO;
    b[6] = (unsigned char)((b[6] & 0x0f) | 0x40);
    b[8] = (unsigned char)((b[8] & 0x3f) | 0x80);
    uuid_format(b, out);
    return 0;
}

int tg_uuid_v7(uint64_t epoch_ms, char out[TG_UUID_STR_LEN + 1])
{
    unsigned char b[16];

    if (tg_random_bytes(b + 6, 10) != 0)
        return TG_EIO;
    for (int i = 0; i < 6; i++)
        b[i] = (unsigned char)(epoch_ms >> (8 * (5 - i)));
    b[6] = (unsigned char)((b[6] & 0x0f) | 0x70);
    b[8] = (unsigned char)((b[8] & 0x3f) | 0x80);
    uuid_format(b, out);
    return 0;
}

int tg_uuid_valid(const char *s)
{
    for (int i = 0; i < TG_UUID_STR_LEN; i++) {
        if (i == 8 || i == 13 || i == 18 || i == 23) {
            if (s[i] != '-')
                return 0;
        } else if (!isxdigit((unsigned char)s[i])) {
            return 0;
        }
    }
    return s[TG_UUID_STR_LEN] == '\0';
}

static int hex_nibble(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    return (c | 0x20) - 'a' + 10; /* a-f or A-F: checked by tg_uuid_valid */
}

int tg_uuid_parse(const char *s, unsigned char out[16])
{
    int j = 0;

    if (!tg_uuid_valid(s))
        return TG_EINVAL;
    for (int i = 0; i < TG_UUID_STR_LEN; i += 2) {
        if (s[i] == '-')
            i++;
        out[j++] = (unsigned char)(hex_nibble(s[i]) << 4 | hex_nibble(s[i + 1]));
    }
    return 0;
}
