#include "alert_text.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "tg_limits.h"
#include "tg_utf8.h"

void sp_alert_clean_str(char *s, size_t cap)
{
    size_t len;
    size_t i = 0;

    if (cap == 0)
        return;
    s[cap - 1] = '\0';
    len = strlen(s);
    while (i < len) {
        unsigned char c = (unsigned char)s[i];
        size_t n;

        if (c < 0x20 || c == 0x7f) {
            s[i++] = ' ';
            continue;
        }
        n = tg_utf8_seq((const unsigned char *)s + i, len - i);
        if (n == 0) {
            s[i++] = '?';
            continue;
        }
        i += n;
    }
}

/* Replace s[start, end) with repl (strlen(repl) <= end - start), shifting the tail left. */
static void replace_span(char *s, size_t start, size_t end, const char *repl)
{
    size_t rl = strlen(repl);
    size_t tail = strlen(s + end) + 1;

    memcpy(s + start, repl, rl);
    memmove(s + start + rl, s + end, tail);
}

static int is_token_char(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_' || c == '.' || c == '~' || c == '+' || c == '/' || c == '=';
}

static int is_space_or_end(unsigned char c)
{
    return c == '\0' || c == ' ' || c == '\t' || c == '"' || c == '\'' || c == ',' || c == ';' ||
           c == '>' || c == ')';
}

/* Mask every occurrence of needle (len >= 4) in s. Returns replacements. */
static int mask_literal(char *s, const char *needle, size_t nlen)
{
    int count = 0;
    char *p = s;

    if (nlen < 4)
        return 0;
    while ((p = strstr(p, needle)) != NULL) {
        replace_span(s, (size_t)(p - s), (size_t)(p - s) + nlen, "***");
        p += 3;
        count++;
    }
    return count;
}

/* Names after which an '=' or ':' introduces a value that is treated as a credential. */
static const char *const secret_names[] = {"key", "token", "secret", "password", "authorization"};

int sp_alert_mask_str(char *s, size_t cap, const char *const *secrets, size_t nsecrets)
{
    int count = 0;
    size_t i = 0;

    if (cap == 0)
        return 0;
    s[cap - 1] = '\0';
    for (size_t k = 0; k < nsecrets; k++) {
        const char *sec = secrets[k];
        const char *scheme;

        if (sec == NULL || sec[0] == '\0')
            continue;
        count += mask_literal(s, sec, strlen(sec));
        scheme = strstr(sec, "://");
        if (scheme != NULL) {
            const char *path = strchr(scheme + 3, '/');

            if (path != NULL && strlen(path) >= 4)
                count += mask_literal(s, path, strlen(path));
        }
    }
    while (s[i] != '\0') {
        size_t start = 0, end;
        int hit = 0;
        unsigned char lc = (unsigned char)s[i] | 0x20; /* ASCII lower case, for a quick gate */

        if (lc != 's' && lc != 'b' && lc != 'h' && lc != 'k' && lc != 't' && lc != 'p' &&
            lc != 'a') {
            i++;
            continue;
        }
        if ((s[i] == 's' || s[i] == 'S') && (s[i + 1] == 'k' || s[i + 1] == 'K') &&
            (s[i + 2] == '-' || s[i + 2] == '_') &&
            (i == 0 || !is_token_char((unsigned char)s[i - 1]) || s[i - 1] == '/')) {
            start = i + 3;
            end = start;
            while (is_token_char((unsigned char)s[end]))
                end++;
            hit = end - start >= 8;
        } else if (strncasecmp(s + i, "bearer ", 7) == 0) {
            start = i + 7;
            end = start;
            while (!is_space_or_end((unsigned char)s[end]))
                end++;
            hit = end > start;
        } else if (strncasecmp(s + i, "hooks.slack.com/", 16) == 0) {
            start = i + 16;
            end = start;
            while (!is_space_or_end((unsigned char)s[end]))
                end++;
            hit = end > start;
        } else {
            for (size_t k = 0; k < sizeof(secret_names) / sizeof(secret_names[0]); k++) {
                size_t nl = strlen(secret_names[k]);
                size_t j;

                if (strncasecmp(s + i, secret_names[k], nl) != 0)
                    continue;
                j = i + nl;
                if (s[j] == '"')
                    j++;
                if (s[j] != '=' && s[j] != ':')
                    continue;
                j++;
                while (s[j] == ' ' || s[j] == '"')
                    j++;
                /* "Authorization: Bearer <token>": the token is the secret, not the scheme. */
                if (strncasecmp(s + j, "bearer ", 7) == 0)
                    j += 7;
                else if (strncasecmp(s + j, "basic ", 6) == 0)
                    j += 6;
                start = j;
                end = start;
                while (!is_space_or_end((unsigned char)s[end]))
                    end++;
                hit = end - start >= 6;
                break;
            }
        }
        if (hit && !(end - start == 3 && memcmp(s + start, "***", 3) == 0)) {
            replace_span(s, start, end, "***");
            count++;
            i = start + 3;
            continue;
        }
        i++;
    }
    return count;
}

