#include "devkafka_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int dk_client_ctl(const char *ctl, const char *line, char *reply, size_t cap)
{
    char host[64];
    struct sockaddr_in sa;
    const char *colon = ctl != NULL ? strrchr(ctl, ':') : NULL;
    int fd, n;

    if (cap < 2)
        return -1;
    snprintf(reply, cap, "no answer");
    if (colon == NULL || (size_t)(colon - ctl) >= sizeof(host))
        return -1;
    memset(&sa, 0, sizeof(sa));
    snprintf(host, sizeof(host), "%.*s", (int)(colon - ctl), ctl);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)atoi(colon + 1));
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1)
        return -1;
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        close(fd);
        return -1;
    }
    n = snprintf(reply, cap, "%s\n", line);
    if (n < 0 || (size_t)n >= cap || write(fd, reply, (size_t)n) != n) {
        close(fd);
        snprintf(reply, cap, "could not send");
        return -1;
    }
    n = (int)read(fd, reply, cap - 1);
    close(fd);
    if (n <= 0) {
        snprintf(reply, cap, "no answer");
        return -1;
    }
    reply[n] = '\0';
    return strncmp(reply, "ok", 2) == 0 ? 0 : -1;
}

void dk_client_reexec(const char *self, const char *nested_env, int brokers, const char *topics)
{
    char script[1024];

    if (getenv("TG_SOURCE_DIR") == NULL || getenv("TG_BUILD_DIR") == NULL) {
        fprintf(stderr, "FAIL: TG_KAFKA_BROKERS/TG_KAFKA_CTL unset and no "
                        "TG_SOURCE_DIR/TG_BUILD_DIR to start devkafka\n");
        exit(1);
    }
    if (getenv(nested_env) != NULL) {
        fprintf(stderr, "FAIL: devkafka was started but not exported\n");
        exit(1);
    }
    snprintf(script, sizeof(script),
             "set -u; source \"$TG_SOURCE_DIR/tests/lib/services.sh\" || exit 1; "
             "dir=$(mktemp -d /tmp/tg-dktest.XXXXXX) || exit 1; "
             "tg_services_init \"$dir\" || exit 1; "
             "trap 'tg_services_stop_all; rm -rf \"$dir\"' EXIT; "
             "tg_devkafka_start %d '%s' || exit 1; "
             "%s=1 \"$0\"; exit $?",
             brokers, topics, nested_env);
    fprintf(stderr, "%s: starting devkafka through tests/lib/services.sh\n", self);
    execl("/bin/bash", "bash", "-c", script, self, (char *)NULL);
    fprintf(stderr, "FAIL: cannot run bash\n");
    exit(1);
}
