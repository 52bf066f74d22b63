/* translate: Anthropic Messages <-> OpenAI Chat Completions, for request bodies, JSON responses
 * and streaming events. Pure functions over jansson values; no I/O.
 *
 * Field names from the providers' API references (Anthropic: Messages, streaming messages, tool
 * use, extended thinking, vision; OpenAI: chat completions create, the chat object, the chunk
 * object).
 *
 * Requests, both ways: system prompts (a string or text blocks), text, images (OpenAI image_url
 * with a data:<type>;base64 URL <-> an Anthropic base64 image source, an http(s) URL <-> a url
 * source), PDFs (a document block with a base64 application/pdf source <-> a file part whose
 * file_data is a data:application/pdf;base64, URL, title <-> filename), tools (function {name,
 * description, parameters} <-> {name, description, input_schema}), tool_choice (auto / none /
 * required / a function <-> auto / none / any / tool), parallel_tool_calls false <->
 * disable_parallel_tool_use, assistant tool calls (their JSON arguments text <-> a tool_use input
 * object), tool results (role tool messages <-> one user message of tool_result blocks), stop
 * sequences, temperature, top_p, max_tokens, user, stream; reasoning_effort <-> thinking
 * budget_tokens (RT_TRANSLATE_THINKING_*); an OpenAI response_format (json_schema, json_object)
 * becomes, for Anthropic, a forced tool named RT_TRANSLATE_JSON_TOOL whose input_schema is the
 * schema (json_object: any object), and that tool's input comes back as the message's text
 * (RT_TRANSLATE_JSON_OUTPUT).
 * tool_result is_error <-> a tool message marked RT_TRANSLATE_TOOL_ERROR_MARK; a tool message's
 * image_url parts -> image blocks of its tool_result. An assistant message's thinking_blocks
 * (LiteLLM's field) -> its turn's first thinking / redacted_thinking blocks, signatures and data
 * unchanged (a malformed entry refused, naming it).
 * Left out on purpose: image detail, tool strict, cache_control (hints the other side has no
 * place for), thinking blocks of earlier assistant turns (OpenAI takes no reasoning as input).
 * Refused (NULL with err naming the field: the client's 400): what the target cannot express,
 * e.g. n > 1, logprobs, top_logprobs, audio, non-text modalities, logit_bias, non-zero
 * presence/frequency penalties, seed, prediction, web_search_options, the legacy functions API,
 * audio parts and file parts other than a PDF in file_data for Anthropic; top_k, server tools,
 * documents other than a base64 PDF, a document's context and citations, images in tool
 * results for OpenAI; unknown roles and block types; response_format with tools.
 *
 * Answers: text, tool calls <-> tool_use blocks (finish_reason tool_calls <-> stop_reason
 * tool_use), Anthropic thinking -> OpenAI reasoning_content and back, thinking (with its
 * signature) and redacted_thinking blocks <-> thinking_blocks (back, when there are any, they
 * are the thinking; else reasoning_content, unsigned), usage with the cache's parts. Streams:
 * the same, event by event (a signature_delta, a redacted_thinking block <-> a thinking_blocks
 * delta), with at most RT_TRANSLATE_TOOLS_MAX tool calls a
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
 * goes to an Anthropic deployment (dir RT_TRANSLATE_MESSAGES_TO_CHAT); 0 otherwise. req may be
 * a Responses request (its text.format stands for response_format). */
unsigned rt_translate_flags(const json_t *req, enum rt_translate_dir dir);

/* rt_translate_messages_to_chat: Anthropic /v1/messages request -> OpenAI chat request for
 * model. req is borrowed and not modified. Returns new (json_decref) or NULL with err filled. */
json_t *rt_translate_messages_to_chat(const json_t *req, const char *model, char *err,
                                      size_t errlen);

/* A tool_result's is_error has no member in OpenAI chat: the tool message's text starts with
 * this mark (then a space and the result's text, if any; a content array gets it as its first
 * text part). The reverse translation, and the Gemini and Bedrock dialects, take a tool message
 * that starts with it as an error result (is_error true; functionResponse.response {"error":
 * ...}; toolResult status "error") and take the mark off. */
#define RT_TRANSLATE_TOOL_ERROR_MARK "[tool error]"

