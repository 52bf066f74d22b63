/* resolver: names of providers for the built-in HTTP/1.1 client, resolved off the loops. See
 * resolver.h. */
#include "resolver.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tg_time.h"

/* The table: a name, its state, its address; the resolver thread takes queued entries. */

#define RES_MAX 64
#define RES_TTL_US (30ull * 1000000ull)
#define RES_RETRY_US (5ull * 1000000ull)

enum { DNS_EMPTY = 0, DNS_PENDING, DNS_OK, DNS_FAILED };

struct dns_entry {
    char host[256];
    char port[8];
    int state;
    int queued;       /* waiting for the resolver thread */
    uint64_t when_us; /* resolved or failed at */
    struct sockaddr_storage sa;
    socklen_t salen;
};

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int started;
    struct dns_entry e[RES_MAX];
} dns = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static void *dns_main(void *arg)
{
    (void)arg;
    pthread_setname_np(pthread_self(), "tg-resolver"); /* in top, perf and /proc/PID/task */
    pthread_mutex_lock(&dns.mu);
    for (;;) {
        struct dns_entry *job = NULL;
        char host[256], port[8];
        struct addrinfo hints, *res = NULL, *pick = NULL;
        int rc;

        for (int i = 0; i < RES_MAX && job == NULL; i++) {
            if (dns.e[i].queued)
                job = &dns.e[i];
        }
        if (job == NULL) {
            pthread_cond_wait(&dns.cv, &dns.mu);
            continue;
        }
        memcpy(host, job->host, sizeof(host));
        memcpy(port, job->port, sizeof(port));
        pthread_mutex_unlock(&dns.mu);
        memset(&hints, 0, sizeof(hints));
        hints.ai_family = AF_UNSPEC;
        hints.ai_socktype = SOCK_STREAM;
        /* no AI_ADDRCONFIG: a host with only loopback would get nothing */
        hints.ai_flags = AI_NUMERICSERV;
        rc = getaddrinfo(host, port, &hints, &res);
        for (struct addrinfo *a = rc == 0 ? res : NULL; a != NULL; a = a->ai_next) {
            if (a->ai_addrlen > sizeof(struct sockaddr_storage))
                continue;
            if (pick == NULL || (a->ai_family == AF_INET && pick->ai_family != AF_INET))
                pick = a;
        }
        pthread_mutex_lock(&dns.mu);
        job->queued = 0;
        job->when_us = tg_now_mono_us();
        if (pick != NULL) {
            memcpy(&job->sa, pick->ai_addr, pick->ai_addrlen);
            job->salen = pick->ai_addrlen;
            job->state = DNS_OK;
        } else if (job->state != DNS_OK) {
            job->state = DNS_FAILED; /* a failed refresh keeps the last good address */
        }
        if (res != NULL)
            freeaddrinfo(res);
    }
    return NULL;
}

int rt_resolver_lookup(const char *host, const char *port, struct sockaddr_storage *sa,
                       socklen_t *salen)
{
    uint64_t now = tg_now_mono_us();
    struct dns_entry *e = NULL, *free_e = NULL;
    int hit = 0, wake_it = 0;

    pthread_mutex_lock(&dns.mu);
    for (int i = 0; i < RES_MAX; i++) {
        if (dns.e[i].state == DNS_EMPTY) {
            if (free_e == NULL)
                free_e = &dns.e[i];
        } else if (strcmp(dns.e[i].host, host) == 0 && strcmp(dns.e[i].port, port) == 0) {
            e = &dns.e[i];
            break;
        }
    }
    if (e == NULL && free_e == NULL) {
        pthread_mutex_unlock(&dns.mu);
        return -1;
    }
    if (e == NULL) {
        e = free_e;
        snprintf(e->host, sizeof(e->host), "%s", host);
        snprintf(e->port, sizeof(e->port), "%s", port);
        e->state = DNS_PENDING;
        e->queued = 1;
        wake_it = 1;
    } else if (e != NULL) {
        if (e->state == DNS_OK) {
            memcpy(sa, &e->sa, sizeof(*sa));
            *salen = e->salen;
            hit = 1;
        }
        if (!e->queued && ((e->state == DNS_OK && now - e->when_us > RES_TTL_US) ||
                           (e->state == DNS_FAILED && now - e->when_us > RES_RETRY_US))) {
            e->queued = 1;
            wake_it = 1;
        }
    }
    if (wake_it && !dns.started) {
        pthread_t th;
        pthread_attr_t at;

        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&th, &at, dns_main, NULL) == 0)
            dns.started = 1;
        pthread_attr_destroy(&at);
    }
    if (wake_it)
        pthread_cond_signal(&dns.cv);
    pthread_mutex_unlock(&dns.mu);
    return hit;
}

