/* hs_response: the server's response objects (headers and trailers in fixed room, a body or a
 * stream reader) and status reasons. */
#include <assert.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "hsrv_int.h"
#include "tg_blocks.h"

const char *hs_reason(int status)
{
    switch (status) {
    case 100:
        return "Continue";
    case 200:
        return "OK";
    case 201:
        return "Created";
    case 202:
        return "Accepted";
    case 204:
        return "No Content";
    case 301:
        return "Moved Permanently";
    case 302:
        return "Found";
    case 304:
        return "Not Modified";
    case 400:
        return "Bad Request";
    case 401:
        return "Unauthorized";
    case 402:
        return "Payment Required";
    case 403:
        return "Forbidden";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 408:
        return "Request Timeout";
    case 409:
        return "Conflict";
    case 413:
        return "Content Too Large";
    case 415:
        return "Unsupported Media Type";
    case 422:
        return "Unprocessable Content";
    case 429:
        return "Too Many Requests";
    case 431:
        return "Request Header Fields Too Large";
    case 500:
        return "Internal Server Error";
    case 501:
        return "Not Implemented";
    case 502:
        return "Bad Gateway";
    case 503:
        return "Service Unavailable";
    case 504:
        return "Gateway Timeout";
    case 505:
        return "HTTP Version Not Supported";
    default:
        return "Status";
    }
}

void hs_response_body_free(struct hs_response *r)
{
    if (r->body_block)
        tg_blocks_put(TG_BLOCK_BODY, r->body, HS_BODY_BLOCK_BYTES);
    else
        free(r->body);
    r->body = NULL;
    r->body_block = 0;
}

static struct hs_response *response_new(void)
{
    struct hs_response *r = tg_blocks_get(TG_BLOCK_RESPONSE, sizeof(*r));

    if (r == NULL)
        return NULL;
    r->reader = NULL;
    r->rcls = NULL;
    r->rfree = NULL;
    r->body = NULL;
    r->body_len = 0;
    r->body_block = 0;
    r->close = 0;
    r->hlen = 0;
    r->tlen = 0;
    return r;
}

struct hs_response *hs_response_buffer(char *body, size_t len)
{
    struct hs_response *r = response_new();

    if (r == NULL) {
        free(body);
        return NULL;
    }
    if (body != NULL && len <= HS_BODY_BLOCK_BYTES) {
        char *b = tg_blocks_get(TG_BLOCK_BODY, HS_BODY_BLOCK_BYTES);

        if (b != NULL) {
            memcpy(b, body, len);
            free(body);
            body = b;
            r->body_block = 1;
        }
    }
    r->body = body;
    r->body_len = body != NULL ? len : 0;
    return r;
}

struct hs_response *hs_response_reader(hs_reader_fn reader, void *cls, hs_free_fn free_fn)
{
    struct hs_response *r = response_new();

    if (r == NULL)
        return NULL;
    r->reader = reader;
    r->rcls = cls;
    r->rfree = free_fn;
    return r;
}

/* Appends "name: value" and CRLF (name of nl bytes, checked by the caller); the value must hold
 * no CR or LF. */
static int line_append(char *buf, size_t cap, size_t *len, const char *name, size_t nl,
                       const char *value)
{
    size_t vl = strcspn(value, "\r\n");

    if (value[vl] != '\0')
        return -1; /* no header injection */
    if (*len + nl + 2 + vl + 2 > cap)
        return -1;
    memcpy(buf + *len, name, nl);
    *len += nl;
    buf[(*len)++] = ':';
    buf[(*len)++] = ' ';
    memcpy(buf + *len, value, vl);
    *len += vl;
    buf[(*len)++] = '\r';
    buf[(*len)++] = '\n';
    return 0;
}

/* The length of name when it is a token (one byte or more), else 0. */
static size_t name_len(const char *name)
{
    size_t nl = 0;

    while (hp_tchar((unsigned char)name[nl])) /* (the NUL is not a tchar) */
        nl++;
    return name[nl] == '\0' ? nl : 0;
}

/* The names the server writes itself (or, for Connection, acts on); the first letter rules out
 * most names at once. */
static int name_is_servers(const char *name)
{
    switch (name[0] | 0x20) {
    case 'c':
    case 'd':
    case 't':
        return strcasecmp(name, "Content-Length") == 0 ||
               strcasecmp(name, "Transfer-Encoding") == 0 || strcasecmp(name, "Date") == 0 ||
               strcasecmp(name, "Connection") == 0;
    default:
        return 0;
    }
}

static int field_append(char *buf, size_t cap, size_t *len, const char *name, const char *value)
{
    size_t nl = name_len(name);

    if (nl == 0)
        return -1;
    return line_append(buf, cap, len, name, nl, value);
}

int hs_response_header_lit(struct hs_response *r, const char *name, size_t nl, const char *value)
{
    /* the name is a literal of the router's own: checked in every test build, not per request */
    assert(nl > 0 && name_len(name) == nl && !name_is_servers(name));
    return line_append(r->hdr, sizeof(r->hdr), &r->hlen, name, nl, value);
}

int hs_response_header(struct hs_response *r, const char *name, const char *value)
{
    if (name_is_servers(name)) {
        if (strcasecmp(name, "Connection") != 0)
            return -1; /* Content-Length, Transfer-Encoding, Date */
        if (strcasecmp(value, "close") == 0)
            r->close = 1;
        return 0; /* the server writes Connection itself */
    }
    return field_append(r->hdr, sizeof(r->hdr), &r->hlen, name, value);
}

int hs_response_trailer(struct hs_response *r, const char *name, const char *value)
{
    return field_append(r->trl, sizeof(r->trl), &r->tlen, name, value);
}

void hs_response_free(struct hs_response *r)
{
    if (r == NULL)
        return;
    if (r->reader != NULL && r->rfree != NULL)
        r->rfree(r->rcls);
    hs_response_body_free(r);
    tg_blocks_put(TG_BLOCK_RESPONSE, r, sizeof(*r));
}
