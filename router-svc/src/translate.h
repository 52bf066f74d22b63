/* translate: Anthropic Messages <-> OpenAI Chat Completions, for request bodies, JSON responses
 * and streaming events. Pure functions over jansson values; no I/O.
 *
 * Field names from the providers' API references (Anthropic: Messages, streaming messages, tool
 * use, extended thinking, vision; OpenAI: chat completions create, the chat object, the chunk
 * object).
 *
 * Requests, both ways: system prompts (a string or text blocks), text, images (OpenAI image_url
 * with a data:<type>;base64 URL <-> an Anthropic base64 image source, an http(s) URL <-> a url
 * source), tools (function {name, description, parameters} <-> {name, description,
 * input_schema}), tool_choice (auto / none / required / a function <-> auto / none / any /
 * tool), parallel_tool_calls false <-> disable_parallel_tool_use, assistant tool calls (their
 * JSON arguments text <-> a tool_use input object), tool results (role tool messages <-> one
 * user message of tool_result blocks), stop sequences, temperature, top_p, max_tokens, user,
 * stream; reasoning_effort <-> thinking budget_tokens (RT_TRANSLATE_THINKING_*); an OpenAI
 * response_format (json_schema, json_object) becomes, for Anthropic, a forced tool named
 * RT_TRANSLATE_JSON_TOOL whose input_schema is the schema (json_object: any object), and that
 * tool's input comes back as the message's text (RT_TRANSLATE_JSON_OUTPUT).
 * Left out on purpose: image detail, tool strict, cache_control (hints the other side has no
 * place for), thinking blocks of earlier assistant turns (OpenAI takes no reasoning as input),
 * tool_result is_error.
 * Refused (NULL with err naming the field: the client's 400): what the target cannot express,
 * e.g. n > 1, logprobs, top_logprobs, audio, non-text modalities, logit_bias, non-zero
 * presence/frequency penalties, seed, prediction, web_search_options, the legacy functions API,
 * audio and file parts for Anthropic; top_k, server tools, documents, images in tool results
 * for OpenAI; unknown roles and block types; response_format with tools.
 *
 * Answers: text, tool calls <-> tool_use blocks (finish_reason tool_calls <-> stop_reason
 * tool_use), Anthropic thinking -> OpenAI reasoning_content and back, usage with the cache's
 * parts. Streams: the same, event by event, with at most RT_TRANSLATE_TOOLS_MAX tool calls a
 * stream (more is TG_EPROTO: the stream fails in-band). */
#ifndef RT_TRANSLATE_H
#define RT_TRANSLATE_H

#include <jansson.h>
#include <stdint.h>

#include "tg_buf.h"

enum rt_translate_dir {
    RT_TRANSLATE_NONE = 0,
    RT_TRANSLATE_CHAT_TO_MESSAGES, /* upstream sends OpenAI chunks, client wants Anthropic */
    RT_TRANSLATE_MESSAGES_TO_CHAT  /* upstream sends Anthropic events, client wants OpenAI */
};

/* Anthropic requires max_tokens; used when a chat request has neither max_tokens nor
 * max_completion_tokens (plus the thinking budget when reasoning_effort asks for one). */
#define RT_TRANSLATE_DEFAULT_MAX_TOKENS 4096

/* reasoning_effort -> Anthropic thinking.budget_tokens (LiteLLM's figures; Anthropic's minimum
 * budget is 1024, so minimal is low). An explicit max tokens not above the budget is refused
 * (Anthropic requires budget_tokens < max_tokens). Back: a budget under MEDIUM is low, under
 * HIGH medium, else high, and max_tokens goes as max_completion_tokens (what OpenAI's reasoning
 * models take). */
#define RT_TRANSLATE_THINKING_LOW_TOKENS 1024
#define RT_TRANSLATE_THINKING_MEDIUM_TOKENS 2048
#define RT_TRANSLATE_THINKING_HIGH_TOKENS 4096

/* The forced tool that carries an OpenAI response_format to Anthropic (LiteLLM's name). A
 * client tool of that name alongside response_format is refused with the rest of the tools. */
#define RT_TRANSLATE_JSON_TOOL "json_tool_call"

/* Tool calls tracked in one translated stream (as RT_DIALECT_TOOLS_MAX in the dialects). */
#define RT_TRANSLATE_TOOLS_MAX 32

/* Flags for answers and streams (rt_translate_flags). */
#define RT_TRANSLATE_JSON_OUTPUT 1u /* the request's response_format went as the JSON tool: its
                                     * input is the answer's text, finish_reason stop */

/* rt_translate_flags: the flags the answer to the chat request req (borrowed) needs when it
 * goes to an Anthropic deployment (dir RT_TRANSLATE_MESSAGES_TO_CHAT); 0 otherwise. */
unsigned rt_translate_flags(const json_t *req, enum rt_translate_dir dir);

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

/* rt_translate_messages_resp_to_chat: Anthropic message -> OpenAI chat.completion; flags from
 * rt_translate_flags of the request. */
json_t *rt_translate_messages_resp_to_chat(const json_t *resp, const char *model,
                                           unsigned flags);

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
    unsigned flags;                /* RT_TRANSLATE_JSON_OUTPUT */
    int block;      /* CHAT_TO_MESSAGES: index of the open content block, -1 when none */
    int block_kind; /* its kind (translate.c) */
    int n_blocks;   /* content blocks started */
    int json_block; /* MESSAGES_TO_CHAT: index of the JSON tool's block, -1 when none */
    int n_tools;    /* tool calls started: their OpenAI index */
    /* per tool call: the Anthropic block index (MESSAGES_TO_CHAT), or the OpenAI index
     * (CHAT_TO_MESSAGES) and its Anthropic block */
    int tool_key[RT_TRANSLATE_TOOLS_MAX];
    int tool_block[RT_TRANSLATE_TOOLS_MAX];
};

/* rt_translate_stream_init: st for a stream of direction dir shown to the client as model;
 * flags from rt_translate_flags. */
void rt_translate_stream_init(struct rt_translate_stream *st, enum rt_translate_dir dir,
                              const char *model, int64_t created_s, unsigned flags);

/* rt_translate_stream_event: translate one upstream SSE event (event name may be NULL or "",
 * data is the joined data lines, len bytes) into client SSE bytes appended to out.
 * Returns 0, or TG_EPROTO when data is not the JSON it should be or cannot be translated (more
 * than RT_TRANSLATE_TOOLS_MAX tool calls, interleaved calls, input for a block that is not a
 * call; out and st unchanged), or TG_EFULL when out is full (the event is cut). Thread of the
 * caller. */
int rt_translate_stream_event(struct rt_translate_stream *st, const char *event, const char *data,
                              size_t len, struct tg_buf *out);

/* rt_translate_stream_finish: append the closing events if the upstream ended without them
 * (idempotent). Returns 0 or TG_EFULL. */
int rt_translate_stream_finish(struct rt_translate_stream *st, struct tg_buf *out);

#endif
