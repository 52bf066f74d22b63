/* tollgate-litellm-import: bring a LiteLLM proxy's teams and virtual keys into Tollgate.
 *
 * Reads "LiteLLM_TeamTable", "LiteLLM_VerificationToken" and "LiteLLM_BudgetTable" of the
 * LiteLLM database (one read-only snapshot, through a cursor: memory stays bounded however many
 * keys there are) and sends each team to router-svc's /team/new and each key to /key/generate by
 * its hash (key_hash: LiteLLM stores only the SHA-256 of a key, so the keys users hold keep
 * working and no secret is ever read). An entity that exists already (409) is updated instead
 * (/team/update, /key/update), so the import can be run again to catch up. Expired keys are
 * skipped. Every skip and failure is reported on stderr with a name that is never a secret;
 * the summary goes to stdout.
 *
 *   DATABASE_URL=postgresql://... TOLLGATE_MASTER_KEY=sk-... \
 *       tollgate-litellm-import --router http://router-svc:4000
 *
 * Exit status: 0 everything imported (skips are not failures), 1 some row failed, 2 usage,
 * database or router unreachable. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>
#include <jansson.h>
#include <libpq-fe.h>

#include "litellm_map.h"

#define PROG "tollgate-litellm-import"
#define FETCH_ROWS 256                /* rows per cursor fetch */
#define ROW_MAX (1024 * 1024)         /* a row's JSON text, bytes */
#define ANSWER_MAX (64 * 1024)        /* an API answer kept, bytes */
#define HTTP_TIMEOUT_S 60L            /* one API call (a key change waits for the control topic) */
#define SECRET_FILE_MAX 4096

struct opts {
    const char *db_url;
    const char *router;
    char master_key[SECRET_FILE_MAX];
    int dry_run;
    int skip_teams;
};

struct counts {
    unsigned long created, updated, skipped, failed;
};

struct answer {
    char buf[ANSWER_MAX + 1];
    size_t len;
};

static size_t on_data(char *p, size_t size, size_t n, void *ud)
{
    struct answer *a = ud;
    size_t len = size * n, room = ANSWER_MAX - a->len;

    memcpy(a->buf + a->len, p, len < room ? len : room);
    a->len += len < room ? len : room;
    a->buf[a->len] = '\0';
    return len; /* the rest is dropped: an answer is only reported */
}

static void usage(FILE *out)
{
    fprintf(out,
            "usage: " PROG " [--database-url URL] [--router URL] [--master-key-file PATH]\n"
            "                [--skip-teams] [--dry-run]\n"
            "  --database-url    the LiteLLM database (default: $DATABASE_URL, LiteLLM's name)\n"
            "  --router          router-svc's key API base URL (default: $TOLLGATE_ROUTER_URL,\n"
            "                    else http://127.0.0.1:4000)\n"
            "  --master-key-file a file holding the master key (default: $TOLLGATE_MASTER_KEY,\n"
            "                    else $LITELLM_MASTER_KEY)\n"
            "  --skip-teams      import keys only\n"
            "  --dry-run         print each call as a JSON line ({\"path\":..,\"body\":..}) and "
            "send nothing\n");
}

static int read_secret_file(const char *path, char *out, size_t cap)
{
    FILE *f = fopen(path, "r");
    size_t n;

    if (f == NULL) {
        fprintf(stderr, PROG ": --master-key-file %s: %s\n", path, strerror(errno));
        return -1;
    }
    n = fread(out, 1, cap - 1, f);
    fclose(f);
    out[n] = '\0';
    while (n > 0 && (out[n - 1] == '\n' || out[n - 1] == '\r' || out[n - 1] == ' '))
        out[--n] = '\0'; /* a Kubernetes secret written with a trailing newline */
    return 0;
}

