/* tg_yaml: the core of both services' YAML configuration loaders.
 *
 * A document loaded whole from a buffer (libyaml), and reading it:
 * - diagnostics "FILE:LINE: key: problem" through the caller's sink: the first error ends the
 *   load (y->failed), warnings go on;
 * - scalars with os.environ/NAME resolved (a missing variable is an error naming it) and checked
 *   for control bytes (tg_cfgtext: a value with NUL, CR, LF... never reaches a wire);
 * - typed getters (whole numbers and decimals in range, booleans, strings that fit, money,
 *   seconds, durations) whose errors name the key;
 * - every mapping of the document checked for a key given twice (YAML keeps both, and a loader
 *   reading each key once would append past what the first allocated).
 *
 * Threads: a struct tg_yaml belongs to one load. */
#ifndef TG_YAML_H
#define TG_YAML_H

#include <stddef.h>
#include <stdint.h>
#include <yaml.h>

#define TG_YAML_PATH_MAX 256 /* a key's dotted path, bytes */
#define TG_YAML_LINE_MAX 512 /* one diagnostic line, bytes */
#define TG_YAML_ENV_PREFIX "os.environ/"

/* is_error: 1 for the first error, 0 for a warning; line: "FILE:LINE: key: problem". */
typedef void (*tg_yaml_diag_fn)(void *ud, int is_error, const char *line);

struct tg_yaml {
    yaml_document_t doc;
    int doc_ok;
    const char *file; /* borrowed: the name in diagnostics */
    int failed;       /* an error was reported */
    tg_yaml_diag_fn diag;
    void *diag_ud;
};

#define TG_YAML_FOR_PAIRS(node, pair)                                                              \
    for (yaml_node_pair_t *pair = (node)->data.mapping.pairs.start;                                \
         pair < (node)->data.mapping.pairs.top; pair++)
#define TG_YAML_FOR_ITEMS(node, item)                                                              \
    for (yaml_node_item_t *item = (node)->data.sequence.items.start;                               \
         item < (node)->data.sequence.items.top; item++)

/* tg_yaml_open: parse data[0, len) (file: its name for diagnostics, borrowed) and check every
 * mapping for duplicate keys. Returns 0, or TG_ECONFIG after reporting the syntax error or the
 * duplicate. Close with tg_yaml_close in either case. */
int tg_yaml_open(struct tg_yaml *y, const char *file, const char *data, size_t len,
                 tg_yaml_diag_fn diag, void *diag_ud);

/* tg_yaml_read_file: the whole file at path into a new malloc'd buffer (*len bytes, NUL
 * appended), at most max bytes. Returns it, or NULL with the reason in err. */
char *tg_yaml_read_file(const char *path, size_t max, size_t *len, char *err, size_t errlen);

void tg_yaml_close(struct tg_yaml *y);

/* tg_yaml_borrow: y reads doc, a document a loader parsed itself (borrowed: it must outlive y,
 * and tg_yaml_close leaves it alone); no duplicate-key check. For loaders that hand part of
 * their document to a common reader (tg_kafka_opts). */
void tg_yaml_borrow(struct tg_yaml *y, const char *file, const yaml_document_t *doc,
                    tg_yaml_diag_fn diag, void *diag_ud);

/* tg_yaml_fail / tg_yaml_warn: report at node (may be NULL: line 0) for the key path (may be
 * "" or NULL). fail returns TG_ECONFIG. */
