/* loadgen: open-loop HTTP load driver for router-svc (libcurl multi).
 *
 * Requests are scheduled at a fixed rate independent of how fast answers come back (open
 * loop), so a slow server shows up as latency, not as a lower offered load. Endpoints are mixed
 * round-robin, a configurable share of them streaming. Every request is recorded in a TSV file:
 *   seq endpoint stream sched_ms latency_ms status ok call_id curl_error
 * and a summary with a latency histogram (p50/p90/p99/p999) is printed as one JSON line.
 *
 * Bounds: in-flight transfers are capped (--max-inflight); a request that cannot start because
 * the cap is reached is recorded as "overload" (never queued without bound). The latency array
 * holds at most --rate x --duration entries, allocated once. */
#include <curl/curl.h>
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define LG_TAIL_BYTES 96
#define LG_CALL_ID_CAP 64
#define LG_MAX_ENDPOINTS 8
#define LG_MAX_KEYS 16
/* A refused connection never reached a server (nothing was processed or billed), so it is
 * retried like a client behind a Service would: every LG_CONNECT_RETRY_MS, at most
 * LG_CONNECT_RETRIES times. Counted separately; any other transport error is a failure. */
#define LG_CONNECT_RETRY_MS 50.0
#define LG_CONNECT_RETRIES 400

enum lg_endpoint { LG_CHAT, LG_MESSAGES, LG_RESPONSES, LG_EMBEDDINGS };

static const char *const lg_endpoint_names[] = {"chat", "messages", "responses", "embeddings"};
static const char *const lg_endpoint_paths[] = {"/v1/chat/completions", "/v1/messages",
                                                "/v1/responses", "/v1/embeddings"};

struct lg_opts {
    const char *url;      /* base URL, no trailing slash */
    const char *key;      /* bearer key, or several separated by commas (round robin) */
    const char *model;    /* model (group or alias) */
    double rate;          /* requests per second */
    double duration_s;    /* seconds of load */
    double stream_ratio;  /* 0..1 share of streaming requests (embeddings never stream) */
    int max_inflight;     /* in-flight cap */
    long timeout_ms;      /* per-request total timeout */
    const char *out;      /* TSV record file, or NULL */
    int progress;         /* print a progress line every second */
    enum lg_endpoint mix[LG_MAX_ENDPOINTS];
    int nmix;
};

struct lg_req {
    uint64_t seq;
    enum lg_endpoint ep;
    int stream;
    double sched_ms;  /* scheduled start, ms since load start */
    double start_ms;  /* actual start */
    CURL *easy;
    struct curl_slist *headers;
    char call_id[LG_CALL_ID_CAP];
    char tail[LG_TAIL_BYTES + 1]; /* last bytes of the body, to check stream completion */
    size_t tail_len;
    size_t body_bytes;
    int saw_end;          /* the stream's terminating event was seen */
    double retry_at_ms;   /* > 0: waiting to retry a refused connection */
    int connect_retries;  /* refused connections retried so far */
    char body[512];
};

static volatile sig_atomic_t lg_stop;

static void lg_on_signal(int sig)
{
    (void)sig;
    lg_stop = 1;
}

static double lg_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static const char *lg_end_marker(enum lg_endpoint ep)
{
    switch (ep) {
    case LG_CHAT:
        return "data: [DONE]";
    case LG_MESSAGES:
        return "event: message_stop";
    case LG_RESPONSES:
        return "event: response.completed";
    default:
        return NULL;
    }
}

/* Looks for the terminating event in the bytes that straddle the previous tail and this chunk,
 * then in the chunk itself. */
static void lg_scan_end(struct lg_req *r, const char *ptr, size_t n)
{
    const char *m = lg_end_marker(r->ep);
    size_t mlen;
    char edge[2 * LG_TAIL_BYTES];
    size_t e;

    if (!r->stream || m == NULL || r->saw_end)
        return;
    mlen = strlen(m);
    e = r->tail_len;
    memcpy(edge, r->tail, e);
    memcpy(edge + e, ptr, n < LG_TAIL_BYTES ? n : LG_TAIL_BYTES);
    e += n < LG_TAIL_BYTES ? n : LG_TAIL_BYTES;
    if (memmem(edge, e, m, mlen) != NULL || memmem(ptr, n, m, mlen) != NULL)
        r->saw_end = 1;
}

