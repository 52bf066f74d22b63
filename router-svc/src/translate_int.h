/* translate_int: what translate.c (requests, answers) and translate_stream.c (streams) share.
 * Private to those two files. */
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

#endif
