/* dk_bind: fixed listener ports for librdkafka's mock cluster.
 *
 * The mock cluster binds each broker's listener to 127.0.0.1 port 0 and lets the kernel pick.
 * devkafka defines bind() itself (this module), so the calls made from inside librdkafka land
 * here first. dk_bind_prepare() opens, binds and starts listening on every configured port up
 * front (so a taken port is reported before anything else happens, and nobody can take it in
 * between); while armed, each bind() of an AF_INET stream socket to port 0 is then answered by
 * moving the next prepared socket onto the caller's descriptor (dup3), in call order (broker 1
 * first). All other bind() calls go straight to the C library's; that includes the re-bind of
 * a broker's own, already fixed port when it is brought back up. */
#ifndef DK_BIND_H
#define DK_BIND_H

#include <stddef.h>
#include <stdint.h>

#define DK_BIND_PORTS_MAX 16

/* dk_bind_prepare: bind and listen on 127.0.0.1:ports[i] for every i, then arm the rewrite.
 * Returns 0, or -1 with a message naming the port in err (nothing stays open then).
 * Call from main before the mock cluster exists. */
int dk_bind_prepare(const uint16_t *ports, int cnt, char *err, size_t errlen);

/* dk_bind_disarm: stop rewriting and close prepared sockets that were not handed out.
 * Returns how many were handed out. Any thread. */
int dk_bind_disarm(void);

#endif