int tg_yaml_fail(struct tg_yaml *y, const yaml_node_t *node, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void tg_yaml_warn(struct tg_yaml *y, const yaml_node_t *node, const char *path, const char *fmt,
                  ...) __attribute__((format(printf, 4, 5)));

yaml_node_t *tg_yaml_root(struct tg_yaml *y);
yaml_node_t *tg_yaml_node(struct tg_yaml *y, int id);

/* tg_yaml_path: "base.key" (or "key" when base is "") into out; tg_yaml_path_index:
 * "base[i]". Cut at TG_YAML_PATH_MAX. */
void tg_yaml_path(char out[TG_YAML_PATH_MAX], const char *base, const char *key);
void tg_yaml_path_index(char out[TG_YAML_PATH_MAX], const char *base, size_t i);

/* tg_yaml_is_null: absent, or a plain ~ / null / empty scalar. */
int tg_yaml_is_null(const yaml_node_t *n);

/* tg_yaml_expect: n is of type t, else an error ("expected a mapping" ...). 0 or TG_ECONFIG. */
int tg_yaml_expect(struct tg_yaml *y, const yaml_node_t *n, const char *path, yaml_node_type_t t);

/* tg_yaml_key: the key text of a pair, or NULL (after an error) when it is not a scalar. */
const char *tg_yaml_key(struct tg_yaml *y, const yaml_node_pair_t *pair, const char *path);

/* tg_yaml_pair: one pair of the mapping at path, as a loader walks it: returns the key text
 * (NULL after an error: a key that is not a scalar), its dotted path into p and, when v is not
 * NULL, the value node into *v. */
const char *tg_yaml_pair(struct tg_yaml *y, const yaml_node_pair_t *pair, const char *path,
                         char p[TG_YAML_PATH_MAX], yaml_node_t **v);

/* tg_yaml_key_fn: one key of a mapping walked by tg_yaml_map: its text, its node (for the line
 * of an error), the value node and the key's dotted path. Returns 0 (read), TG_ECONFIG (after an
 * error) or TG_YAML_UNKNOWN (not a key of this mapping: tg_yaml_map reports "unknown key"). */
#define TG_YAML_UNKNOWN 1
typedef int (*tg_yaml_key_fn)(void *ctx, const char *key, const yaml_node_t *knode,
                              yaml_node_t *v, const char *path);

/* tg_yaml_map: fn for each pair of the mapping n at path, in document order. An absent or null n
 * reads nothing; another type than a mapping is an error. Returns 0 or TG_ECONFIG. */
int tg_yaml_map(struct tg_yaml *y, const yaml_node_t *n, const char *path, tg_yaml_key_fn fn,
                void *ctx);

size_t tg_yaml_seq_len(const yaml_node_t *n);

/* Getters: 0, or TG_ECONFIG after an error naming path. */

/* tg_yaml_scalar: the text (borrowed from the document or the environment). */
int tg_yaml_scalar(struct tg_yaml *y, const yaml_node_t *n, const char *path, const char **out);
/* tg_yaml_str: copied into dst (cap bytes; a longer value is an error); tg_yaml_str_nonempty
 * refuses "". */
int tg_yaml_str(struct tg_yaml *y, const yaml_node_t *n, const char *path, char *dst, size_t cap);
int tg_yaml_str_nonempty(struct tg_yaml *y, const yaml_node_t *n, const char *path, char *dst,
                         size_t cap);
/* tg_yaml_u64 / u32: a whole number 0..max; tg_yaml_i32: any int32. */
int tg_yaml_u64(struct tg_yaml *y, const yaml_node_t *n, const char *path, uint64_t max,
                uint64_t *out);
int tg_yaml_u32(struct tg_yaml *y, const yaml_node_t *n, const char *path, uint32_t max,
                uint32_t *out);
int tg_yaml_i32(struct tg_yaml *y, const yaml_node_t *n, const char *path, int32_t *out);
/* tg_yaml_u64_range / tg_yaml_u32_range: a whole number lo..hi ("must be between LO and HI"). */
int tg_yaml_u64_range(struct tg_yaml *y, const yaml_node_t *n, const char *path, uint64_t lo,
                      uint64_t hi, uint64_t *out);
int tg_yaml_u32_range(struct tg_yaml *y, const yaml_node_t *n, const char *path, uint32_t lo,
                      uint32_t hi, uint32_t *out);
/* tg_yaml_int_range: a whole number with an optional sign ("-1", "+5", "42"), lo..hi. */
int tg_yaml_int_range(struct tg_yaml *y, const yaml_node_t *n, const char *path, int lo, int hi,
                      int *out);
/* tg_yaml_double_range: a finite number (strtod: "0.5", "1e-3"), at most hi and above lo (lo
 * itself accepted when lo_inclusive). */
int tg_yaml_double_range(struct tg_yaml *y, const yaml_node_t *n, const char *path, double lo,
                         int lo_inclusive, double hi, double *out);
/* tg_yaml_bool: true/false, yes/no, on/off (any case). */
int tg_yaml_bool(struct tg_yaml *y, const yaml_node_t *n, const char *path, int *out);
/* tg_yaml_usd_fusd: a USD amount in femto-USD (tg_units.h). */
int tg_yaml_usd_fusd(struct tg_yaml *y, const yaml_node_t *n, const char *path, int64_t *out);
/* tg_yaml_seconds_ms: seconds, possibly fractional ("30", "2.5"), to ms, 1 ms .. 24 h. */
int tg_yaml_seconds_ms(struct tg_yaml *y, const yaml_node_t *n, const char *path, uint32_t *out);
/* tg_yaml_duration_s: a duration in tg_units' grammar ("30d", "1mo", "12h", "45", ...) to
 * seconds, min_s..max_s. */
int tg_yaml_duration_s(struct tg_yaml *y, const yaml_node_t *n, const char *path, int64_t min_s,
                       int64_t max_s, int64_t *out);

#endif