/* Options of rt_translate_messages_to_chat_opts. */
#define RT_TRANSLATE_TOOL_MEDIA 1u /* the chat request goes to a dialect (Gemini, Bedrock) that
                                    * takes or refuses images and PDF documents in tool results
                                    * itself: they go as image_url and file parts of the tool
                                    * message. Without it they are refused (an OpenAI tool
                                    * message takes text only). */

#define RT_TRANSLATE_THINKING_BLOCKS 2u /* ... that takes thinking_blocks itself (Bedrock as
                                         * reasoningContent; Gemini leaves them out): an assistant
                                         * turn's thinking and redacted_thinking blocks go as the
                                         * message's thinking_blocks, unchanged (a block without
                                         * its string signature or data refused). Without it they
                                         * are not sent (OpenAI chat takes no reasoning). */

/* rt_translate_messages_to_chat_opts: rt_translate_messages_to_chat with opts
 * (RT_TRANSLATE_TOOL_MEDIA, RT_TRANSLATE_THINKING_BLOCKS). Same ownership. */
json_t *rt_translate_messages_to_chat_opts(const json_t *req, const char *model, unsigned opts,
                                           char *err, size_t errlen);

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

/* OpenAI Responses (/v1/responses) for providers without a Responses API: the request becomes
 * an OpenAI chat request (then, for an Anthropic deployment or a dialect, whatever a chat
 * request becomes there), the chat answer or stream comes back as a Responses answer or event
 * stream (translate_responses.c, translate_responses_stream.c). Shapes from OpenAI's API
 * reference (Responses: create, the response object, input items, streaming events).
 *
 * Request: model, input (a string, or items: messages of role user / assistant / system / developer
 * whose content is a string or input_text / input_image / output_text / refusal parts, input_file
 * parts with file_data as file parts; function_call and function_call_output items), instructions
 * (the first system message), tools (function tools: name, description, parameters and strict at
 * the tool's top level -> under "function"), tool_choice, max_output_tokens ->
 * max_completion_tokens, temperature, top_p, text.format (json_schema, json_object) ->
 * response_format, text.verbosity -> verbosity, reasoning.effort -> reasoning_effort, stream (with
 * stream_options.include_usage), user, metadata, parallel_tool_calls, service_tier,
 * prompt_cache_key, safety_identifier, include reasoning.encrypted_content; reasoning items
 * whose encrypted_content is the router's (RT_TRANSLATE_REASONING_ENC_PREFIX) -> the
 * thinking_blocks of the assistant message or function call that follows them (signatures and
 * data unchanged, for Anthropic and Bedrock).
 * Left out on purpose (hints chat has no place for): reasoning.summary, reasoning items
 * without encrypted_content or with another service's (chat takes no reasoning as input), and
 * ours with no assistant message or call after them, stream_options.include_obfuscation.
 * Refused (NULL with err naming the field: the client's 400): previous_response_id and
 * conversation (the router keeps no conversation state), store true, background true, prompt
 * (stored prompt templates), include values other than reasoning.encrypted_content, our
 * encrypted_content that does not decode, truncation other than disabled,
 * top_logprobs, max_tool_calls, built-in tools (web_search, file_search, ...), tool choices
 * other than none / auto / required / a function, item_reference items and any item type
 * chat has no message for, input_audio parts, images given by file_id, files given by file_id
 * or file_url.
 *
 * Answer: a chat.completion as a "response": status completed, or incomplete with
 * incomplete_details.reason max_output_tokens (finish_reason length) or content_filter;
 * output: reasoning items (one per thinking_blocks entry, the text as reasoning_text, the
 * signature or redacted data as encrypted_content when include asks for it; without
 * thinking_blocks one for reasoning_content), a message item
 * (output_text, or a refusal part), function_call items; usage as input_tokens (with
 * input_tokens_details.cached_tokens), output_tokens (with
 * output_tokens_details.reasoning_tokens), total_tokens; the request's settings echoed. */

/* A reasoning item's encrypted_content written by the router (only when the request's include
 * asks for reasoning.encrypted_content): this prefix, then base64url without padding (RFC 4648
 * section 5) of the compact JSON {"t":"thinking","s":SIGNATURE} (a thinking block's signature)
 * or {"t":"redacted","d":DATA} (a redacted_thinking block's data). Opaque to the client, which
 * sends the item back as it came; in input it is decoded to the assistant turn's
 * thinking_blocks (the text from the item's content, else its summary). The version in the
 * prefix changes when the shape does; a value without the prefix is not ours (left out). */