static size_t lg_on_body(char *ptr, size_t size, size_t nmemb, void *ud)
{
    struct lg_req *r = ud;
    size_t n = size * nmemb;

    lg_scan_end(r, ptr, n);
    r->body_bytes += n;
    if (n >= LG_TAIL_BYTES) {
        memcpy(r->tail, ptr + n - LG_TAIL_BYTES, LG_TAIL_BYTES);
        r->tail_len = LG_TAIL_BYTES;
    } else {
        size_t keep = r->tail_len + n > LG_TAIL_BYTES ? LG_TAIL_BYTES - n : r->tail_len;
        memmove(r->tail, r->tail + r->tail_len - keep, keep);
        memcpy(r->tail + keep, ptr, n);
        r->tail_len = keep + n;
    }
    r->tail[r->tail_len] = '\0';
    return n;
}

static size_t lg_on_header(char *ptr, size_t size, size_t nmemb, void *ud)
{
    struct lg_req *r = ud;
    size_t n = size * nmemb;
    static const char name[] = "x-tollgate-call-id:";

    if (n > sizeof(name) - 1 && strncasecmp(ptr, name, sizeof(name) - 1) == 0) {
        const char *v = ptr + sizeof(name) - 1;
        size_t len = n - (sizeof(name) - 1);

        while (len > 0 && (*v == ' ' || *v == '\t')) {
            v++;
            len--;
        }
        while (len > 0 && (v[len - 1] == '\r' || v[len - 1] == '\n' || v[len - 1] == ' '))
            len--;
        if (len >= LG_CALL_ID_CAP)
            len = LG_CALL_ID_CAP - 1;
        memcpy(r->call_id, v, len);
        r->call_id[len] = '\0';
    }
    return n;
}

/* A 200 stream counts as ok only if it reached its terminating event. */
static int lg_body_complete(const struct lg_req *r)
{
    if (!r->stream)
        return r->body_bytes > 0;
    return r->saw_end;
}

static void lg_build_body(struct lg_req *r, const char *model)
{
    const char *s = r->stream ? "true" : "false";

    switch (r->ep) {
    case LG_CHAT:
        snprintf(r->body, sizeof(r->body),
                 "{\"model\":\"%s\",\"stream\":%s,%s\"messages\":[{\"role\":\"user\","
                 "\"content\":\"load request %llu\"}]}",
                 model, s, r->stream ? "\"stream_options\":{\"include_usage\":true}," : "",
                 (unsigned long long)r->seq);
        break;
    case LG_MESSAGES:
        snprintf(r->body, sizeof(r->body),
                 "{\"model\":\"%s\",\"stream\":%s,\"max_tokens\":64,\"messages\":[{\"role\":"
                 "\"user\",\"content\":\"load request %llu\"}]}",
                 model, s, (unsigned long long)r->seq);
        break;
    case LG_RESPONSES:
        snprintf(r->body, sizeof(r->body),
                 "{\"model\":\"%s\",\"stream\":%s,\"input\":\"load request %llu\"}", model, s,
                 (unsigned long long)r->seq);
        break;
    case LG_EMBEDDINGS:
        snprintf(r->body, sizeof(r->body), "{\"model\":\"%s\",\"input\":\"load request %llu\"}",
                 model, (unsigned long long)r->seq);
        break;
    }
}

static int lg_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a;
    double y = *(const double *)b;

    return x < y ? -1 : x > y;
}

static double lg_pct(const double *sorted, size_t n, double p)
{
    size_t i;

    if (n == 0)
        return 0;
    i = (size_t)(p * (double)(n - 1) + 0.5);
    return sorted[i < n ? i : n - 1];
}

static int lg_parse_mix(struct lg_opts *o, const char *s)
{
    char buf[256];
    char *save = NULL;

    snprintf(buf, sizeof(buf), "%s", s);
    o->nmix = 0;
    for (char *t = strtok_r(buf, ",", &save); t != NULL; t = strtok_r(NULL, ",", &save)) {
        int found = -1;

        for (int i = 0; i < 4; i++) {
            if (strcmp(t, lg_endpoint_names[i]) == 0)
                found = i;
        }
        if (found < 0 || o->nmix >= LG_MAX_ENDPOINTS) {
            fprintf(stderr, "loadgen: --mix: unknown endpoint '%s' (chat, messages, responses, "
                            "embeddings)\n", t);
            return -1;
        }
        o->mix[o->nmix++] = (enum lg_endpoint)found;
    }
    return o->nmix > 0 ? 0 : -1;
}

