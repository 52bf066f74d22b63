/* Differential check of request framing: hparse (driven as router-svc's server drives it,
 * hp_conn.c) against nodejs/http-parser 2.9 (Debian's libhttp-parser), an independent and
 * widely deployed parser. Debian builds it with HTTP_PARSER_STRICT=0, its lenient mode (any
 * byte where the CR or LF of the chunked framing belongs, HTAB in the target, "HTTX/1.1" and
 * more are accepted): that only widens what it accepts and hparse rejects, so the check keeps
 * its force; the summary line says which mode the library linked in is. The input is ONE request,
 * fed whole to both; bytes after the first request's end are the next request's and are not looked
 * at.
 *
 * Outcomes: each side accepts (the request is framed to its end), rejects, or is still waiting
 * for bytes when the input ends.
 * - hparse accepts what http_parser rejects, or frames a request that http_parser is still
 *   waiting on: a defect in hparse, abort().
 * - Both accept: method, target (the raw bytes as sent, and hparse's path/query split of them
 *   against http_parser_parse_url's), version, header lines (names, values), framing (chunked),
 *   body length and where the request ends must agree, and hparse may not keep a connection
 *   alive that http_parser would close; else abort().
 * - hparse rejects what http_parser accepts (or rejects, or waits for bytes where http_parser
 *   already decided): hparse is stricter; allowed, counted by category (hparse's status and
 *   message against http_parser's verdict) and summed up in one line at exit.
 *
 * http_parser's quirks, and what is done about each:
 * - It knows a fixed list of methods (GET, POST, ... SOURCE) and rejects every other token,
 *   where hparse takes any token (the router answers an unknown method itself). A request whose
 *   method is a token missing from that list is checked with "GET" in its place, and its method
 *   is not compared (counted as "method unknown to http_parser").
 * - It reports headers, the URL and the body through callbacks, possibly in several calls for
 *   one item: the calls are joined (a field call after a value call starts a new header).
 *   Trailer fields arrive through the same callbacks after on_headers_complete and are not
 *   counted as header lines.
 * - Its header-name matcher marks Transfer-Encoding as present as soon as a name STARTS with
 *   "Transfer-Encoding" ("Transfer-Encodingx: chunked" then fails the request as a
 *   non-chunked coding), where for hparse that is just another header. Before either parser
 *   sees the input, the first byte of such a name (in the lines before the first empty line)
 *   is changed to 'X' — the same unknown header for both — and the case is counted.
 * - It reads on into the next request: it is paused in on_message_complete, where the
 *   request's end is the byte count that http_parser_execute returns.
 * - Header values: it keeps trailing whitespace in the value (hparse strips SP and HTAB), so
 *   values are compared with trailing SP/HTAB removed from http_parser's.
 * - Keep-alive: it also obeys Proxy-Connection (hparse ignores it), keeps an HTTP/1.0
 *   connection alive when "keep-alive" is listed even beside "close", does not close after an
 *   HTTP/1.0 chunked request (hparse does: RFC 9112 6.1), and misreads Connection lists that
 *   are not plain "token, token": no HTAB is whitespace after a token for it
 *   ("keep-alive<HTAB>"), an empty first element hides the next one (",keep-alive" is not
 *   keep-alive for it; RFC 9110 5.6.1 has recipients accept empty elements), and so does an
 *   element that is a proper prefix of "keep-alive", "close" or "upgrade" ended by the comma
 *   ("ke,keep-alive": its token matcher takes the comma as the mismatch and reads on inside one
 *   token until the next comma), and an element after the first that starts with '_' ends the
 *   reading of the whole list ("x,_y,keep-alive": it checks the lowered character against its
 *   token table, and '_' | 0x20 is DEL, no token). Those cases are
 *   not compared; otherwise only hparse keeping alive what http_parser closes is a failure (the
 *   reverse is hparse being stricter).
 * - Its head cap (80 KiB) is above hsrv's (16 KiB): hparse always answers 431 first.
 * - Exact versions of Debian's build differ from the v2.9.4 tag only in the allow_chunked_length
 *   flag (left off here: Content-Length with chunked stays an error). */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <http_parser.h>

#include "hp_conn.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define DIFF_HEADERS_MAX 256u   /* header lines of http_parser's side kept for comparison */
#define DIFF_CATEGORIES_MAX 96u /* distinct disagreement categories counted */

enum { V_PENDING, V_ACCEPT, V_REJECT };

struct span {
    size_t off; /* offset in the buffer given to the parser */
    size_t len;
};

