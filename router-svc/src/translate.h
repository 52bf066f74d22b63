/* translate: Anthropic Messages <-> OpenAI Chat Completions, for request bodies, JSON responses
 * and streaming events. Pure functions over jansson values; no I/O.
 *
 * Covered: messages (text content), system, max_tokens, stop / stop_sequences, temperature,
 * top_p, user, stream; usage and finish/stop reasons. Tool use is not translated yet: tool
 * blocks are dropped from requests and responses. */
#ifndef RT_TRANSLATE_H
#define RT_TRANSLATE_H

#include <jansson.h>
#include <stdint.h>

#include "tg_buf.h"

/* Anthropic requires max_tokens; used when a chat request has none. */
#define RT_TRANSLATE_DEFAULT_MAX_TOKENS 4096

/* rt_translate_messages_to_chat: Anthropic /v1/messages request -> OpenAI chat request for
 * model. req is borrowed and not modified. Returns new (json_decref) or NULL with err filled. */
json_t *rt_translate_messages_to_chat(const json_t *req, const char *model, char *err,
                                      size_t errlen);

/* rt_translate_chat_to_messages: OpenAI chat request -> Anthropic messages request for model.
 * Same ownership as above. */
json_t *rt_translate_chat_to_messages(const json_t *req, const char *model, char *err,
                                      size_t errlen);

/* rt_translate_chat_resp_to_messages: OpenAI chat.completion -> Anthropic message. model is
 * the name shown to the client. Returns new or NULL when resp is not a chat completion. */
json_t *rt_translate_chat_resp_to_messages(const json_t *resp, const char *model);

/* rt_translate_messages_resp_to_chat: Anthropic message -> OpenAI chat.completion. */
json_t *rt_translate_messages_resp_to_chat(const json_t *resp, const char *model);

enum rt_translate_dir {
    RT_TRANSLATE_NONE = 0,
    RT_TRANSLATE_CHAT_TO_MESSAGES, /* upstream sends OpenAI chunks, client wants Anthropic */
    RT_TRANSLATE_MESSAGES_TO_CHAT  /* upstream sends Anthropic events, client wants OpenAI */
};

/* Streaming state, caller storage; rt_translate_stream_init before use. Fixed size. */
struct rt_translate_stream {
    enum rt_translate_dir dir;
    int started;  /* first client event written */
    int finished; /* terminating event written */
    char id[72];
    char model[129];       /* name shown to the client */
    char finish[32];       /* finish/stop reason in the client's vocabulary */
    int64_t prompt_tokens; /* every input token, the cache's included */
    int64_t completion_tokens;
    int64_t cache_read_tokens;     /* of prompt_tokens: read from the prompt cache */
    int64_t cache_creation_tokens; /* of prompt_tokens: written to it */
    int64_t created_s;             /* epoch seconds for OpenAI chunks */
};

void rt_translate_stream_init(struct rt_translate_stream *st, enum rt_translate_dir dir,
                              const char *model, int64_t created_s);

/* rt_translate_stream_event: translate one upstream SSE event (event name may be NULL or "",
 * data is the joined data lines, len bytes) into client SSE bytes appended to out.
 * Returns 0, or TG_EPROTO when data is not the JSON it should be (out unchanged), or TG_EFULL
 * when out is full (the event is cut). Thread of the caller. */
int rt_translate_stream_event(struct rt_translate_stream *st, const char *event, const char *data,
                              size_t len, struct tg_buf *out);

/* rt_translate_stream_finish: append the closing events if the upstream ended without them
 * (idempotent). Returns 0 or TG_EFULL. */
int rt_translate_stream_finish(struct rt_translate_stream *st, struct tg_buf *out);

#endif