int rt_resolver_has(const char *host, const char *port)
{
    int found = 0;

    pthread_mutex_lock(&dns.mu);
    for (int i = 0; i < RES_MAX && !found; i++)
        found = dns.e[i].state != DNS_EMPTY && strcmp(dns.e[i].host, host) == 0 &&
                strcmp(dns.e[i].port, port) == 0;
    pthread_mutex_unlock(&dns.mu);
    return found;
}

/* The bytes of a host name DNS could have (letters, digits, '.', '-', '_'). */
static const unsigned char url_name_char[256] = {
    ['a' ... 'z'] = 1, ['A' ... 'Z'] = 1, ['0' ... '9'] = 1, ['.'] = 1, ['-'] = 1, ['_'] = 1,
};

/* The port in decimal into out (8 bytes), by hand: this runs for every plain-http request. */
static void port_text(char *out, long port)
{
    char t[8];
    int n = 0;

    do {
        t[n++] = (char)('0' + port % 10);
        port /= 10;
    } while (port > 0 && n < 5);
    for (int i = 0; i < n; i++)
        out[i] = t[n - 1 - i];
    out[n] = '\0';
}

int rt_url_origin(const char *url, struct rt_url_origin *o)
{
    struct sockaddr_in *a4 = (struct sockaddr_in *)&o->sa;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&o->sa;
    struct in_addr v4;
    const char *h, *e, *pe;
    size_t hl;

    /* Every field is set below; sa is cleared only for a literal host (h1c_origin_of calls
     * this for every plain-http request: no clearing of the whole, 400-byte, struct). */
    o->tls = 0;
    o->literal = 0;
    o->salen = 0;
    if (strncmp(url, "http://", 7) == 0) {
        h = url + 7;
        o->port = 80;
    } else if (strncmp(url, "https://", 8) == 0) {
        h = url + 8;
        o->tls = 1;
        o->port = 443;
    } else {
        return -1;
    }
    pe = h + strcspn(h, "/?#");
    if (memchr(h, '@', (size_t)(pe - h)) != NULL)
        return -1; /* credentials in the URL */
    if (*h == '[') {
        e = memchr(h, ']', (size_t)(pe - h));
        if (e == NULL)
            return -1;
        hl = (size_t)(e - h - 1);
        if (hl == 0 || hl >= sizeof(o->host))
            return -1;
        memcpy(o->host, h + 1, hl);
        o->host[hl] = '\0';
        memset(&o->sa, 0, sizeof(o->sa));
        if (inet_pton(AF_INET6, o->host, &a6->sin6_addr) != 1)
            return -1; /* a zone index, or not an address at all */
        a6->sin6_family = AF_INET6;
        o->salen = sizeof(*a6);
        o->literal = 1;
        e++;
    } else {
        hl = 0;
        while (url_name_char[(unsigned char)h[hl]])
            hl++;
        e = h + hl;
        if (hl == 0 || hl >= sizeof(o->host) ||
            (*e != '\0' && *e != ':' && *e != '/' && *e != '?' && *e != '#'))
            return -1; /* not a name DNS could have */
        memcpy(o->host, h, hl);
        o->host[hl] = '\0';
        if (o->host[0] >= '0' && o->host[0] <= '9' && inet_pton(AF_INET, o->host, &v4) == 1) {
            memset(&o->sa, 0, sizeof(o->sa));
            a4->sin_addr = v4;
            a4->sin_family = AF_INET;
            o->salen = sizeof(*a4);
            o->literal = 1;
        }
    }
    if (e < pe) {
        size_t dl;

        if (*e != ':')
            return -1;
        dl = strspn(e + 1, "0123456789");
        if (dl == 0 || e + 1 + dl != pe)
            return -1;
        o->port = 0;
        for (size_t i = 0; i < dl && o->port <= 65535; i++)
            o->port = o->port * 10 + (e[1 + i] - '0');
        if (o->port < 1 || o->port > 65535)
            return -1;
    }
    if (o->literal) {
        if (o->salen == sizeof(*a6))
            a6->sin6_port = htons((uint16_t)o->port);
        else
            a4->sin_port = htons((uint16_t)o->port);
    }
    port_text(o->port_text, o->port);
    o->hostport = h;
    o->hostport_len = (size_t)(pe - h);
    o->path = pe;
    return 0;
}

int rt_url_host_port(const char *url, char *host, size_t hcap, char *port, size_t pcap)
{
    struct rt_url_origin o;
    size_t hl;

    if (rt_url_origin(url, &o) != 0 || o.literal)
        return 0;
    hl = strlen(o.host);
    if (hl >= hcap)
        return 0;
    memcpy(host, o.host, hl + 1);
    return snprintf(port, pcap, "%s", o.port_text) < (int)pcap;
}

void rt_resolver_prefetch_url(const char *url)
{
    char host[256], port[8];
    struct sockaddr_storage sa;
    socklen_t salen;

    if (rt_url_host_port(url, host, sizeof(host), port, sizeof(port)))
        (void)rt_resolver_lookup(host, port, &sa, &salen);
}