static int parse_args(int argc, char **argv, struct opts *o)
{
    const char *keyfile = NULL, *env;

    memset(o, 0, sizeof(*o));
    o->db_url = getenv("DATABASE_URL");
    o->router = getenv("TOLLGATE_ROUTER_URL");
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];

        if (strcmp(a, "--dry-run") == 0) {
            o->dry_run = 1;
        } else if (strcmp(a, "--skip-teams") == 0) {
            o->skip_teams = 1;
        } else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            exit(0);
        } else if (i + 1 < argc && strcmp(a, "--database-url") == 0) {
            o->db_url = argv[++i];
        } else if (i + 1 < argc && strcmp(a, "--router") == 0) {
            o->router = argv[++i];
        } else if (i + 1 < argc && strcmp(a, "--master-key-file") == 0) {
            keyfile = argv[++i];
        } else {
            fprintf(stderr, PROG ": unknown or incomplete argument: %s\n", a);
            usage(stderr);
            return -1;
        }
    }
    if (o->router == NULL || o->router[0] == '\0')
        o->router = "http://127.0.0.1:4000";
    if (o->db_url == NULL || o->db_url[0] == '\0') {
        fprintf(stderr, PROG ": no database: give --database-url or set DATABASE_URL\n");
        return -1;
    }
    if (keyfile != NULL) {
        if (read_secret_file(keyfile, o->master_key, sizeof(o->master_key)) != 0)
            return -1;
    } else if ((env = getenv("TOLLGATE_MASTER_KEY")) != NULL && env[0] != '\0') {
        snprintf(o->master_key, sizeof(o->master_key), "%s", env);
    } else if ((env = getenv("LITELLM_MASTER_KEY")) != NULL && env[0] != '\0') {
        snprintf(o->master_key, sizeof(o->master_key), "%s", env);
    }
    if (!o->dry_run && o->master_key[0] == '\0') {
        fprintf(stderr, PROG ": no master key: set TOLLGATE_MASTER_KEY (or LITELLM_MASTER_KEY) "
                        "or give --master-key-file\n");
        return -1;
    }
    for (const char *p = o->master_key; *p != '\0'; p++) {
        if ((unsigned char)*p < 0x20 || *p == 0x7f) {
            fprintf(stderr, PROG ": the master key holds a control character\n");
            return -1;
        }
    }
    return 0;
}

/* ---- the router's API ---- */

struct api {
    CURL *h;
    struct curl_slist *headers;
    const char *base;
    int dry_run;
};

/* POST body to path. Returns the HTTP status (0 when the router could not be reached), the
 * answer's error message into msg (bounded, may be ""). */
static long api_post(struct api *api, const char *path, const json_t *body, char *msg,
                     size_t msglen)
{
    char url[1024], *text = json_dumps(body, JSON_COMPACT);
    static struct answer ans;
    long status = 0;
    CURLcode rc;

    msg[0] = '\0';
    if (text == NULL) {
        snprintf(msg, msglen, "out of memory");
        return 0;
    }
    if (api->dry_run) {
        printf("{\"path\":\"%s\",\"body\":%s}\n", path, text);
        free(text);
        return 200;
    }
    snprintf(url, sizeof(url), "%s%s", api->base, path);
    ans.len = 0;
    ans.buf[0] = '\0';
    curl_easy_setopt(api->h, CURLOPT_URL, url);
    curl_easy_setopt(api->h, CURLOPT_POSTFIELDS, text);
    curl_easy_setopt(api->h, CURLOPT_POSTFIELDSIZE, (long)strlen(text));
    curl_easy_setopt(api->h, CURLOPT_WRITEDATA, &ans);
    rc = curl_easy_perform(api->h);
    free(text);
    if (rc != CURLE_OK) {
        snprintf(msg, msglen, "%s", curl_easy_strerror(rc));
        return 0;
    }
    curl_easy_getinfo(api->h, CURLINFO_RESPONSE_CODE, &status);
    if (status != 200) {
        json_t *o = json_loadb(ans.buf, ans.len, 0, NULL);
        const char *m = json_string_value(json_object_get(json_object_get(o, "error"), "message"));

        snprintf(msg, msglen, "%.300s", m != NULL ? m : "(no error message)");
        json_decref(o);
    }
    return status;
}

