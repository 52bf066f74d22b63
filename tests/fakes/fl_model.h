/* fl_model: fake-llm's per-model behaviour table and counters.
 *
 * Behaviour comes from a "default" object and per-model objects (config file and
 * POST /_control/models/NAME); a model's effective behaviour is the built-in defaults, then
 * the "default" object's fields, then the model's own fields. Every model name seen in a
 * request or configured gets a slot holding its counters; the table holds at most `capacity`
 * models, fixed at creation. A request for a new model when the table is full is still served
 * with the default behaviour and counted in the totals and in `untracked`.
 *
 * Whether a request fails: with probability fail_rate when fail_rate is set; otherwise always
 * when a non-2xx status or an error mode is set; otherwise never. Random draws come from a
 * per-model generator seeded from the global seed and the model name, so a given seed gives
 * the same failure sequence for a model regardless of other models' traffic.
 * Thread-safe: one mutex guards the table. */
#ifndef FL_MODEL_H
#define FL_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#define FL_MODEL_NAME_MAX 128       /* bytes of a model name, NUL excluded */
#define FL_LATENCY_MAX_MS 600000u   /* latency_ms and ttft_ms upper bound */
#define FL_RETRY_AFTER_MAX_S 86400u /* retry_after upper bound, seconds */
#define FL_TOKENS_MAX 10000000u     /* prompt_tokens/completion_tokens upper bound */
#define FL_CHUNKS_MAX 1024u         /* stream content chunks upper bound */

enum fl_fault {
    FL_FAULT_NONE = 0,
    FL_FAULT_CONTEXT_WINDOW,
    FL_FAULT_CONTENT_POLICY,
    FL_FAULT_GARBAGE,
    FL_FAULT_DROP_MID_STREAM,
};

/* Bits of fl_behaviour.set: which fields were given explicitly. */
#define FL_SET_FAIL_RATE (1u << 0)
#define FL_SET_STATUS (1u << 1)
#define FL_SET_LATENCY (1u << 2)
#define FL_SET_TTFT (1u << 3)
#define FL_SET_RETRY_AFTER (1u << 4)
#define FL_SET_ERROR (1u << 5)
#define FL_SET_PROMPT_TOKENS (1u << 6)
#define FL_SET_COMPLETION_TOKENS (1u << 7)
#define FL_SET_CHUNKS (1u << 8)
#define FL_SET_CACHED_TOKENS (1u << 9)
#define FL_SET_CACHE_CREATION_TOKENS (1u << 10)
#define FL_SET_REASONING_TOKENS (1u << 11)

struct fl_behaviour {
    double fail_rate;               /* 0..1 */
    int status;                     /* HTTP status of injected failures, 400..599 */
    uint32_t latency_ms;            /* delay of the whole response (stream: its last chunk) */
    uint32_t ttft_ms;               /* stream: delay of the first chunk */
    uint32_t retry_after_s;         /* retry-after header on failures; 0 = none */
    enum fl_fault error;            /* error mode used when a request fails */
    uint32_t prompt_tokens;         /* usage reported */
    uint32_t completion_tokens;     /* usage reported */
    uint32_t cached_tokens;         /* of prompt_tokens: read from the prompt cache */
    uint32_t cache_creation_tokens; /* of prompt_tokens: written to it (Anthropic's shape) */
    uint32_t reasoning_tokens;      /* of completion_tokens */
    uint32_t chunks;                /* stream content chunks, 1..FL_CHUNKS_MAX */
    unsigned set;                   /* FL_SET_* bits */
};

struct fl_counters {
    uint64_t requests; /* API requests naming the model */
    uint64_t ok;       /* answered with a success */
    uint64_t failed;   /* answered with an injected fault or an error */
    uint64_t streams;  /* requests asking for a stream */
    uint64_t aborted;  /* connection ended by the client before the response was sent */
};

/* What one request gets. */
struct fl_decision {
    struct fl_behaviour b; /* effective behaviour */
    int fail;              /* 1: answer with the configured fault */
    int slot;              /* counter slot, -1 when the table was full */
};

enum fl_count { FL_COUNT_OK, FL_COUNT_FAILED, FL_COUNT_ABORTED };

struct fl_table;

/* fl_table_create: table of at most capacity models (> 0), draws seeded from seed.
 * Returns new (destroy with fl_table_destroy) or NULL when out of memory. */
struct fl_table *fl_table_create(size_t capacity, uint64_t seed);

/* fl_table_destroy: free, set *t NULL. Accepts NULL. */
void fl_table_destroy(struct fl_table **t);

/* fl_table_merge: merge the fields of obj (borrowed JSON object) into the model `name`'s
 * behaviour (name NULL: the "default" object). A field set to null returns to inheriting.
 * Unknown fields and out-of-range values are refused with TG_EINVAL/TG_ERANGE and a reason in
 * err, leaving the behaviour unchanged. TG_EFULL when a new model does not fit. Any thread. */
int fl_table_merge(struct fl_table *t, const char *name, json_t *obj, char *err, size_t errlen);

/* fl_table_load: apply a whole config object {"default":{..},"models":{NAME:{..}}} and keep
 * it as the baseline that fl_table_reset(t, 1) returns to. Same errors as fl_table_merge. */
int fl_table_load(struct fl_table *t, json_t *config, char *err, size_t errlen);

/* fl_table_decide: count one request for model `name` (stream: 1 when it asks for a stream)
 * and decide its behaviour into *out. Any thread. */
void fl_table_decide(struct fl_table *t, const char *name, int stream, struct fl_decision *out);

/* fl_table_count_unnamed: count a request that named no model (totals only). */
void fl_table_count_unnamed(struct fl_table *t, int stream);

/* fl_table_count: add one to counter `what` of slot (-1: totals only). Any thread. */
void fl_table_count(struct fl_table *t, int slot, enum fl_count what);

/* fl_table_stats: new JSON {"models":{NAME:{counters}},"total":{counters},"untracked":N}. */
json_t *fl_table_stats(struct fl_table *t);

/* fl_table_models: new JSON object {NAME: effective behaviour} plus "default". */
json_t *fl_table_describe(struct fl_table *t);

/* fl_table_names: new JSON array of model names known to the table (configured or seen). */
json_t *fl_table_names(struct fl_table *t);

/* fl_table_reset: zero every counter and reseed the draws; with restore_config also return
 * every behaviour to the loaded baseline. Any thread. */
void fl_table_reset(struct fl_table *t, int restore_config);

/* fl_fault_name: "context_window", ... or NULL for FL_FAULT_NONE. */
const char *fl_fault_name(enum fl_fault f);

#endif