void sp_alert_sanitize(struct sp_alert *a, const char *const *secrets, size_t nsecrets)
{
    if ((int)a->type < 0 || a->type >= SP_ALERT_TYPE_COUNT)
        a->type = SP_ALERT_SPEND_TRACKING_DEGRADED;
    if ((int)a->severity < 0 || a->severity > SP_ALERT_CRITICAL)
        a->severity = SP_ALERT_WARNING;
    if (a->nfields > SP_ALERT_FIELDS_MAX)
        a->nfields = SP_ALERT_FIELDS_MAX;
    sp_alert_clean_str(a->subject, sizeof(a->subject));
    sp_alert_mask_str(a->subject, sizeof(a->subject), secrets, nsecrets);
    sp_alert_clean_str(a->summary, sizeof(a->summary));
    sp_alert_mask_str(a->summary, sizeof(a->summary), secrets, nsecrets);
    for (uint32_t i = 0; i < a->nfields; i++) {
        sp_alert_clean_str(a->fields[i].name, sizeof(a->fields[i].name));
        sp_alert_mask_str(a->fields[i].name, sizeof(a->fields[i].name), secrets, nsecrets);
        sp_alert_clean_str(a->fields[i].value, sizeof(a->fields[i].value));
        sp_alert_mask_str(a->fields[i].value, sizeof(a->fields[i].value), secrets, nsecrets);
    }
}

/* A fixed-capacity writer: once something does not fit, everything after it is dropped and
 * the cut mark is appended in the room kept for it. */
struct text_writer {
    char *out;
    size_t limit; /* bytes usable for content; the cut mark has its own room after it */
    size_t len;
    int cut;
};

static void tw_put(struct text_writer *w, const char *p, size_t n)
{
    if (w->cut)
        return;
    if (w->len + n > w->limit) {
        w->cut = 1;
        return;
    }
    memcpy(w->out + w->len, p, n);
    w->len += n;
}

static void tw_raw(struct text_writer *w, const char *s)
{
    tw_put(w, s, strlen(s));
}

/* Append s with Slack mrkdwn escaping (&, <, >). A multibyte character goes in whole or not
 * at all. s is sanitized (valid UTF-8, no control bytes); anything else is still bounded. */
static void tw_md(struct text_writer *w, const char *s)
{
    size_t len = strlen(s);
    size_t i = 0;

    while (i < len && !w->cut) {
        unsigned char c = (unsigned char)s[i];
        size_t n;

        if (c == '&') {
            tw_put(w, "&amp;", 5);
            i++;
        } else if (c == '<') {
            tw_put(w, "&lt;", 4);
            i++;
        } else if (c == '>') {
            tw_put(w, "&gt;", 4);
            i++;
        } else {
            n = tg_utf8_seq((const unsigned char *)s + i, len - i);
            if (n == 0) {
                tw_put(w, "?", 1);
                i++;
            } else {
                tw_put(w, s + i, n);
                i += n;
            }
        }
    }
}

static const char *const severity_names[] = {"info", "warning", "critical"};
static const char *const severity_emoji[] = {
    ":information_source:", ":warning:", ":rotating_light:"};