static void lg_usage(void)
{
    fprintf(stderr,
            "usage: loadgen --url URL --key KEY[,KEY...] [--model M] [--rate RPS] [--duration S]\n"
            "               [--stream-ratio 0..1] [--mix chat,messages,responses,embeddings]\n"
            "               [--max-inflight N] [--timeout-ms MS] [--out FILE.tsv] [--progress]\n");
}

int main(int argc, char **argv)
{
    struct lg_opts o = {.url = NULL, .key = "", .model = "gpt-main", .rate = 100,
                        .duration_s = 10, .stream_ratio = 0.5, .max_inflight = 2048,
                        .timeout_ms = 30000, .out = NULL, .progress = 0};
    static const struct option longopts[] = {
        {"url", required_argument, NULL, 'u'},        {"key", required_argument, NULL, 'k'},
        {"model", required_argument, NULL, 'm'},      {"rate", required_argument, NULL, 'r'},
        {"duration", required_argument, NULL, 'd'},   {"stream-ratio", required_argument, NULL, 's'},
        {"mix", required_argument, NULL, 'x'},        {"max-inflight", required_argument, NULL, 'i'},
        {"timeout-ms", required_argument, NULL, 't'}, {"out", required_argument, NULL, 'o'},
        {"progress", no_argument, NULL, 'p'},         {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0}};
    struct lg_req *reqs = NULL;
    double *lat = NULL;
    FILE *out = NULL;
    CURLM *multi = NULL;
    CURLSH *share = NULL;
    uint64_t total, next = 0, done = 0, ok = 0, failed = 0, transport = 0, overload = 0;
    uint64_t by_status[6] = {0};
    uint64_t connect_retries = 0;
    size_t nlat = 0;
    int inflight = 0;
    int c, rc = 1;
    double t0, last_progress;
    int stream_every;
    char keybuf[4096];
    const char *keys[LG_MAX_KEYS];
    int nkeys = 0;

    lg_parse_mix(&o, "chat,messages,responses,embeddings");
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (c) {
        case 'u': o.url = optarg; break;
        case 'k': o.key = optarg; break;
        case 'm': o.model = optarg; break;
        case 'r': o.rate = atof(optarg); break;
        case 'd': o.duration_s = atof(optarg); break;
        case 's': o.stream_ratio = atof(optarg); break;
        case 'x':
            if (lg_parse_mix(&o, optarg) != 0)
                return 2;
            break;
        case 'i': o.max_inflight = atoi(optarg); break;
        case 't': o.timeout_ms = atol(optarg); break;
        case 'o': o.out = optarg; break;
        case 'p': o.progress = 1; break;
        default: lg_usage(); return 2;
        }
    }
    if (o.url == NULL || o.rate <= 0 || o.duration_s <= 0 || o.max_inflight <= 0 ||
        o.stream_ratio < 0 || o.stream_ratio > 1) {
        lg_usage();
        return 2;
    }
    total = (uint64_t)(o.rate * o.duration_s);
    if (total == 0 || total > 50u * 1000u * 1000u) {
        fprintf(stderr, "loadgen: rate x duration must be between 1 and 50,000,000 requests\n");
        return 2;
    }
    stream_every = o.stream_ratio > 0 ? (int)(1.0 / o.stream_ratio + 0.5) : 0;
    snprintf(keybuf, sizeof(keybuf), "%s", o.key);
    for (char *save = NULL, *t = strtok_r(keybuf, ",", &save); t != NULL && nkeys < LG_MAX_KEYS;
         t = strtok_r(NULL, ",", &save))
        keys[nkeys++] = t;
    if (nkeys == 0)
        keys[nkeys++] = "";
    signal(SIGINT, lg_on_signal);
    signal(SIGTERM, lg_on_signal);
    signal(SIGPIPE, SIG_IGN);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    reqs = calloc((size_t)o.max_inflight, sizeof(*reqs));
    lat = calloc(total, sizeof(*lat));
    multi = curl_multi_init();
    share = curl_share_init();
    if (reqs == NULL || lat == NULL || multi == NULL || share == NULL) {
        fprintf(stderr, "loadgen: out of memory\n");
        goto out;
    }
    curl_share_setopt(share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
    curl_multi_setopt(multi, CURLMOPT_MAX_TOTAL_CONNECTIONS, (long)o.max_inflight);
    if (o.out != NULL) {
        out = fopen(o.out, "w");
        if (out == NULL) {
            fprintf(stderr, "loadgen: cannot write %s: %s\n", o.out, strerror(errno));
            goto out;
        }
        fprintf(out, "seq\tendpoint\tstream\tsched_ms\tlatency_ms\tstatus\tok\tcall_id\terror\n");
    }

    t0 = lg_now_ms();
    last_progress = t0;
    while (!lg_stop && (next < total || inflight > 0)) {
        double now = lg_now_ms() - t0;
        int running = 0;
        int timeout_ms;
        CURLMsg *msg;
        int left;

        /* Start every request whose scheduled time has come (open loop). */
        while (next < total && (double)next * 1000.0 / o.rate <= now) {
            struct lg_req *r = NULL;

            for (int i = 0; i < o.max_inflight; i++) {
                if (reqs[i].easy == NULL) {
                    r = &reqs[i];
                    break;
                }
            }
            if (r == NULL) {
                overload++;
                if (out != NULL)
                    fprintf(out, "%llu\t-\t0\t%.1f\t0\t0\t0\t-\toverload\n",
                            (unsigned long long)next, (double)next * 1000.0 / o.rate);
                next++;
                continue;
            }
            memset(r, 0, sizeof(*r));
            r->seq = next;
            r->ep = o.mix[next % (uint64_t)o.nmix];
            r->stream = r->ep != LG_EMBEDDINGS && stream_every > 0 &&
                        ((next / (uint64_t)o.nmix) % (uint64_t)stream_every) == 0;
            r->sched_ms = (double)next * 1000.0 / o.rate;
            r->start_ms = now;
            lg_build_body(r, o.model);
            {
                char urlbuf[512];
                char auth[512];

                snprintf(urlbuf, sizeof(urlbuf), "%s%s", o.url, lg_endpoint_paths[r->ep]);
                snprintf(auth, sizeof(auth), "Authorization: Bearer %s",
                         keys[(next / (uint64_t)o.nmix) % (uint64_t)nkeys]);
                r->headers = curl_slist_append(NULL, "Content-Type: application/json");
                r->headers = curl_slist_append(r->headers, auth);
                if (r->ep == LG_MESSAGES)
                    r->headers = curl_slist_append(r->headers, "anthropic-version: 2023-06-01");
                r->easy = curl_easy_init();
                curl_easy_setopt(r->easy, CURLOPT_URL, urlbuf);
            }
            curl_easy_setopt(r->easy, CURLOPT_HTTPHEADER, r->headers);
            curl_easy_setopt(r->easy, CURLOPT_POSTFIELDS, r->body);
            curl_easy_setopt(r->easy, CURLOPT_WRITEFUNCTION, lg_on_body);
            curl_easy_setopt(r->easy, CURLOPT_WRITEDATA, r);
            curl_easy_setopt(r->easy, CURLOPT_HEADERFUNCTION, lg_on_header);
            curl_easy_setopt(r->easy, CURLOPT_HEADERDATA, r);
            curl_easy_setopt(r->easy, CURLOPT_PRIVATE, r);
            curl_easy_setopt(r->easy, CURLOPT_TIMEOUT_MS, o.timeout_ms);
            curl_easy_setopt(r->easy, CURLOPT_NOSIGNAL, 1L);
            curl_easy_setopt(r->easy, CURLOPT_SHARE, share);
            curl_multi_add_handle(multi, r->easy);
            inflight++;
            next++;
        }

        /* Re-add requests whose refused connection is due for another try. */
        for (int i = 0; i < o.max_inflight; i++) {
            struct lg_req *r = &reqs[i];
            if (r->easy != NULL && r->retry_at_ms > 0 && r->retry_at_ms <= now) {
                r->retry_at_ms = 0;
                r->body_bytes = 0;
                r->saw_end = 0;
                r->tail_len = 0;
                r->tail[0] = '\0';
                r->call_id[0] = '\0';
                curl_multi_add_handle(multi, r->easy);
            }
        }
        curl_multi_perform(multi, &running);
        while ((msg = curl_multi_info_read(multi, &left)) != NULL) {
            struct lg_req *r = NULL;
            long status = 0;
            double end;
            int is_ok;

            if (msg->msg != CURLMSG_DONE)
                continue;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&r);
            curl_easy_getinfo(msg->easy_handle, CURLINFO_RESPONSE_CODE, &status);
            end = lg_now_ms() - t0;
            if (msg->data.result == CURLE_COULDNT_CONNECT &&
                r->connect_retries < LG_CONNECT_RETRIES && !lg_stop) {
                curl_multi_remove_handle(multi, r->easy);
                r->connect_retries++;
                connect_retries++;
                r->retry_at_ms = end + LG_CONNECT_RETRY_MS;
                continue;
            }
            is_ok = msg->data.result == CURLE_OK && status == 200 && lg_body_complete(r);
            if (msg->data.result != CURLE_OK)
                transport++;
            if (is_ok)
                ok++;
            else
                failed++;
            by_status[status >= 100 && status < 600 ? status / 100 : 0]++;
            /* Latency counts from the scheduled time: queueing in the driver is the server's. */
            lat[nlat++] = end - r->sched_ms;
            if (out != NULL)
                fprintf(out, "%llu\t%s\t%d\t%.1f\t%.3f\t%ld\t%d\t%s\t%s\n",
                        (unsigned long long)r->seq, lg_endpoint_names[r->ep], r->stream,
                        r->sched_ms, end - r->sched_ms, status, is_ok,
                        r->call_id[0] ? r->call_id : "-",
                        msg->data.result != CURLE_OK ? curl_easy_strerror(msg->data.result)
                        : (status == 200 && !is_ok) ? "incomplete body" : "-");
            curl_multi_remove_handle(multi, r->easy);
            curl_easy_cleanup(r->easy);
            curl_slist_free_all(r->headers);
            r->easy = NULL;
            r->headers = NULL;
            inflight--;
            done++;
        }

        now = lg_now_ms() - t0;
        if (o.progress && now - (last_progress - t0) >= 1000.0) {
            last_progress = now + t0;
            fprintf(stderr, "loadgen: t=%.0fs sent=%llu done=%llu ok=%llu failed=%llu "
                            "inflight=%d overload=%llu\n",
                    now / 1000.0, (unsigned long long)next, (unsigned long long)done,
                    (unsigned long long)ok, (unsigned long long)failed, inflight,
                    (unsigned long long)overload);
        }
        if (next < total) {
            double wait = (double)next * 1000.0 / o.rate - now;
            timeout_ms = wait <= 0 ? 0 : (int)wait + 1;
            if (timeout_ms > 20)
                timeout_ms = 20;
        } else {
            timeout_ms = 20;
        }
        curl_multi_poll(multi, NULL, 0, timeout_ms, NULL);
    }

    qsort(lat, nlat, sizeof(*lat), lg_cmp_double);
    printf("{\"requests\":%llu,\"done\":%llu,\"ok\":%llu,\"failed\":%llu,\"transport_errors\":%llu,"
           "\"overload\":%llu,\"connect_retries\":%llu,\"status_2xx\":%llu,\"status_4xx\":%llu,\"status_5xx\":%llu,"
           "\"rate\":%.1f,\"duration_s\":%.1f,\"elapsed_s\":%.2f,\"p50_ms\":%.3f,\"p90_ms\":%.3f,"
           "\"p99_ms\":%.3f,\"p999_ms\":%.3f,\"max_ms\":%.3f}\n",
           (unsigned long long)next, (unsigned long long)done, (unsigned long long)ok,
           (unsigned long long)failed, (unsigned long long)transport,
           (unsigned long long)overload, (unsigned long long)connect_retries,
           (unsigned long long)by_status[2],
           (unsigned long long)by_status[4], (unsigned long long)by_status[5], o.rate,
           o.duration_s, (lg_now_ms() - t0) / 1000.0, lg_pct(lat, nlat, 0.50),
           lg_pct(lat, nlat, 0.90), lg_pct(lat, nlat, 0.99), lg_pct(lat, nlat, 0.999),
           nlat > 0 ? lat[nlat - 1] : 0.0);
    fflush(stdout);
    rc = 0;
out:
    if (reqs != NULL) {
        for (int i = 0; i < o.max_inflight; i++) {
            if (reqs[i].easy != NULL) {
                if (reqs[i].retry_at_ms <= 0)
                    curl_multi_remove_handle(multi, reqs[i].easy);
                curl_easy_cleanup(reqs[i].easy);
                curl_slist_free_all(reqs[i].headers);
            }
        }
    }
    if (out != NULL)
        fclose(out);
    if (multi != NULL)
        curl_multi_cleanup(multi);
    if (share != NULL)
        curl_share_cleanup(share);
    free(reqs);
    free(lat);
    curl_global_cleanup();
    return rc;
}
