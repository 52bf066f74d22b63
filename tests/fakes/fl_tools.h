/* fl_tools: tool calls in fake-llm's OpenAI chat completions and Anthropic messages answers.
 *
 * One deterministic behaviour, the same as tests/fakes/cloud_fake.py's: with tools declared and
 * a user turn last, the answer calls the first tool (the one tool_choice names; the first for
 * "required"/"any"; the first two when the user's text carries FL_TOOL_PARALLEL_MARKER, two
 * or more tools are declared and parallel calls are not disabled: chat parallel_tool_calls
 * false, messages tool_choice.disable_parallel_tool_use), with arguments made from the tool's
 * schema (each top-level property: strings "Paris", integers 3, numbers 2.5, booleans true,
 * arrays [], objects {}, anything else null). With tool results last, the answer is the text FL_TOOL_ECHO_PREFIX +
 * the results' strings joined by "; ", so a test sees that the results reached the provider.
 * With FL_TOOL_PREAMBLE_MARKER in the user's text, FL_TOOL_PREAMBLE_TEXT comes before the
 * calls (the message's content; Anthropic: a text block before the tool_use blocks). With
 * FL_TOOL_ONESHOT_MARKER, a chat stream sends every call whole in one chunk (as vLLM and Groq
 * do) instead of the id and name first and the arguments in pieces.
 *
 * The request is checked first as the real API checks it (chat: tools[].function.name,
 * tool_choice, every tool message answering a tool call of the assistant message before it,
 * and every call answered; messages: tools[].input_schema of type object, tool_choice, every
 * tool_result answering a tool_use of the assistant turn just before, every tool_use answered,
 * tools declared when the history holds tool_use or tool_result blocks),
 * so that a gateway's translation defect is a 400 naming the problem, never a silent pass.
 *
 * Bounded: FL_TOOL_CALLS_MAX calls per answer, names FL_TOOL_NAME_MAX bytes, arguments
 * FL_TOOL_ARGS_MAX bytes, the echo FL_TOOL_ECHO_MAX bytes (cut at a character boundary), at
 * most FL_TOOL_PENDING_MAX calls in one assistant turn; past those the request is a 400. No
 * I/O, no locks: any thread. */
#ifndef FL_TOOLS_H
#define FL_TOOLS_H

#include <stddef.h>

#include <jansson.h>

#include "fl_body.h"
#include "tg_buf.h"

#define FL_TOOL_CALLS_MAX 2u      /* calls in one answer */
#define FL_TOOL_NAME_MAX 64u      /* bytes of a tool name, NUL excluded */
#define FL_TOOL_ARGS_MAX 1024u    /* bytes of one call's arguments (ASCII JSON), NUL excluded */
#define FL_TOOL_ECHO_MAX 2048u    /* bytes of the echoed results, NUL excluded */
#define FL_TOOL_PENDING_MAX 64u   /* tool calls of one assistant turn checked for answers */
#define FL_TOOL_PARALLEL_MARKER "[parallel]"
#define FL_TOOL_ECHO_PREFIX "the tool said: "
#define FL_TOOL_PREAMBLE_MARKER "[preamble]"
#define FL_TOOL_PREAMBLE_TEXT "Let me check."
#define FL_TOOL_ONESHOT_MARKER "[oneshot]" /* chat streams: every call whole in one chunk */

enum fl_tool_kind {
    FL_TOOL_NONE,  /* no tool involved: the usual generated answer */
    FL_TOOL_CALLS, /* answer with calls[0..n_calls) */
    FL_TOOL_ECHO,  /* answer with the text echo */
};

struct fl_tool_call {
    char name[FL_TOOL_NAME_MAX + 1]; /* the tool's name */
    char args[FL_TOOL_ARGS_MAX + 1]; /* compact JSON object, ASCII only */
};

struct fl_tool_plan {
    enum fl_tool_kind kind;
    size_t n_calls;                               /* FL_TOOL_CALLS: 1..FL_TOOL_CALLS_MAX */
    int preamble;                                 /* FL_TOOL_CALLS: FL_TOOL_PREAMBLE_TEXT first */
    int oneshot; /* FL_TOOL_CALLS, chat stream: all calls whole in one chunk */
    struct fl_tool_call calls[FL_TOOL_CALLS_MAX]; /* FL_TOOL_CALLS */
    char echo[FL_TOOL_ECHO_MAX + 1];              /* FL_TOOL_ECHO: valid UTF-8 text */
};

/* fl_tools_plan: check root's tools, tool choice, calls and results for api (FL_API_CHAT or
 * FL_API_MESSAGES; any other api: FL_TOOL_NONE) and fill p with what to answer.
 * Returns NULL, or a client-facing reason (err, or a static string) when the request is not in
 * the API's shape. root is borrowed. */
const char *fl_tools_plan(const json_t *root, enum fl_api api, struct fl_tool_plan *p, char *err,
                          size_t errlen);

/* fl_tools_capacity: bytes a tg_buf needs, beyond fl_body_capacity(), for p's answer (0 for
 * FL_TOOL_NONE). */
size_t fl_tools_capacity(const struct fl_tool_plan *p);

/* fl_tools_success: the non-streaming answer of p (kind FL_TOOL_CALLS or FL_TOOL_ECHO) in
 * g->api's shape, usage from g. Returns 0, TG_EINVAL (kind or api) or TG_EFULL. */
int fl_tools_success(struct tg_buf *out, const struct fl_gen *g, const struct fl_tool_plan *p);

/* fl_tools_stream: the SSE stream of p, one segment per event; each call's arguments (and the
 * echo) in several deltas. Returns 0, TG_EINVAL or TG_EFULL. */
int fl_tools_stream(struct tg_buf *out, struct fl_segments *seg, const struct fl_gen *g,
                    const struct fl_tool_plan *p);

#endif
