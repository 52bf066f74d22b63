/* crypto: the signing primitives the provider families need, on OpenSSL (the one file of
 * providers/ that includes it): RS256 for Google's service-account JWTs, SHA-256 and
 * HMAC-SHA256 for AWS Signature Version 4, and base64. See provider.h. */
#include "providers/provider.h"

#include <stdio.h>
#include <string.h>

#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/pem.h>
#include <openssl/sha.h>

#include "tg_err.h"

size_t rt_base64(const void *data, size_t len, char *out, size_t cap, int url)
{
    static const char std[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    static const char web[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    const char *tab = url ? web : std;
    const unsigned char *p = data;
    size_t n = 0;

    if (cap < (len + 2) / 3 * 4 + 1)
        return 0;
    for (size_t i = 0; i < len; i += 3) {
        unsigned v = (unsigned)p[i] << 16;

        if (i + 1 < len)
            v |= (unsigned)p[i + 1] << 8;
        if (i + 2 < len)
            v |= p[i + 2];
        out[n++] = tab[(v >> 18) & 63];
        out[n++] = tab[(v >> 12) & 63];
        if (i + 1 < len)
            out[n++] = tab[(v >> 6) & 63];
        else if (!url)
            out[n++] = '=';
        if (i + 2 < len)
            out[n++] = tab[v & 63];
        else if (!url)
            out[n++] = '=';
    }
    out[n] = '\0';
    return n;
}

/* The private key in pem (NUL-terminated), NULL when it is not one. */
static EVP_PKEY *load_key(const char *pem)
{
    BIO *b = BIO_new_mem_buf(pem, -1);
    EVP_PKEY *k = b != NULL ? PEM_read_bio_PrivateKey(b, NULL, NULL, NULL) : NULL;

    BIO_free(b);
    return k;
}

int rt_crypto_rsa_key_check(const char *pem, char *err, size_t errlen)
{
    EVP_PKEY *k = load_key(pem);
    int rc = 0;

    if (k == NULL) {
        snprintf(err, errlen, "private_key is not a private key in PEM");
        rc = TG_EINVAL;
    } else if (EVP_PKEY_get_base_id(k) != EVP_PKEY_RSA) {
        snprintf(err, errlen, "private_key is not an RSA key (RS256 needs one)");
        rc = TG_EINVAL;
    }
    EVP_PKEY_free(k);
    return rc;
}

int rt_crypto_rs256(const char *pem, const void *data, size_t len, unsigned char *sig, size_t cap,
                    size_t *sig_len)
{
    EVP_PKEY *k = load_key(pem);
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    size_t n = cap;
    int rc = TG_EINVAL;

    if (k != NULL && ctx != NULL && EVP_PKEY_get_base_id(k) == EVP_PKEY_RSA &&
        (size_t)EVP_PKEY_get_size(k) <= cap &&
        EVP_DigestSignInit(ctx, NULL, EVP_sha256(), NULL, k) == 1 &&
        EVP_DigestSign(ctx, sig, &n, data, len) == 1) {
        *sig_len = n;
        rc = 0;
    }
    EVP_MD_CTX_free(ctx);
    EVP_PKEY_free(k);
    return rc;
}

void rt_crypto_sha256(const void *data, size_t len, unsigned char out[32])
{
    SHA256(data, len, out);
}

void rt_crypto_hmac_sha256(const void *key, size_t klen, const void *data, size_t len,
                           unsigned char out[32])
{
    unsigned int n = 32;

    HMAC(EVP_sha256(), key, (int)klen, data, len, out, &n);
}