/* http_parser's side */
struct pside {
    int verdict;     /* V_* */
    const char *err; /* http_errno_name on V_REJECT */
    size_t end;      /* request end (bytes parsed when paused) */
    struct span url;
    unsigned nh; /* header lines before on_headers_complete */
    struct span k[DIFF_HEADERS_MAX];
    struct span v[DIFF_HEADERS_MAX];
    int last;       /* 0 none, 1 field, 2 value: which callback ran last */
    int in_head;    /* before on_headers_complete */
    uint64_t body;  /* body bytes */
    int keep_alive; /* http_should_keep_alive at on_headers_complete */
    unsigned minor;
    unsigned major;
    unsigned method;
    int chunked;
    const char *base; /* the buffer being parsed */
};

/* hparse's side (offsets in the input) */
struct hside {
    int verdict;
    int status;
    const char *msg;
    uint64_t end;
    uint64_t body;
    size_t head_start, head_end;
    struct span method;
    int path_static; /* path is hparse's own "/" (absolute form without a path) */
    struct span path;
    int has_query;
    struct span query;
    unsigned nh;
    struct span k[HP_HEADERS_MAX];
    struct span v[HP_HEADERS_MAX];
    int minor;
    int keep_alive;
    int chunked;
};

/* ---------------------------------------------------------------- categories */

struct category {
    const char *side; /* "hparse rejects", "hparse waits" */
    int status;
    const char *hmsg;
    const char *pverdict; /* "accepts", "waits" or http_parser's error name */
    unsigned long count;
};

static struct category cats[DIFF_CATEGORIES_MAX];
static unsigned ncats;
static unsigned long cats_dropped;
static unsigned long n_inputs, n_both_accept, n_both_reject, n_both_wait, n_method_subst;
static unsigned long n_te_prefix;
static int summary_registered;

static void count(const char *side, int status, const char *hmsg, const char *pverdict)
{
    for (unsigned i = 0; i < ncats; i++) {
        if (cats[i].side == side && cats[i].status == status && cats[i].hmsg == hmsg &&
            strcmp(cats[i].pverdict, pverdict) == 0) {
            cats[i].count++;
            return;
        }
    }
    if (ncats == DIFF_CATEGORIES_MAX) {
        cats_dropped++;
        return;
    }
    cats[ncats].side = side;
    cats[ncats].status = status;
    cats[ncats].hmsg = hmsg;
    cats[ncats].pverdict = pverdict;
    cats[ncats].count = 1;
    ncats++;
}

/* Is the http_parser linked in a strict build? (A non-strict one accepts "HTTX/1.1".) */
static int http_parser_is_strict(void)
{
    static const char probe[] = "GET / HTTX/1.1\r\n\r\n";
    http_parser p;
    http_parser_settings st;

    http_parser_settings_init(&st);
    http_parser_init(&p, HTTP_REQUEST);
    (void)http_parser_execute(&p, &st, probe, sizeof(probe) - 1);
    return HTTP_PARSER_ERRNO(&p) != HPE_OK;
}

static void summary(void)
{
    unsigned long stricter = 0;

    for (unsigned i = 0; i < ncats; i++)
        stricter += cats[i].count;
    printf("http_diff: %lu inputs: both accept %lu (method unknown to http_parser %lu), both "
           "reject %lu, both wait %lu, hparse stricter %lu; names starting with "
           "Transfer-Encoding renamed in %lu; http_parser %s\n",
           n_inputs, n_both_accept, n_method_subst, n_both_reject, n_both_wait, stricter,
           n_te_prefix, http_parser_is_strict() ? "strict" : "non-strict (lenient)");
    for (unsigned i = 0; i < ncats; i++)
        printf("http_diff:   %s (%d %s), http_parser %s: %lu\n", cats[i].side, cats[i].status,
               cats[i].hmsg != NULL ? cats[i].hmsg : "-", cats[i].pverdict, cats[i].count);
    if (cats_dropped > 0)
        printf("http_diff:   (%lu in categories past the first %u)\n", cats_dropped,
               DIFF_CATEGORIES_MAX);
}

/* ---------------------------------------------------------------- http_parser's side */

static int p_url(http_parser *p, const char *at, size_t n)
{
    struct pside *ps = p->data;

    if (ps->url.len == 0)
        ps->url.off = (size_t)(at - ps->base);
    ps->url.len += n;
    return 0;
}

