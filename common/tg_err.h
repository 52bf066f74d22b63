/* tg_err: the one error map shared by every module.
 *
 * int functions return 0 on success or a negative TG_E* code from the table below.
 * Only the HTTP fronts map these codes to HTTP statuses. */
#ifndef TG_ERR_H
#define TG_ERR_H

#define TG_ERRORS(X)                                                                              \
    X(TG_OK, 0, "ok")                                                                             \
    X(TG_ENOMEM, -1, "out of memory")                                                             \
    X(TG_EINVAL, -2, "invalid argument")                                                          \
    X(TG_ERANGE, -3, "value out of range")                                                        \
    X(TG_EFULL, -4, "capacity reached")                                                           \
    X(TG_ETIMEOUT, -5, "timed out")                                                               \
    X(TG_EIO, -6, "input/output error")                                                           \
    X(TG_EPROTO, -7, "protocol error")                                                            \
    X(TG_ENOTFOUND, -8, "not found")                                                              \
    X(TG_EEXIST, -9, "already exists")                                                            \
    X(TG_EAGAIN, -10, "try again")                                                                \
    X(TG_EUNAVAIL, -11, "dependency unavailable")                                                 \
    X(TG_ETOOBIG, -12, "too large")                                                               \
    X(TG_EAUTH, -13, "authentication failed")                                                     \
    X(TG_EDENIED, -14, "not allowed")                                                             \
    X(TG_ECLOSED, -15, "closed")                                                                  \
    X(TG_ECONFIG, -16, "configuration error")                                                     \
    X(TG_ELIMIT, -17, "rate limit reached")

enum tg_err {
#define TG_ERR_ENUM(name, code, text) name = code,
    TG_ERRORS(TG_ERR_ENUM)
#undef TG_ERR_ENUM
};

/* tg_strerror: text for a tg_err code (0 or negative).
 * Returns a borrowed static string; unknown codes give "unknown error". Any thread. */
const char *tg_strerror(int err);

/* tg_errname: symbolic name ("TG_EFULL") for a code; borrowed static string. Any thread. */
const char *tg_errname(int err);

#endif
