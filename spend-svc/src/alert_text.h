/* alert_text: the pure part of the alerter. Cleaning, masking and rendering an alert, and
 * building the Slack payload from the rendered text, each into caller-provided fixed buffers.
 *
 * No allocation, no I/O, no clock. Every function here costs time bounded by its output
 * capacity (or by the fixed size of struct sp_alert), never by what the input claims to be.
 *
 * Message layout (Slack mrkdwn, sections separated by a blank line):
 *   :warning: *[warning] deployment_failures*: deployment main-1 failing
 *   12 of 20 attempts failed in the last 60 s
 *
 *   *deployment*: main-1
 *   *model_group*: gpt-main
 *
 *   _3 similar alerts suppressed in the last 600 s_
 * The payload is {"text": <first line>, "blocks": [<one mrkdwn section per part>]}: Slack
 * shows the blocks and uses "text" for notifications. */
#ifndef SP_ALERT_TEXT_H
#define SP_ALERT_TEXT_H

#include <stddef.h>
#include <stdint.h>

#include "alert.h"

/* Slack limits we stay within (section text is counted in characters by Slack; bytes >= chars,
 * so a byte bound is a safe bound). */
#define SP_ALERT_SECTION_MAX_BYTES 3000
#define SP_ALERT_BLOCKS_MAX 50
/* Longest top-level "text" (the notification line), bytes before escaping. */
#define SP_ALERT_HEADLINE_MAX_BYTES 300
/* Marker appended where something was cut: U+2026 HORIZONTAL ELLIPSIS. */
#define SP_ALERT_CUT_MARK "\xe2\x80\xa6"
#define SP_ALERT_CUT_MARK_LEN 3

/* sp_alert_clean_str: in place on a NUL-terminated buffer of cap bytes: force a NUL at cap - 1,
 * replace control bytes (< 0x20, 0x7f) with a space and every byte of an invalid UTF-8
 * sequence with '?'. Never lengthens the string. Pure. */
void sp_alert_clean_str(char *s, size_t cap);

/* sp_alert_mask_str: in place, replace credential-looking text with "***": "sk-" or "sk_"
 * followed by 8+ token characters, "Bearer <token>", "hooks.slack.com/<path>",
 * "api_key=<v>"/"key=<v>"-style assignments, and every occurrence of each of the nsecrets
 * strings (and of the path part of each that is a URL). Never lengthens the string. Returns
 * the number of replacements. secrets borrowed; empty entries ignored. Pure. */
int sp_alert_mask_str(char *s, size_t cap, const char *const *secrets, size_t nsecrets);

/* sp_alert_sanitize: clean and mask every string of *a in place, clamp nfields. */
void sp_alert_sanitize(struct sp_alert *a, const char *const *secrets, size_t nsecrets);

/* sp_alert_render_text: render *a (already sanitized) as Slack mrkdwn (&, <, > escaped) into
 * out (outcap bytes, NUL-terminated), at most min(outcap - 1, TG_ALERT_TEXT_MAX_BYTES) bytes,
 * cut at a UTF-8 boundary with SP_ALERT_CUT_MARK. suppressed > 0 adds the "N similar alerts
 * suppressed in the last W s" line (window_s = W). Returns the length. Pure. */
size_t sp_alert_render_text(const struct sp_alert *a, uint64_t suppressed, uint32_t window_s,
                            char *out, size_t outcap);

/* sp_alert_build_payload: the Slack JSON for rendered text (textlen bytes, valid UTF-8, parts
 * separated by "\n\n") into out (outcap >= TG_ALERT_PAYLOAD_MAX_BYTES + 1), NUL-terminated.
 * The result is valid JSON of at most TG_ALERT_PAYLOAD_MAX_BYTES bytes whatever the text holds
 * (quotes, backslashes, control bytes, multibyte characters): each string is escaped into the
 * room left for it and cut at a character boundary with SP_ALERT_CUT_MARK. Control bytes other
 * than newline and tab become spaces, invalid UTF-8 becomes '?'. "text" is the first
 * line, at most SP_ALERT_HEADLINE_MAX_BYTES before escaping; one section block per non-empty
 * part (split further at SP_ALERT_SECTION_MAX_BYTES), at most SP_ALERT_BLOCKS_MAX. Returns the
 * length, or 0 when outcap is too small. Pure. */
size_t sp_alert_build_payload(const char *text, size_t textlen, char *out, size_t outcap);

/* sp_alert_format_usd: nano-USD as "$12.3456" (4 decimals, truncated) into out. Pure. */
void sp_alert_format_usd(int64_t nusd, char *out, size_t outcap);

#endif
