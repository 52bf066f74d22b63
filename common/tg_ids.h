/* tg_ids: SHA-256 hex digests, UUIDs and random bytes (OpenSSL libcrypto). */
#ifndef TG_IDS_H
#define TG_IDS_H

#include <stddef.h>
#include <stdint.h>

#define TG_SHA256_HEX_LEN 64
#define TG_UUID_STR_LEN 36

/* tg_sha256_hex: lowercase hex digest of data into out (65 bytes incl. NUL). Any thread. */
void tg_sha256_hex(const void *data, size_t len, char out[TG_SHA256_HEX_LEN + 1]);

/* tg_secret_eq: 1 when the two byte strings are equal and non-empty. Constant time in their
 * contents and lengths: both are hashed (SHA-256) first and the digests compared without an
 * early exit, so a caller probing a secret learns neither its length nor a prefix. For master
 * keys and other shared secrets. Any thread. */
int tg_secret_eq(const char *a, size_t alen, const char *b, size_t blen);

/* tg_bytes_eq: 1 when a[0..n) and b[0..n) are equal, compared without an early exit (the time
 * does not depend on where they differ). For digests, and secrets of a known length. */
int tg_bytes_eq(const void *a, const void *b, size_t n);

/* tg_random_bytes: n cryptographically random bytes. Returns 0 or TG_EIO. Any thread. */
int tg_random_bytes(void *out, size_t n);

/* tg_uuid_v4: random UUID, lowercase canonical form. Returns 0 or TG_EIO. */
int tg_uuid_v4(char out[TG_UUID_STR_LEN + 1]);

/* tg_uuid_v7: time-ordered UUID (RFC 9562) from epoch ms and random bits. Returns 0 or TG_EIO. */
int tg_uuid_v7(uint64_t epoch_ms, char out[TG_UUID_STR_LEN + 1]);

/* tg_uuid_valid: 1 when s is a canonical (8-4-4-4-12 hex) UUID string. */
int tg_uuid_valid(const char *s);

/* tg_uuid_parse: the 16 bytes of a canonical UUID string (either case). Returns 0, or
 * TG_EINVAL when s is not one (out untouched). */
int tg_uuid_parse(const char *s, unsigned char out[16]);

#endif
