/* jbound: a full JSON parse (jansson) with a bound on nesting and values.
 *
 * jansson builds a tree of about 40 to 100 bytes per value, with no bound of its own on the
 * values or the nesting (the loop thread would spend its time and memory on whatever a client or
 * a provider sends). Before a full parse, one pass over the bytes counts both: a document past
 * either bound is refused without a tree. */
#ifndef RT_JBOUND_H
#define RT_JBOUND_H

#include <stddef.h>
#include <jansson.h>

#define RT_JSON_ANSWER_MAX_DEPTH 128         /* providers' answers (not configurable) */
#define RT_JSON_ANSWER_MAX_ELEMENTS 1000000u /* ... about 100 MB of tree at most */

/* rt_json_load_bounded: json_loadb (flags 0) of text after counting its depth and values (one pass,
 * strings skipped with their escapes). NULL when the bounds are exceeded (jerr->text says which,
 * jerr->position is -1) or the text is not JSON (jansson's jerr). Returns new (json_decref). Any
 * thread. */
json_t *rt_json_load_bounded(const char *text, size_t len, unsigned max_depth,
                             unsigned max_elements, json_error_t *jerr);

#endif
