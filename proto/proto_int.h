/* proto_int: what proto_event.c (encoder) and proto_event_decode.c (decoder) share. Private to
 * proto. */
#ifndef PROTO_INT_H
#define PROTO_INT_H

#include <stddef.h>

/* s[0..n) is lowercase hex and s[n] the end of the string. s holds at least n + 1 bytes (a
 * field of that size): they may all be read, 16 at a time, whatever comes first. */
int proto_is_lower_hex(const char *s, size_t n);
/* s is a UUID (8-4-4-4-12 hex digits, either case) and nothing more. */
int proto_is_uuid(const char *s);
/* The UUID s in lowercase, in place (the canonical text, RFC 9562). */
void proto_uuid_lower(char *s);

struct proto_event;
/* proto_event_encode without its direct pass: every string cleaned into a working copy first.
 * What proto_event_encode does with an event its direct pass declines; tests compare the two.
 * out holds TG_EVENT_MAX_BYTES + 1 bytes. */
int proto_event_encode_cleaned(const struct proto_event *ev, char *out, size_t *outlen);

#endif
