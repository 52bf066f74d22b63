/* tg_cfgtext: the check every configuration value of both services goes through.
 *
 * Values reach wires — provider request heads, URLs, Kafka and database settings, webhook
 * requests, event fields — so a control byte in one (NUL, CR, LF, any other below 0x20, DEL) is a
 * configuration error naming the key, never cut or passed on: a secret with a trailing newline
 * (a Kubernetes secret made with `echo`) would otherwise corrupt the framing of every pooled
 * connection it is sent on. */
#ifndef TG_CFGTEXT_H
#define TG_CFGTEXT_H

#include <stddef.h>

/* tg_cfgtext_check: v is the value (NUL-terminated), yaml_len the scalar's length as the YAML
 * parser gave it (a NUL escaped in YAML makes it longer than strlen(v)), or (size_t)-1 when v
 * came from the environment; env_name the variable it came from, or NULL. Returns 0, or -1 with
 * the problem in why (no key: the caller prefixes FILE:LINE: key:). Any thread. */
int tg_cfgtext_check(const char *v, size_t yaml_len, const char *env_name, char *why,
                     size_t whycap);

#endif