size_t sp_alert_render_text(const struct sp_alert *a, uint64_t suppressed, uint32_t window_s,
                            char *out, size_t outcap)
{
    struct text_writer w;
    size_t max;
    int sev = (int)a->severity;
    uint32_t nfields = a->nfields > SP_ALERT_FIELDS_MAX ? SP_ALERT_FIELDS_MAX : a->nfields;
    char num[96];

    if (outcap == 0)
        return 0;
    max = outcap - 1;
    if (max > TG_ALERT_TEXT_MAX_BYTES)
        max = TG_ALERT_TEXT_MAX_BYTES;
    if (max < SP_ALERT_CUT_MARK_LEN) {
        out[0] = '\0';
        return 0;
    }
    if (sev < 0 || sev > SP_ALERT_CRITICAL)
        sev = SP_ALERT_WARNING;
    w.out = out;
    w.limit = max - SP_ALERT_CUT_MARK_LEN;
    w.len = 0;
    w.cut = 0;

    tw_raw(&w, severity_emoji[sev]);
    tw_raw(&w, " *[");
    tw_raw(&w, severity_names[sev]);
    tw_raw(&w, "] ");
    tw_raw(&w, sp_alert_type_name((int)a->type));
    tw_raw(&w, "*: ");
    tw_md(&w, a->subject);
    if (a->summary[0] != '\0') {
        tw_raw(&w, "\n");
        tw_md(&w, a->summary);
    }
    if (suppressed > 0) {
        snprintf(num, sizeof(num),
                 "\n_%" PRIu64 " similar alert%s suppressed in the last %" PRIu32 " s_", suppressed,
                 suppressed == 1 ? "" : "s", window_s);
        tw_raw(&w, num);
    }
    for (uint32_t i = 0; i < nfields; i++) {
        tw_raw(&w, i == 0 ? "\n\n" : "\n");
        tw_raw(&w, "\xe2\x80\xa2 *");
        tw_md(&w, a->fields[i].name);
        tw_raw(&w, "*: ");
        tw_md(&w, a->fields[i].value);
    }
    if (w.cut) {
        memcpy(out + w.len, SP_ALERT_CUT_MARK, SP_ALERT_CUT_MARK_LEN);
        w.len += SP_ALERT_CUT_MARK_LEN;
    }
    out[w.len] = '\0';
    return w.len;
}

/* JSON escape of one input unit starting at s: writes up to 4 bytes to e, returns the escaped
 * length and sets *consumed to the input bytes it stands for. Quotes, backslashes, newlines
 * and tabs are escaped; other control bytes become spaces; invalid UTF-8 becomes '?'. */
static inline size_t json_esc_unit(const char *s, size_t avail, char e[4], size_t *consumed)
{
    unsigned char c = (unsigned char)s[0];
    size_t n;

    *consumed = 1;
    if (c >= 0x20 && c < 0x7f) {
        if (c == '"' || c == '\\') {
            e[0] = '\\';
            e[1] = (char)c;
            return 2;
        }
        e[0] = (char)c;
        return 1;
    }
    if (c == '\n' || c == '\t') {
        e[0] = '\\';
        e[1] = c == '\n' ? 'n' : 't';
        return 2;
    }
    if (c < 0x80) {
        /* Control bytes have no place in a Slack message: a space keeps the length bound at
         * 2x and the text free of NULs. */
        e[0] = ' ';
        return 1;
    }
    n = tg_utf8_seq((const unsigned char *)s, avail);
    if (n == 0) {
        e[0] = '?';
        return 1;
    }
    for (size_t k = 0; k < n; k++)
        e[k] = s[k];
    *consumed = n;
    return n;
}

/* Escape s[0, len) as JSON string content into out, using at most budget bytes. When the
 * whole does not fit, as much as fits before room for the cut mark is written, then the mark.
 * Returns bytes written (0 when budget < the mark and the input is not empty). */
static size_t json_esc_budget(const char *s, size_t len, char *out, size_t budget)
{
    size_t total = 0;
    size_t i = 0;
    size_t w = 0;
    size_t limit;
    char e[4];
    size_t used;

    while (i < len) {
        total += json_esc_unit(s + i, len - i, e, &used);
        i += used;
    }
    limit = total <= budget
                ? budget
                : (budget >= SP_ALERT_CUT_MARK_LEN ? budget - SP_ALERT_CUT_MARK_LEN : 0);
    i = 0;
    while (i < len) {
        size_t el = json_esc_unit(s + i, len - i, e, &used);

        if (w + el > limit)
            break;
        for (size_t k = 0; k < el; k++)
            out[w + k] = e[k];
        w += el;
        i += used;
    }
    if (i < len && budget >= SP_ALERT_CUT_MARK_LEN) {
        memcpy(out + w, SP_ALERT_CUT_MARK, SP_ALERT_CUT_MARK_LEN);
        w += SP_ALERT_CUT_MARK_LEN;
    }
    return w;
}

struct piece {
    const char *p;
    size_t len;
};

