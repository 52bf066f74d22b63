/* api_error: error bodies in the client API's own shape:
 *   OpenAI:    {"error":{"message":M,"type":T,"param":null,"code":C}}
 *   Anthropic: {"type":"error","error":{"type":T,"message":M}}
 * The message is masked first (mask.h: secrets and key-like strings never leave the process;
 * masking fails closed). */
#ifndef RT_API_ERROR_H
#define RT_API_ERROR_H

#include <stddef.h>

struct rt_mask;

/* Longest message kept (bytes, after masking). */
#define RT_API_ERROR_MESSAGE_MAX 512

/* rt_api_error_body: the body for status with code (the OpenAI shape's code; may be NULL) and
 * message (may be NULL). mask: borrowed, may be NULL (built-in rules). Returns new malloc'd
 * NUL-terminated JSON (a fixed one when the JSON could not be built), or NULL when out of
 * memory. Any thread. */
char *rt_api_error_body(const struct rt_mask *mask, int anthropic, int status, const char *code,
                        const char *message);

#endif
