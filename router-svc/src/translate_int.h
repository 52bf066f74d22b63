/* translate_int: what translate.c (requests, answers), translate_stream.c (streams) and the
 * Responses translation (translate_responses.c, translate_responses_stream.c) share. Private
 * to those files. */
#ifndef RT_TRANSLATE_INT_H
#define RT_TRANSLATE_INT_H

#include <jansson.h>
#include <stddef.h>

/* prefix then s into dst (cap bytes, NUL-terminated), cut at a character boundary. */
void rt_tr_copy_utf8(char *dst, size_t cap, const char *prefix, const char *s);
/* v is the string s. */
int rt_tr_str_eq(const json_t *v, const char *s);
/* OpenAI finish_reason -> Anthropic stop_reason, and back. */
const char *rt_tr_finish_to_stop(const char *f);
const char *rt_tr_stop_to_finish(const char *s);
/* An integer member, else 0. */
json_int_t rt_tr_int_or_zero(const json_t *o, const char *name);
/* The cache's part of an OpenAI usage object, cut to the prompt tokens. */
json_int_t rt_tr_chat_cached(const json_t *usage);
/* Anthropic's usage object for prompt (cache included), cache reads, cache writes, output. */
json_t *rt_tr_messages_usage(json_int_t prompt, json_int_t read, json_int_t written,
                             json_int_t output);
/* OpenAI's usage object for the same counts (LiteLLM's shape for the cache's writes). */
json_t *rt_tr_chat_usage(json_int_t prompt, json_int_t read, json_int_t written,
                         json_int_t output);
/* An Anthropic usage object's prompt total (input + cache reads + cache writes). */
json_int_t rt_tr_messages_prompt(const json_t *usage);
/* a + b, saturated instead of overflowing (counts a provider sent). */
json_int_t rt_tr_tokens_sum(json_int_t a, json_int_t b);

/* Responses: the request's settings a response object echoes (instructions, max_output_tokens,
 * parallel_tool_calls, temperature, top_p, tool_choice, tools, text, reasoning, metadata,
 * store, truncation, user, ...), with the API's defaults for those absent; req may be NULL.
 * New. */
json_t *rt_tr_resp_echo(const json_t *req);
/* Responses: a response object: id, created_at, status, incomplete_details for reason (NULL:
 * null), model, output (taken), usage (taken; NULL: null), the echoed settings (borrowed,
 * copied in; NULL: none). New, or NULL when out of memory. */
json_t *rt_tr_resp_object(const char *id, int64_t created_s, const char *status,
                          const char *reason, const char *model, json_t *output, json_t *usage,
                          const json_t *echo);
/* Responses: the usage object for the counts (cached cut to input, reasoning to output). */
json_t *rt_tr_resp_usage(json_int_t input, json_int_t cached, json_int_t output,
                         json_int_t reasoning);
/* Responses: the status of an answer whose chat finish_reason was f ("completed", or
 * "incomplete" with *reason max_output_tokens or content_filter; *reason NULL otherwise). */
const char *rt_tr_resp_status(const char *f, const char **reason);
/* Responses: 1 when the request's include asks for reasoning.encrypted_content. */
int rt_tr_resp_wants_enc(const json_t *req);
/* Responses: 1 when the request asks for reasoning summaries (reasoning.summary auto, concise or
 * detailed). The reasoning a provider shows (Claude's summarised thinking, Gemini's thought
 * summaries) is then given as the item's summary (summary_text), as OpenAI's reasoning models
 * give theirs; else as its content (reasoning_text). */
int rt_tr_resp_wants_summary(const json_t *req);
/* Responses: a reasoning item with id and text (NULL: none, a redacted block) as its summary
 * (summary 1) or its content. New, or NULL when out of memory. */
json_t *rt_tr_resp_reasoning_item(const char *id, const json_t *text, int summary);
/* Responses: a reasoning item's encrypted_content for a thinking block's signature (redacted
 * 0) or a redacted block's data (redacted 1), val[0, n) (RT_TRANSLATE_REASONING_ENC_PREFIX,
 * translate.h). New NUL-terminated string (free), *len its length; NULL when out of memory. */
char *rt_tr_reasoning_encode(int redacted, const char *val, size_t n, size_t *len);
/* Responses: encrypted_content s[0, n) decoded. 0 with *redacted and *val (new JSON string:
 * the signature or the data); 1 when s is not one of ours (no prefix: left alone); TG_EINVAL
 * with err (what is wrong, without the field's name) when it has the prefix but does not
 * decode; TG_ENOMEM. Work and memory linear in n. */
int rt_tr_reasoning_decode(const char *s, size_t n, int *redacted, json_t **val, char *err,
                           size_t errlen);

#endif