static const char payload_head[] = "{\"text\":\"";
static const char payload_mid[] = "\",\"blocks\":[";
static const char payload_end[] = "]}";
static const char section_head[] =
    "{\"type\":\"section\",\"text\":{\"type\":\"mrkdwn\",\"text\":\"";
static const char section_end[] = "\"}}";
#define LIT_LEN(x) (sizeof(x) - 1)
/* Smallest room worth giving a section's text: below it the block is left out. */
#define SECTION_MIN_ROOM 16
/* Escaped headline never takes more than this, so the sections keep their room. */
#define HEADLINE_ESCAPED_MAX 700

size_t sp_alert_build_payload(const char *text, size_t textlen, char *out, size_t outcap)
{
    struct piece pieces[SP_ALERT_BLOCKS_MAX];
    size_t npieces = 0;
    size_t avail;
    size_t pos = 0;
    size_t hl;
    size_t room;
    size_t i = 0;

    if (outcap < TG_ALERT_PAYLOAD_MAX_BYTES + 1)
        return 0;
    avail = TG_ALERT_PAYLOAD_MAX_BYTES;

    /* Split into parts at blank lines; long parts into section-sized chunks. */
    while (i < textlen && npieces < SP_ALERT_BLOCKS_MAX) {
        const char *start = text + i;
        const char *sep = memmem(start, textlen - i, "\n\n", 2);
        size_t plen = sep != NULL ? (size_t)(sep - start) : textlen - i;
        size_t off = 0;

        while (off < plen && npieces < SP_ALERT_BLOCKS_MAX) {
            size_t chunk = tg_utf8_boundary(start + off, plen - off, SP_ALERT_SECTION_MAX_BYTES);

            if (chunk == 0)
                chunk = plen - off < SP_ALERT_SECTION_MAX_BYTES ? plen - off
                                                                : SP_ALERT_SECTION_MAX_BYTES;
            pieces[npieces].p = start + off;
            pieces[npieces].len = chunk;
            npieces++;
            off += chunk;
        }
        i += plen + (sep != NULL ? 2 : 0);
    }

    /* Headline: the first line, for notifications. */
    hl = 0;
    while (hl < textlen && text[hl] != '\n')
        hl++;
    hl = tg_utf8_boundary(text, hl, SP_ALERT_HEADLINE_MAX_BYTES);

    memcpy(out + pos, payload_head, LIT_LEN(payload_head));
    pos += LIT_LEN(payload_head);
    room = avail - pos - LIT_LEN(payload_mid) - LIT_LEN(payload_end);
    if (room > HEADLINE_ESCAPED_MAX)
        room = HEADLINE_ESCAPED_MAX;
    if (hl == 0) {
        memcpy(out + pos, "alert", 5);
        pos += 5;
    } else {
        pos += json_esc_budget(text, hl, out + pos, room);
    }
    memcpy(out + pos, payload_mid, LIT_LEN(payload_mid));
    pos += LIT_LEN(payload_mid);

    for (size_t k = 0, written = 0; k < npieces; k++) {
        size_t need = (written > 0 ? 1 : 0) + LIT_LEN(section_head) + LIT_LEN(section_end) +
                      LIT_LEN(payload_end);

        if (pieces[k].len == 0)
            continue;
        if (pos + need + SECTION_MIN_ROOM > avail)
            break;
        room = avail - pos - need;
        if (written > 0)
            out[pos++] = ',';
        memcpy(out + pos, section_head, LIT_LEN(section_head));
        pos += LIT_LEN(section_head);
        pos += json_esc_budget(pieces[k].p, pieces[k].len, out + pos, room);
        memcpy(out + pos, section_end, LIT_LEN(section_end));
        pos += LIT_LEN(section_end);
        written++;
    }
    memcpy(out + pos, payload_end, LIT_LEN(payload_end));
    pos += LIT_LEN(payload_end);
    out[pos] = '\0';
    return pos;
}

void sp_alert_format_usd(int64_t nusd, char *out, size_t outcap)
{
    uint64_t u;
    const char *sign = "";

    if (nusd < 0) {
        sign = "-";
        u = (uint64_t)0 - (uint64_t)nusd;
    } else {
        u = (uint64_t)nusd;
    }
    snprintf(out, outcap, "%s$%" PRIu64 ".%04" PRIu64, sign, u / 1000000000u,
             (u % 1000000000u) / 100000u);
}