static int p_field(http_parser *p, const char *at, size_t n)
{
    struct pside *ps = p->data;

    if (!ps->in_head)
        return 0; /* a trailer field */
    if (ps->last != 1) {
        ps->nh++;
        if (ps->nh <= DIFF_HEADERS_MAX) {
            ps->k[ps->nh - 1].off = (size_t)(at - ps->base);
            ps->k[ps->nh - 1].len = 0;
            ps->v[ps->nh - 1].off = 0;
            ps->v[ps->nh - 1].len = 0;
        }
    }
    if (ps->nh <= DIFF_HEADERS_MAX)
        ps->k[ps->nh - 1].len += n;
    ps->last = 1;
    return 0;
}

static int p_value(http_parser *p, const char *at, size_t n)
{
    struct pside *ps = p->data;

    if (!ps->in_head || ps->nh == 0)
        return 0;
    if (ps->nh <= DIFF_HEADERS_MAX) {
        if (ps->last != 2)
            ps->v[ps->nh - 1].off = (size_t)(at - ps->base);
        ps->v[ps->nh - 1].len += n;
    }
    ps->last = 2;
    return 0;
}

static int p_headers_complete(http_parser *p)
{
    struct pside *ps = p->data;

    ps->in_head = 0;
    ps->keep_alive = http_should_keep_alive(p);
    ps->major = p->http_major;
    ps->minor = p->http_minor;
    ps->method = p->method;
    ps->chunked = (p->flags & F_CHUNKED) != 0;
    return 0;
}

static int p_body(http_parser *p, const char *at, size_t n)
{
    struct pside *ps = p->data;

    (void)at;
    ps->body += n;
    return 0;
}

static int p_message_complete(http_parser *p)
{
    struct pside *ps = p->data;

    ps->verdict = V_ACCEPT;
    http_parser_pause(p, 1); /* one request: stop before the next one */
    return 0;
}

static void run_http_parser(const char *buf, size_t len, struct pside *ps)
{
    http_parser p;
    http_parser_settings st;
    size_t n;
    enum http_errno e;

    memset(ps, 0, sizeof(*ps));
    ps->base = buf;
    ps->in_head = 1;
    http_parser_settings_init(&st);
    st.on_url = p_url;
    st.on_header_field = p_field;
    st.on_header_value = p_value;
    st.on_headers_complete = p_headers_complete;
    st.on_body = p_body;
    st.on_message_complete = p_message_complete;
    http_parser_init(&p, HTTP_REQUEST);
    p.data = ps;
    n = http_parser_execute(&p, &st, buf, len);
    e = HTTP_PARSER_ERRNO(&p);
    if (ps->verdict == V_ACCEPT && e == HPE_PAUSED) {
        ps->end = n;
    } else if (e != HPE_OK && e != HPE_PAUSED) {
        ps->verdict = V_REJECT;
        ps->err = http_errno_name(e);
    } else {
        ps->verdict = V_PENDING;
    }
}

/* ---------------------------------------------------------------- hparse's side */

struct hrun {
    struct hside *hs;
    int seen_head;
};

static struct span in_input(const char *p, const char *h, size_t head_start)
{
    struct span s;

    s.off = head_start + (size_t)(p - h);
    s.len = strlen(p);
    return s;
}

static void h_head(void *cls, const struct hp_request *req, const char *h, uint64_t start,
                   uint64_t end)
{
    struct hrun *r = cls;
    struct hside *hs = r->hs;

    r->seen_head = 1;
    hs->head_start = (size_t)start;
    hs->head_end = (size_t)end;
    hs->method = in_input(req->method, h, hs->head_start);
    hs->path_static = req->path < h || req->path > h + (end - start);
    if (!hs->path_static)
        hs->path = in_input(req->path, h, hs->head_start);
    hs->has_query = req->query != NULL;
    if (hs->has_query)
        hs->query = in_input(req->query, h, hs->head_start);
    hs->nh = req->nh;
    for (unsigned i = 0; i < req->nh && i < HP_HEADERS_MAX; i++) {
        hs->k[i] = in_input(req->kv[i].k, h, hs->head_start);
        hs->v[i] = in_input(req->kv[i].v, h, hs->head_start);
    }
    hs->minor = req->minor;
    hs->keep_alive = req->keep_alive;
    hs->chunked = req->chunked;
}

static void h_body(void *cls, const char *p, size_t n)
{
    struct hrun *r = cls;

    (void)p;
    r->hs->body += n;
}

