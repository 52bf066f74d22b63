/* sse: splitting a provider's server-sent-events stream into events, and one event into its
 * name and data (https://html.spec.whatwg.org/multipage/server-sent-events.html, the subset
 * providers send: "event:" and "data:" fields, lines ending with LF or CRLF, an empty line
 * ending an event). Pure functions over caller buffers: no allocation, no state.
 *
 * Threads: any. */
#ifndef RT_SSE_H
#define RT_SSE_H

#include <stddef.h>

/* rt_sse_event_len: length of the first complete event in p[0, n) including the empty line that
 * ends it ("\n\n" or "\r\n\r\n"), or 0 when no event is complete yet. */
size_t rt_sse_event_len(const char *p, size_t n);

/* rt_sse_parse: the event p[0, n) into its name (the last "event:" field, at most ecap - 1
 * bytes, cut beyond) and its data (the "data:" fields joined with "\n", at most dcap - 1 bytes,
 * cut beyond), both NUL-terminated; *dlen gets the data's length. One space after the colon is
 * not part of a value. Other fields and comments are ignored. ecap and dcap are at least 1. */
void rt_sse_parse(const char *p, size_t n, char *event, size_t ecap, char *data, size_t dcap,
                  size_t *dlen);

#endif