static int api_open(struct api *api, const struct opts *o)
{
    char auth[SECRET_FILE_MAX + 32];

    memset(api, 0, sizeof(*api));
    api->base = o->router;
    api->dry_run = o->dry_run;
    if (o->dry_run)
        return 0;
    api->h = curl_easy_init();
    if (api->h == NULL)
        return -1;
    snprintf(auth, sizeof(auth), "Authorization: Bearer %s", o->master_key);
    api->headers = curl_slist_append(NULL, auth);
    memset(auth, 0, sizeof(auth));
    api->headers = curl_slist_append(api->headers, "Content-Type: application/json");
    if (api->headers == NULL)
        return -1;
    curl_easy_setopt(api->h, CURLOPT_HTTPHEADER, api->headers);
    curl_easy_setopt(api->h, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(api->h, CURLOPT_TIMEOUT, HTTP_TIMEOUT_S);
    curl_easy_setopt(api->h, CURLOPT_CONNECTTIMEOUT, 10L);
    curl_easy_setopt(api->h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(api->h, CURLOPT_PROTOCOLS_STR, "http,https");
    return 0;
}

static void api_close(struct api *api)
{
    if (api->headers != NULL) {
        /* the header list holds the master key */
        for (struct curl_slist *l = api->headers; l != NULL; l = l->next)
            memset(l->data, 0, strlen(l->data));
        curl_slist_free_all(api->headers);
    }
    if (api->h != NULL)
        curl_easy_cleanup(api->h);
}

/* Create, else (409) update, one entity. Returns 0, 1 (the row failed), 2 (router unreachable:
 * the import stops). */
static int put(struct api *api, const char *create, const char *update, json_t *body,
               const char *id, struct counts *c)
{
    char msg[400];
    long st = api_post(api, create, body, msg, sizeof(msg));

    if (st == 409) {
        json_t *u = lm_update_body(body);

        st = u != NULL ? api_post(api, update, u, msg, sizeof(msg)) : 0;
        json_decref(u);
        if (st == 200) {
            c->updated++;
            return 0;
        }
    } else if (st == 200) {
        c->created++;
        return 0;
    }
    if (st == 0) {
        fprintf(stderr, PROG ": %s: router %s unreachable: %s\n", id, api->base, msg);
        return 2;
    }
    fprintf(stderr, PROG ": %s: %ld %s\n", id, st, msg);
    c->failed++;
    return 1;
}

/* ---- the LiteLLM database ---- */

static int exec_ok(PGconn *db, const char *sql)
{
    PGresult *r = PQexec(db, sql);
    int ok = PQresultStatus(r) == PGRES_COMMAND_OK;

    if (!ok)
        fprintf(stderr, PROG ": database: %s", PQerrorMessage(db));
    PQclear(r);
    return ok;
}

static int table_exists(PGconn *db, const char *name)
{
    const char *params[1] = {name};
    PGresult *r = PQexecParams(db, "SELECT to_regclass($1) IS NOT NULL", 1, NULL, params, NULL,
                               NULL, 0);
    int yes = PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1 &&
              strcmp(PQgetvalue(r, 0, 0), "t") == 0;

    PQclear(r);
    return yes;
}

/* Run query (one text column of JSON per row) through a cursor, handing each row to fn.
 * Returns 0, or 2 (database error, or fn asked to stop). */
static int each_row(PGconn *db, const char *query,
                    int (*fn)(json_t *row, void *ud), void *ud)
{
    char sql[4096];
    int rc = 0;

    snprintf(sql, sizeof(sql), "DECLARE lm_rows NO SCROLL CURSOR FOR %s", query);
    if (!exec_ok(db, sql))
        return 2;
    for (;;) {
        PGresult *r;
        char fetch[64];
        int n;

        snprintf(fetch, sizeof(fetch), "FETCH %d FROM lm_rows", FETCH_ROWS);
        r = PQexec(db, fetch);
        if (PQresultStatus(r) != PGRES_TUPLES_OK) {
            fprintf(stderr, PROG ": database: %s", PQerrorMessage(db));
            PQclear(r);
            return 2;
        }
        n = PQntuples(r);
        for (int i = 0; i < n && rc == 0; i++) {
            json_error_t jerr;
            json_t *row;
            int len = PQgetlength(r, i, 0);

            if (len > ROW_MAX) {
                fprintf(stderr, PROG ": a row of %d bytes (over %d) skipped\n", len, ROW_MAX);
                continue;
            }
            row = json_loadb(PQgetvalue(r, i, 0), (size_t)len, 0, &jerr);
            if (row == NULL) {
                fprintf(stderr, PROG ": a row that is not JSON skipped: %s\n", jerr.text);
                continue;
            }
            rc = fn(row, ud);
            json_decref(row);
        }
        PQclear(r);
        if (rc != 0)
            return 2;
        if (n < FETCH_ROWS)
            break;
    }
    return exec_ok(db, "CLOSE lm_rows") ? 0 : 2;
}

struct run {
    struct api *api;
    struct counts teams, keys;
    int failed;
};

static int on_team(json_t *row, void *ud)
{
    struct run *run = ud;
    char id[LM_ID_CAP], why[200];
    json_t *body = lm_team_body(row, id, why, sizeof(why));
    int rc;

    if (body == NULL) {
        fprintf(stderr, PROG ": %s: skipped: %s\n", id, why);
        run->teams.skipped++;
        return 0;
    }
    rc = put(run->api, "/team/new", "/team/update", body, id, &run->teams);
    json_decref(body);
    run->failed |= rc == 1;
    return rc == 2;
}

static int on_key(json_t *row, void *ud)
{
    struct run *run = ud;
    char id[LM_ID_CAP], why[200];
    int raw = 0, rc;
    json_t *body = lm_key_body(row, id, &raw, why, sizeof(why));

    if (body == NULL) {
        fprintf(stderr, PROG ": %s: skipped: %s\n", id, why);
        run->keys.skipped++;
        return 0;
    }
    rc = put(run->api, "/key/generate", "/key/update", body, id, &run->keys);
    json_decref(body);
    run->failed |= rc == 1;
    return rc == 2;
}

static const char *const key_query_budget =
    "SELECT (to_jsonb(v) || jsonb_build_object("
    " '_expires_in_s', CASE WHEN v.expires IS NULL THEN NULL ELSE"
    "  floor(extract(epoch FROM ((v.expires AT TIME ZONE 'UTC') - now())))::bigint END,"
    " '_budget', (SELECT to_jsonb(b) FROM \"LiteLLM_BudgetTable\" b"
    "  WHERE b.budget_id = v.budget_id)))::text"
    " FROM \"LiteLLM_VerificationToken\" v ORDER BY v.token";
static const char *const key_query_plain =
    "SELECT (to_jsonb(v) || jsonb_build_object("
    " '_expires_in_s', CASE WHEN v.expires IS NULL THEN NULL ELSE"
    "  floor(extract(epoch FROM ((v.expires AT TIME ZONE 'UTC') - now())))::bigint END))::text"
    " FROM \"LiteLLM_VerificationToken\" v ORDER BY v.token";

int main(int argc, char **argv)
{
    struct opts o;
    struct api api;
    struct run run;
    PGconn *db;
    int rc = 0;

    if (parse_args(argc, argv, &o) != 0)
        return 2;
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK || api_open(&api, &o) != 0) {
        fprintf(stderr, PROG ": cannot set up the HTTP client\n");
        return 2;
    }
    memset(o.master_key, 0, sizeof(o.master_key));
    db = PQconnectdb(o.db_url);
    if (PQstatus(db) != CONNECTION_OK) {
        fprintf(stderr, PROG ": database: %s", PQerrorMessage(db));
        PQfinish(db);
        api_close(&api);
        return 2;
    }
    memset(&run, 0, sizeof(run));
    run.api = &api;
    if (!exec_ok(db, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")) {
        rc = 2;
    } else if (!table_exists(db, "\"LiteLLM_VerificationToken\"")) {
        fprintf(stderr, PROG ": database: no table \"LiteLLM_VerificationToken\" (is this "
                        "LiteLLM's database?)\n");
        rc = 2;
    } else {
        if (!o.skip_teams && table_exists(db, "\"LiteLLM_TeamTable\""))
            rc = each_row(db, "SELECT to_jsonb(t)::text FROM \"LiteLLM_TeamTable\" t"
                              " ORDER BY t.team_id",
                          on_team, &run);
        if (rc == 0)
            rc = each_row(db,
                          table_exists(db, "\"LiteLLM_BudgetTable\"") ? key_query_budget
                                                                    : key_query_plain,
                          on_key, &run);
        exec_ok(db, "COMMIT");
    }
    PQfinish(db);
    api_close(&api);
    curl_global_cleanup();
    if (o.dry_run)
        fprintf(stderr, "dry run: %lu teams and %lu keys to send, %lu teams and %lu keys skipped\n",
                run.teams.created, run.keys.created, run.teams.skipped, run.keys.skipped);
    else
        printf("teams: %lu created, %lu updated, %lu skipped, %lu failed; "
               "keys: %lu created, %lu updated, %lu skipped, %lu failed\n",
               run.teams.created, run.teams.updated, run.teams.skipped, run.teams.failed,
               run.keys.created, run.keys.updated, run.keys.skipped, run.keys.failed);
    if (rc != 0)
        return 2;
    return run.failed ? 1 : 0;
}