static int h_done(void *cls, uint64_t end)
{
    struct hrun *r = cls;

    r->hs->verdict = V_ACCEPT;
    r->hs->end = end;
    return 1; /* one request */
}

static void h_reject(void *cls, int status, const char *msg)
{
    struct hrun *r = cls;

    r->hs->verdict = V_REJECT;
    r->hs->status = status;
    r->hs->msg = msg;
}

static const struct hpc_ops h_ops = {h_head, h_body, h_done, h_reject};

static void run_hparse(const char *buf, size_t len, struct hside *hs)
{
    struct hrun r = {hs, 0};
    struct hpc_result res;

    memset(hs, 0, sizeof(*hs));
    hs->verdict = V_PENDING;
    hpc_run(buf, len, NULL, 0, &h_ops, &r, &res);
}

/* ---------------------------------------------------------------- comparison */

static const char *const p_methods[] = {
#define DIFF_METHOD(num, name, string) #string,
    HTTP_METHOD_MAP(DIFF_METHOD)
#undef DIFF_METHOD
};

static int is_tchar(unsigned char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           (ch != 0 && strchr("!#$%&'*+-.^_`|~", ch) != NULL);
}

/* When the input's method (after leading CR/LF, as http_parser skips them) is a token that
 * http_parser does not know, a copy with "GET" in its place; *delta is the change in length.
 * NULL when the method is known (or not a token: both parsers reject that). */
static char *substitute_method(const char *in, size_t len, long *delta)
{
    size_t i = 0, t;
    char *out;

    while (i < len && (in[i] == '\r' || in[i] == '\n'))
        i++;
    t = i;
    while (t < len && is_tchar((unsigned char)in[t]))
        t++;
    if (t == i || t == len || in[t] != ' ')
        return NULL;
    for (size_t m = 0; m < sizeof(p_methods) / sizeof(p_methods[0]); m++) {
        if (strlen(p_methods[m]) == t - i && memcmp(p_methods[m], in + i, t - i) == 0)
            return NULL;
    }
    out = malloc(len - (t - i) + 3);
    if (out == NULL)
        abort();
    memcpy(out, in, i);
    memcpy(out + i, "GET", 3);
    memcpy(out + i + 3, in + t, len - t);
    *delta = 3 - (long)(t - i);
    return out;
}

/* http_parser's Transfer-Encoding prefix quirk (see the top): in the lines before the first
 * empty line, a name that starts with "Transfer-Encoding" and goes on with a token byte gets
 * 'X' as its first byte. Returns how many were changed. */
static unsigned rename_te_prefixed(char *in, size_t len)
{
    static const char te[] = "transfer-encoding";
    size_t n = sizeof(te) - 1;
    unsigned changed = 0;
    size_t i = 0;

    while (i < len) {
        const char *nl = memchr(in + i, '\n', len - i);
        size_t eol = nl != NULL ? (size_t)(nl - in) : len;

        if (eol == i || (eol == i + 1 && in[i] == '\r'))
            break; /* the empty line */
        if (eol - i > n && strncasecmp(in + i, te, n) == 0 && is_tchar((unsigned char)in[i + n])) {
            in[i] = 'X';
            changed++;
        }
        i = eol + 1;
    }
    return changed;
}

static void defect(const char *what, const struct hside *hs, const struct pside *ps)
{
    fprintf(stderr,
            "http_diff: hparse defect: %s (hparse: verdict %d status %d msg %s end %llu body "
            "%llu nh %u; http_parser: verdict %d err %s end %zu body %llu nh %u)\n",
            what, hs->verdict, hs->status, hs->msg != NULL ? hs->msg : "-",
            (unsigned long long)hs->end, (unsigned long long)hs->body, hs->nh, ps->verdict,
            ps->err != NULL ? ps->err : "-", ps->end, (unsigned long long)ps->body, ps->nh);
    abort();
}

static int span_eq(const char *a, struct span sa, const char *b, struct span sb)
{
    return sa.len == sb.len && memcmp(a + sa.off, b + sb.off, sa.len) == 0;
}

/* The raw target: http_parser's URL bytes against the input's bytes between the method's
 * space and the next space, and hparse's path and query against those bytes. */
