/* hp_conn: a model of how router-svc's HTTP server (hsrv.c) drives hparse over one client
 * connection, for the fuzz targets (http_request_fuzz, http_diff). No sockets and no handler:
 * the bytes of a connection arrive in reads of given sizes, and the model does with them what
 * hsrv's conn_read/process/keep_tail do — a buffer of at most the server's capacity, the head
 * scanned from the request's first byte on every read until hp_head_scan is done, the head
 * copied and parsed in place, then the body by Content-Length or hp_chunked_feed in pieces, and
 * pipelined requests one after another in the same buffer — with every answer taken at once.
 *
 * Differences from hsrv, each on purpose (see hp_conn.c): every buffer handed to hparse is
 * allocated to its exact size, so that a read past its end is an ASan report; the empty lines
 * before a request line are dropped as soon as the request line starts (hsrv keeps them in its
 * read buffer until the head is done, which makes its 431 depend on how the bytes were split).
 *
 * Every pointer hparse returns is checked to lie in the buffer it was given, and the body bytes
 * delivered against Content-Length and against what was fed; a violation is abort().
 *
 * Threads: none; a call owns everything it allocates. */
#ifndef TG_HP_CONN_H
#define TG_HP_CONN_H

#include <stddef.h>
#include <stdint.h>

#include "hparse.h"

#define HPC_HEAD_MAX_BYTES (16u * 1024u) /* hsrv's default head_max (and trailer cap) */
#define HPC_SCRATCH_BYTES (16u * 1024u)  /* hsrv's shared read buffer: one read, at most */
#define HPC_RBUF_CAP_BYTES (HPC_HEAD_MAX_BYTES + HP_CHUNK_LINE_MAX) /* hsrv's rbuf_cap */

/* What the model reports, in stream order. Each callback may be NULL. */
struct hpc_ops {
    /* a head was parsed: req and its strings are borrowed for the call, and point into h, the
     * parsed copy of stream[start, end) (the head's first byte, after any empty lines, to the
     * byte after its empty line) */
    void (*head)(void *cls, const struct hp_request *req, const char *h, uint64_t start,
                 uint64_t end);
    /* body bytes of the current request (borrowed for the call) */
    void (*body)(void *cls, const char *p, size_t n);
    /* the current request's body ended at stream offset end; nonzero: stop the stream here */
    int (*done)(void *cls, uint64_t end);
    /* the request was answered with status (400, 431, 501, 505) and the stream stops; msg is
     * hparse's static message */
    void (*reject)(void *cls, int status, const char *msg);
};

#define HPC_END_IDLE 0    /* the input ended between requests */
#define HPC_END_HEAD 1    /* the input ended within a head */
#define HPC_END_BODY 2    /* the input ended within a body */
#define HPC_END_CLOSE 3   /* a request without keep-alive was answered: the rest is not read */
#define HPC_END_REJECT 4  /* a request was rejected: the rest is dropped */
#define HPC_END_STOPPED 5 /* ops->done asked to stop */

struct hpc_result {
    int end;           /* HPC_END_* */
    unsigned requests; /* heads parsed successfully */
    uint64_t read;     /* stream bytes read */
    uint64_t pending;  /* bytes read but not yet used when the input ended */
};

/* hpc_run: feed stream[0, len) to a fresh connection in reads. pieces[0, npieces) are the sizes
 * of successive reads (cycled; each cut to what the server would read at once); npieces 0 reads
 * as much as the server takes at once. Reports through ops/cls and fills *res. Aborts on a
 * violated property (a pointer out of its buffer, more body than was announced or fed).
 * stream is borrowed for the call; pieces too. */
void hpc_run(const char *stream, size_t len, const size_t *pieces, size_t npieces,
             const struct hpc_ops *ops, void *cls, struct hpc_result *res);

#endif
