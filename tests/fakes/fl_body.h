/* fl_body: response bodies in the OpenAI and Anthropic shapes.
 *
 * Every body goes into a caller's tg_buf whose capacity comes from fl_body_capacity(), so a
 * body is never cut; generated text is bounded by FL_TEXT_MAX_WORDS words whatever the token
 * counts say (usage reports the configured counts). No I/O, no locks: any thread. */
#ifndef FL_BODY_H
#define FL_BODY_H

#include <stddef.h>
#include <stdint.h>

#include "tg_buf.h"
#include "fl_model.h"

#define FL_TEXT_MAX_WORDS 4096u                      /* words of generated text at most */
#define FL_EMBED_INPUTS_MAX 2048u                    /* embeddings: input items per request */
#define FL_EMBED_DIMS_MAX 4096u                      /* embeddings: dimensions per vector */
#define FL_EMBED_VALUES_MAX 1048576u                 /* embeddings: inputs x dimensions */
#define FL_STREAM_SEGMENTS_MAX (FL_CHUNKS_MAX + 16u) /* SSE events in one stream */

enum fl_api {
    FL_API_CHAT,       /* POST /v1/chat/completions */
    FL_API_EMBEDDINGS, /* POST /v1/embeddings */
    FL_API_RESPONSES,  /* POST /v1/responses */
    FL_API_MESSAGES,   /* POST /v1/messages (Anthropic) */
};

/* What to generate. */
struct fl_gen {
    enum fl_api api;
    const char *model;              /* borrowed, valid UTF-8 */
    uint32_t prompt_tokens;         /* usage */
    uint32_t completion_tokens;     /* usage */
    uint32_t cached_tokens;         /* of prompt_tokens, from the cache (cut to prompt_tokens) */
    uint32_t cache_creation_tokens; /* of prompt_tokens, written to the cache */
    uint32_t reasoning_tokens;      /* of completion_tokens */
    uint32_t chunks;                /* stream content chunks, >= 1 */
    int include_usage;              /* chat stream: stream_options.include_usage */
    uint64_t id;                    /* per-request number used in ids */
    uint64_t created_s;             /* epoch seconds */
    uint32_t embed_inputs;          /* embeddings: items */
    uint32_t embed_dims;            /* embeddings: dimensions */
};

/* Segments of a stream: event i is bytes [i ? ends[i-1] : 0, ends[i]) of the buffer. */
struct fl_segments {
    size_t ends[FL_STREAM_SEGMENTS_MAX];
    size_t n;
};

/* fl_body_capacity: bytes a tg_buf needs for the body of g (stream: 1 for the SSE stream). */
size_t fl_body_capacity(const struct fl_gen *g, int stream);

/* fl_body_success: the non-streaming success body of g->api into out.
 * Returns 0 or TG_EFULL when out was too small. */
int fl_body_success(struct tg_buf *out, const struct fl_gen *g);

/* fl_body_stream: the SSE stream of g->api (not embeddings) into out, one segment per event.
 * Returns 0, TG_EINVAL for embeddings, TG_EFULL when out or seg was too small. */
int fl_body_stream(struct tg_buf *out, struct fl_segments *seg, const struct fl_gen *g);

/* fl_body_error: an error body in the API's own shape for status and fault (FL_FAULT_NONE: an
 * error matching the status; context_window/content_policy: those errors) into out.
 * message (borrowed, may be NULL) overrides the generated message. Returns 0 or TG_EFULL. */
int fl_body_error(struct tg_buf *out, enum fl_api api, int status, enum fl_fault fault,
                  const char *model, uint32_t prompt_tokens, const char *message);

/* fl_body_garbage: bytes that are not JSON (for the garbage fault). Borrowed static data. */
const char *fl_body_garbage(size_t *len);

/* fl_json_escape: write s as JSON string contents (no quotes) into dst (cap bytes incl NUL).
 * Returns 0 or TG_EFULL (dst then holds a cut, still valid prefix). */
int fl_json_escape(char *dst, size_t cap, const char *s);

#endif