static void compare_target(const char *in, size_t len, const struct hside *hs, const char *pb,
                           const struct pside *ps)
{
    size_t t0 = hs->method.off + hs->method.len + 1;
    size_t t1 = t0;
    struct http_parser_url u;
    const char *url = pb + ps->url.off;

    while (t1 < len && in[t1] != ' ')
        t1++;
    if (t1 - t0 != ps->url.len || memcmp(in + t0, url, ps->url.len) != 0)
        defect("target bytes differ", hs, ps);
    /* hparse's path and query are the raw bytes of the target's tail */
    if (hs->has_query) {
        if (hs->query.off + hs->query.len != t1 || hs->query.off < t0 + 1 ||
            in[hs->query.off - 1] != '?')
            defect("query is not the raw end of the target", hs, ps);
    }
    if (!hs->path_static) {
        size_t pend = hs->has_query ? hs->query.off - 1 : t1;

        if (hs->path.off < t0 || hs->path.off + hs->path.len != pend)
            defect("path is not the raw target", hs, ps);
    }
    /* against http_parser's own URL split (no fragment: hparse keeps a '#' in the path or
     * query as sent, http_parser cuts it off) */
    http_parser_url_init(&u);
    if (ps->url.len > 0 && ps->url.len < 65536 &&
        http_parser_parse_url(url, ps->url.len, 0, &u) == 0 &&
        memchr(url, '#', ps->url.len) == NULL) {
        int pp = (u.field_set & (1u << UF_PATH)) != 0;
        int pq = (u.field_set & (1u << UF_QUERY)) != 0;

        if (pp == hs->path_static)
            defect("path present on one side only", hs, ps);
        if (pp && (u.field_data[UF_PATH].len != hs->path.len ||
                   memcmp(url + u.field_data[UF_PATH].off, in + hs->path.off, hs->path.len) != 0))
            defect("path differs from http_parser_parse_url's", hs, ps);
        /* http_parser_parse_url reports an empty query ("/p?") as none */
        if (pq != (hs->has_query && hs->query.len > 0))
            defect("query present on one side only", hs, ps);
        if (pq &&
            (u.field_data[UF_QUERY].len != hs->query.len ||
             memcmp(url + u.field_data[UF_QUERY].off, in + hs->query.off, hs->query.len) != 0))
            defect("query differs from http_parser_parse_url's", hs, ps);
    }
}

/* A header value of http_parser's without its trailing SP/HTAB. */
static struct span trim_value(const char *pb, struct span v)
{
    while (v.len > 0 && (pb[v.off + v.len - 1] == ' ' || pb[v.off + v.len - 1] == '\t'))
        v.len--;
    return v;
}

/* A Connection value that http_parser reads as hparse does: elements of tokens and SP
 * separated by commas, none empty, no HTAB. */
static int plain_list(const char *v, size_t n)
{
    size_t i = 0;

    for (;;) {
        int words = 0;

        while (i < n && v[i] != ',') {
            size_t t = i;

            while (i < n && v[i] == ' ')
                i++;
            while (i < n && is_tchar((unsigned char)v[i]))
                i++;
            if (i == t)
                return 0; /* a byte that is neither token nor SP */
            words += i > t && is_tchar((unsigned char)v[i - 1]);
        }
        if (words == 0)
            return 0; /* an empty element */
        if (i == n)
            return 1;
        i++; /* the comma */
    }
}

/* An element of the list v[0, n) that is a proper prefix of one of http_parser's connection
 * words, case-insensitively and after leading SP, and ends right at a comma (see the top). */
static int prefix_before_comma(const char *v, size_t n)
{
    static const char *const words[] = {"keep-alive", "close", "upgrade"};
    size_t i = 0;

    while (i < n) {
        size_t s, e;

        while (i < n && v[i] == ' ')
            i++;
        s = i;
        while (i < n && v[i] != ',')
            i++;
        e = i;
        if (i < n && e > s) {
            for (size_t w = 0; w < sizeof(words) / sizeof(words[0]); w++) {
                if (e - s < strlen(words[w]) && strncasecmp(v + s, words[w], e - s) == 0)
                    return 1;
            }
        }
        i++; /* the comma */
    }
    return 0;
}

/* An element after the first of the list v[0, n) that starts with '_' after leading SP (see the
 * top: http_parser stops reading the list there). */
static int underscore_after_first(const char *v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (v[i] != ',')
            continue;
        while (i + 1 < n && v[i + 1] == ' ')
            i++;
        if (i + 1 < n && v[i + 1] == '_')
            return 1;
    }
    return 0;
}

