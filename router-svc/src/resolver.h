/* resolver: host names of providers for the built-in HTTP/1.1 client.
 *
 * getaddrinfo blocks, so it never runs on a loop: one resolver thread for the process (started
 * on the first name) keeps a table of at most 64 names. A name not yet resolved (or that failed)
 * is sent through libcurl meanwhile, whose resolver runs off the loop too; once resolved, the
 * built-in client takes it. Entries are refreshed in the background every 30 s (a Service's
 * address may change; a failure is retried after 5 s) and the old address serves until the new
 * one is known. IPv4 is preferred when a name has both. */
#ifndef RT_RESOLVER_H
#define RT_RESOLVER_H

#include <stddef.h>
#include <sys/socket.h>

/* rt_resolver_lookup: the address of host:port into *sa and *salen when known (1), else 0 (the
 * resolution is queued) or -1 (the table is full: the name is never resolved here). Any
 * thread. */
int rt_resolver_lookup(const char *host, const char *port, struct sockaddr_storage *sa,
                       socklen_t *salen);

/* rt_resolver_prefetch_url: queue the host name of an http:// or https:// URL (a deployment's
 * api_base, at start), so that it is known before its first request instead of that request
 * going through libcurl. IP literals, credentials in the URL and other schemes are left alone,
 * as the built-in client leaves them. Any thread. */
void rt_resolver_prefetch_url(const char *url);

/* The origin of an http:// or https:// URL as the built-in client reads it. */
struct rt_url_origin {
    int tls;              /* https:// */
    const char *hostport; /* the authority as written in the URL (not terminated): host[:port] */
    size_t hostport_len;
    char host[256];       /* the host alone, an IPv6 literal without its brackets */
    int literal;          /* host is an IPv4 or IPv6 address: then sa and salen hold it */
    long port;            /* the port given, else the scheme's */
    char port_text[8];    /* port in decimal, as the resolver is asked for it */
    const char *path;     /* what follows the authority: "", or from its '/', '?' or '#' */
    struct sockaddr_storage sa; /* a literal host's address with port (sockaddr_in or _in6) */
    socklen_t salen;
};

/* rt_url_origin: 0 with *o filled when url is http:// or https:// with a host the built-in
 * client can reach itself: an IPv4 address, an IPv6 address in brackets, or a name of letters,
 * digits, '.', '-' and '_'; a port of decimal digits in 1..65535 when one is given; no
 * credentials. Else -1: libcurl's business, which says what is wrong. The one reader of a
 * provider URL's origin for the resolver and the built-in client (h1client.c). */
int rt_url_origin(const char *url, struct rt_url_origin *o);

/* rt_url_host_port: 1 when url has an origin (rt_url_origin) whose host is a name, not an
 * address: the name in host (hcap bytes) and the port in decimal, the scheme's when none is
 * given, in port (pcap bytes); else 0. */
int rt_url_host_port(const char *url, char *host, size_t hcap, char *port, size_t pcap);

/* rt_resolver_has: 1 when host:port is in the table (resolved or not), without queueing it. */
int rt_resolver_has(const char *host, const char *port);

#endif
