/* dk_bind: see dk_bind.h. The definition of bind() below is the interposition point: symbols
 * of the executable come first in the dynamic lookup order, so librdkafka's bind() calls
 * resolve to it; the C library's bind() is found with dlsym(RTLD_NEXT). */
#include "dk_bind.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

typedef int (*dk_bind_fn)(int, const struct sockaddr *, socklen_t);

static pthread_once_t dk_bind_once = PTHREAD_ONCE_INIT;
static dk_bind_fn dk_bind_real;

/* All of the following under dk_bind_lock. */
static pthread_mutex_t dk_bind_lock = PTHREAD_MUTEX_INITIALIZER;
static int dk_bind_fds[DK_BIND_PORTS_MAX]; /* prepared listeners, -1 once handed out */
static int dk_bind_cnt;                    /* prepared count; 0 = disarmed */
static int dk_bind_next;                   /* index of the next one to hand out */

static void dk_bind_resolve(void)
{
    union {
        void *obj;
        dk_bind_fn fn;
    } sym;

    sym.obj = dlsym(RTLD_NEXT, "bind");
    dk_bind_real = sym.fn;
}

static void dk_bind_close_unused(void)
{
    int i;

    for (i = dk_bind_next; i < dk_bind_cnt; i++) {
        if (dk_bind_fds[i] >= 0)
            close(dk_bind_fds[i]);
        dk_bind_fds[i] = -1;
    }
}

int dk_bind_prepare(const uint16_t *ports, int cnt, char *err, size_t errlen)
{
    struct sockaddr_in sin;
    int on = 1;
    int fd;
    int i;
    int rc = -1;

    pthread_once(&dk_bind_once, dk_bind_resolve);
    pthread_mutex_lock(&dk_bind_lock);
    dk_bind_cnt = 0;
    dk_bind_next = 0;
    if (!dk_bind_real || cnt < 0 || cnt > DK_BIND_PORTS_MAX) {
        snprintf(err, errlen, "cannot prepare %d fixed ports", cnt);
        goto out;
    }
    for (i = 0; i < cnt; i++) {
        fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, IPPROTO_TCP);
        if (fd < 0) {
            snprintf(err, errlen, "socket for port %u: %s", (unsigned)ports[i], strerror(errno));
            goto out;
        }
        dk_bind_fds[dk_bind_cnt++] = fd;
        /* Same option as the mock sets on its own listeners. */
        (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
        memset(&sin, 0, sizeof(sin));
        sin.sin_family = AF_INET;
        sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        sin.sin_port = htons(ports[i]);
        if (dk_bind_real(fd, (const struct sockaddr *)&sin, sizeof(sin)) != 0 ||
            listen(fd, 16) != 0) {
            snprintf(err, errlen, "cannot listen on 127.0.0.1:%u: %s%s", (unsigned)ports[i],
                     strerror(errno),
                     errno == EADDRINUSE ? " (port taken by another process)" : "");
            goto out;
        }
    }
    rc = 0;
out:
    if (rc != 0) {
        dk_bind_next = 0;
        dk_bind_close_unused();
        dk_bind_cnt = 0;
    }
    pthread_mutex_unlock(&dk_bind_lock);
    return rc;
}

int dk_bind_disarm(void)
{
    int used;

    pthread_mutex_lock(&dk_bind_lock);
    used = dk_bind_next;
    dk_bind_close_unused();
    dk_bind_cnt = 0;
    dk_bind_next = 0;
    pthread_mutex_unlock(&dk_bind_lock);
    return used;
}

/* 1 when fd is a stream socket (listeners), 0 otherwise. */
static int dk_bind_is_stream(int fd)
{
    int type = 0;
    socklen_t len = sizeof(type);

    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0)
        return 0;
    return type == SOCK_STREAM;
}

/* Move prepared socket `pre` onto `fd`, keeping fd's status and descriptor flags.
 * Returns 0 or -1 with errno set. */
static int dk_bind_take(int pre, int fd)
{
    int fl = fcntl(fd, F_GETFL);
    int fdfl = fcntl(fd, F_GETFD);

    if (fl < 0 || fdfl < 0)
        return -1;
    if (fcntl(pre, F_SETFL, fl) != 0)
        return -1;
    if (dup3(pre, fd, (fdfl & FD_CLOEXEC) ? O_CLOEXEC : 0) < 0)
        return -1;
    close(pre);
    return 0;
}

/* The C library declares bind() with a transparent union argument under _GNU_SOURCE; this
 * definition must use the same declaration. */
int bind(int fd, __CONST_SOCKADDR_ARG addr, socklen_t len)
{
    const struct sockaddr *sa = addr.__sockaddr__;
    struct sockaddr_in sin;
    int pre = -1;
    int rc;

    pthread_once(&dk_bind_once, dk_bind_resolve);
    if (!dk_bind_real) {
        errno = ENOSYS;
        return -1;
    }
    if (!sa || sa->sa_family != AF_INET || len < (socklen_t)sizeof(sin))
        return dk_bind_real(fd, sa, len);
    memcpy(&sin, sa, sizeof(sin));
    if (sin.sin_port != 0 || !dk_bind_is_stream(fd))
        return dk_bind_real(fd, sa, len);

    pthread_mutex_lock(&dk_bind_lock);
    if (dk_bind_next < dk_bind_cnt) {
        pre = dk_bind_fds[dk_bind_next];
        dk_bind_fds[dk_bind_next] = -1;
        dk_bind_next++;
    }
    if (pre < 0) {
        pthread_mutex_unlock(&dk_bind_lock);
        return dk_bind_real(fd, sa, len);
    }
    rc = dk_bind_take(pre, fd);
    if (rc != 0) {
        int saved = errno;

        close(pre);
        errno = saved;
    }
    pthread_mutex_unlock(&dk_bind_lock);
    return rc;
}