static int keep_alive_comparable(const char *in, size_t len, const struct hside *hs)
{
    int ka = 0, cl = 0;

    for (unsigned i = 0; i < hs->nh; i++) {
        const char *k = in + hs->k[i].off;

        if (hs->k[i].len == 16 && strncasecmp(k, "Proxy-Connection", 16) == 0)
            return 0;
        if (hs->k[i].len == 10 && strncasecmp(k, "Connection", 10) == 0) {
            const char *v = in + hs->v[i].off;
            size_t e = hs->v[i].off + hs->v[i].len;

            while (e < len && (in[e] == ' ' || in[e] == '\t'))
                e++; /* with the OWS that hparse trimmed */
            if (!plain_list(v, e - hs->v[i].off) || prefix_before_comma(v, hs->v[i].len) ||
                underscore_after_first(v, hs->v[i].len))
                return 0;
            for (size_t j = 0; j + 5 <= hs->v[i].len; j++) {
                if (strncasecmp(v + j, "close", 5) == 0)
                    cl = 1;
                if (j + 10 <= hs->v[i].len && strncasecmp(v + j, "keep-alive", 10) == 0)
                    ka = 1;
            }
        }
    }
    if (hs->minor == 0 && (hs->chunked || (ka && cl)))
        return 0;
    return 1;
}

static void compare_accepted(const char *in, size_t len, const struct hside *hs, const char *pb,
                             const struct pside *ps, long delta, int subst)
{
    if ((long)ps->end - delta != (long)hs->end)
        defect("the request ends at different bytes", hs, ps);
    if (ps->body != hs->body)
        defect("body lengths differ", hs, ps);
    if (!subst) {
        const char *m = http_method_str((enum http_method)ps->method);

        if (strlen(m) != hs->method.len || memcmp(m, in + hs->method.off, hs->method.len) != 0)
            defect("methods differ", hs, ps);
    }
    if (ps->major != 1 || (ps->minor == 0) != (hs->minor == 0))
        defect("versions differ", hs, ps);
    if (ps->chunked != hs->chunked)
        defect("framing (chunked) differs", hs, ps);
    compare_target(in, len, hs, pb, ps);
    if (ps->nh != hs->nh)
        defect("header counts differ", hs, ps);
    for (unsigned i = 0; i < hs->nh; i++) {
        if (!span_eq(in, hs->k[i], pb, ps->k[i]))
            defect("header names differ", hs, ps);
        if (!span_eq(in, hs->v[i], pb, trim_value(pb, ps->v[i])))
            defect("header values differ", hs, ps);
    }
    if (hs->keep_alive && !ps->keep_alive && keep_alive_comparable(in, len, hs))
        defect("hparse keeps alive a connection that http_parser closes", hs, ps);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct hside hs;
    static struct pside ps;
    char *in = malloc(size > 0 ? size : 1);
    char *pin;
    size_t plen = size;
    long delta = 0;
    char *subst;

    if (in == NULL)
        abort();
    if (!summary_registered) {
        summary_registered = 1;
        atexit(summary);
    }
    n_inputs++;
    if (size > 0)
        memcpy(in, data, size);
    /* the header lines: after the empty lines and the request line */
    {
        size_t lead = 0;
        const char *nl;

        while (lead < size && (in[lead] == '\r' || in[lead] == '\n'))
            lead++;
        nl = memchr(in + lead, '\n', size - lead);
        if (nl != NULL) {
            lead = (size_t)(nl - in) + 1;
            n_te_prefix += rename_te_prefixed(in + lead, size - lead) > 0;
        }
    }
    subst = substitute_method(in, size, &delta);
    pin = subst != NULL ? subst : in;
    plen = (size_t)((long)size + delta);
    run_hparse(in, size, &hs);
    run_http_parser(pin, plen, &ps);

    if (hs.verdict == V_ACCEPT) {
        if (ps.verdict == V_REJECT)
            defect("hparse accepts a request that http_parser rejects", &hs, &ps);
        if (ps.verdict == V_PENDING)
            defect("hparse frames a request that http_parser is still reading", &hs, &ps);
        compare_accepted(in, size, &hs, pin, &ps, delta, subst != NULL);
        n_both_accept++;
        n_method_subst += subst != NULL;
    } else if (hs.verdict == V_REJECT) {
        if (ps.verdict == V_REJECT)
            n_both_reject++;
        else
            count("hparse rejects", hs.status, hs.msg,
                  ps.verdict == V_ACCEPT ? "accepts" : "waits");
    } else {
        if (ps.verdict == V_PENDING)
            n_both_wait++;
        else
            count("hparse waits", 0, NULL, ps.verdict == V_ACCEPT ? "accepts" : ps.err);
    }
    free(subst);
    free(in);
    return 0;
}