#define RT_TRANSLATE_REASONING_ENC_PREFIX "tgr1."

/* Output items tracked in one translated Responses stream: every tool call, and the reasoning
 * and message items around them. More is TG_EPROTO (the stream fails in-band). */
#define RT_TRANSLATE_RESP_ITEMS_MAX (RT_TRANSLATE_TOOLS_MAX + 8)

/* rt_translate_responses_to_chat: OpenAI Responses request -> OpenAI chat request for model.
 * req is borrowed and not modified. Returns new (json_decref) or NULL with err filled (the
 * field at fault first; "out of memory" when that was the reason). */
json_t *rt_translate_responses_to_chat(const json_t *req, const char *model, char *err,
                                       size_t errlen);

/* rt_translate_chat_resp_to_responses: OpenAI chat.completion -> Responses "response" object;
 * req is the client's Responses request (borrowed, may be NULL: nothing echoed), model the
 * name shown to the client. Returns new, or NULL when resp is not a chat completion (no
 * choices[0].message object). */
json_t *rt_translate_chat_resp_to_responses(const json_t *resp, const json_t *req,
                                            const char *model);

/* A translated Responses stream: OpenAI chat.completion.chunk data in, Responses events
 * ("event: <type>\ndata: {...}\n\n", each with its sequence_number) out. Heap state: the
 * final events repeat every item's text (output_text.done, content_part.done,
 * output_item.done, response.completed), so the text is kept, with the encrypted_content of
 * reasoning items when the request asks for it, at most text_max bytes
 * (limits.max_response_bytes): more is TG_ETOOBIG. Opaque. */
struct rt_resp_stream;

/* rt_resp_stream_create: state for a stream answering the Responses request req (borrowed for
 * this call only: the settings echoed in the response object are copied) shown to the client
 * as model. New (rt_resp_stream_destroy), or NULL when out of memory. Any thread. */
struct rt_resp_stream *rt_resp_stream_create(const json_t *req, const char *model,
                                             int64_t created_s, size_t text_max);
void rt_resp_stream_destroy(struct rt_resp_stream **st);

/* rt_resp_stream_chunk: one chat chunk's data (len bytes: a chat.completion.chunk JSON object,
 * or [DONE], which writes the closing events) into Responses events appended to out. Returns
 * 0; TG_EPROTO when data is not a chunk or cannot be translated (more than
 * RT_TRANSLATE_RESP_ITEMS_MAX items, a tool call's arguments after another item started; out
 * and the state unchanged); TG_ETOOBIG when the kept text (a signature's encrypted_content
 * included) would pass text_max (out and the state unchanged); TG_EFULL when the events do
 * not fit in out (out and the state unchanged: the caller may give a larger buffer and call
 * again); TG_ENOMEM. A chunk carrying an upstream
 * error writes an "error" event and ends the stream (rt_resp_stream_finished). After the end
 * nothing is written. Thread of the caller. */
int rt_resp_stream_chunk(struct rt_resp_stream *st, const char *data, size_t len,
                         struct tg_buf *out);

/* rt_resp_stream_need: bytes the closing events can take (they repeat the kept text, escaped,
 * and the echoed settings), plus a frame for each item. For sizing the output buffer before a
 * chunk: with twice the chunk's size added it holds a chunk's events unless the chunk opens many
 * tool calls at once (TG_EFULL: grow and call again). */
size_t rt_resp_stream_need(const struct rt_resp_stream *st);

/* rt_resp_stream_finished: 1 once the terminal event (response.completed or
 * response.incomplete) or an error event was written. rt_resp_stream_errored: 1 when it was
 * an error event. rt_resp_stream_seq: the next sequence_number (for an error event written by
 * the caller). */
int rt_resp_stream_finished(const struct rt_resp_stream *st);
int rt_resp_stream_errored(const struct rt_resp_stream *st);
int64_t rt_resp_stream_seq(const struct rt_resp_stream *st);

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
    /* MESSAGES_TO_CHAT: 1 once the call's arguments were written (a call whose input streamed
     * empty gets "{}" when its block stops, as OpenAI sends it) */
    unsigned char tool_args[RT_TRANSLATE_TOOLS_MAX];
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
