/* libFuzzer target for the key API (router-svc key_api.h) and its team routes (team_api.h): the
 * bodies (and the GET /key/info key, GET /team/info team_id and GET /team/list team_alias
 * parameters) of every route an admin client sends, in local mode (changes applied to the
 * keys table at once, as without a control topic), so that a sequence of inputs builds, updates,
 * blocks, rotates, lists and deletes keys in a table that fills up (max_keys 16).
 *
 * Input: one byte choosing the route and the method (below 0x80: a /key/ route; from 0x80: a
 * /team/ route), then the body (for the GET routes with a parameter, the parameter).
 *
 * Properties (abort on violation):
 *  - exactly one answer per request, its status one the API documents (200, 400, 404, 405, 409,
 *    500, 503), its body a JSON object of the length given (a JSON array for a 200 of
 *    /team/list), an error answer in OpenAI's error shape with a message;
 *  - the teams table never holds more than max_teams (8) teams, and a 200 of /team/new names a
 *    team the table holds;
 *  - no answer ever contains a random key the API handed out before (generate and regenerate
 *    return a new key once; list, info, update, block and errors never echo one; keys the input
 *    chose itself, or repeats, are not checked: the input may put them in any field, and an
 *    answer may echo them, e.g. a caller-chosen new_key that holds an earlier key). A key that
 *    any input has repeated is not checked from then on: that input may have stored it in a
 *    field a later answer shows (libFuzzer learns the keys from this harness's own compares and
 *    does feed them back, e.g. as a team_alias that GET /team/list then lists);
 *  - the table never holds more than max_keys records and block marks;
 *  - a generated or regenerated key is in the table under the SHA-256 of the key returned, and a
 *    regenerated key's old hash is gone; a key imported by key_hash (generate, key null) is in
 *    the table under the hash the body gave. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "config.h"
#include "key_api.h"
#include "keys.h"
#include "teams.h"
#include "tg_ids.h"
#include "tg_log.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define STATIC_KEY "sk-static-fuzz-key-000001"
#define REMEMBERED 32 /* raw keys handed out, checked against every later answer */

static const char config_yaml[] = "model_list:\n"
                                  "  - model_name: gpt-main\n"
                                  "    litellm_params: {model: openai/m1, api_base: "
                                  "http://127.0.0.1:9/v1}\n"
                                  "  - model_name: gpt-fallback\n"
                                  "    litellm_params: {model: openai/m2, api_base: "
                                  "http://127.0.0.1:9/v1}\n"
                                  "router_settings:\n"
                                  "  model_group_alias: {alias-main: gpt-main}\n"
                                  "tollgate:\n"
                                  "  limits: {max_keys: 16, max_teams: 8}\n"
                                  "  keys:\n"
                                  "    - {key: " STATIC_KEY ", models: [gpt-main]}\n";

static const struct {
    const char *method, *path;
} routes[] = {
    {"POST", "/key/generate"},   {"POST", "/key/update"}, {"POST", "/key/delete"},
    {"POST", "/key/info"},       {"GET", "/key/info"},    {"POST", "/key/block"},
    {"POST", "/key/unblock"},    {"GET", "/key/list"},    {"POST", "/key/list"},
    {"POST", "/key/regenerate"}, {"GET", "/key/update"},  {"POST", "/key/nothing"},
};

static const struct {
    const char *method, *path;
} team_routes[] = {
    {"POST", "/team/new"},    {"POST", "/team/update"}, {"POST", "/team/delete"},
    {"POST", "/team/info"},   {"GET", "/team/info"},    {"POST", "/team/block"},
    {"POST", "/team/unblock"}, {"GET", "/team/list"},   {"POST", "/team/list"},
    {"GET", "/team/new"},     {"POST", "/team/nothing"},
};

static struct rt_config *cfg;
static struct rt_keys *keys;
static struct rt_teams *teams;
static struct rt_key_api *api;
static char remembered[REMEMBERED][RT_KEY_API_KEY_MAX + 1];
static int repeated[REMEMBERED]; /* 1: an input held this key (it may be in the state now) */
static unsigned n_remembered;

struct answer {
    int calls;
    int status;
    char *body;
    size_t len;
};

static void fail(const char *what, const struct answer *a)
{
    fprintf(stderr, "key_api_fuzz: %s (status %d): %.*s\n", what, a != NULL ? a->status : 0,
            a != NULL && a->body != NULL ? (int)(a->len > 2000 ? 2000 : a->len) : 0,
            a != NULL && a->body != NULL ? a->body : "");
    abort();
}

static void on_answer(int status, const char *body, size_t len, void *ud)
{
    struct answer *a = ud;

    a->calls++;
    a->status = status;
    free(a->body);
    a->body = malloc(len + 1);
    if (a->body == NULL)
        abort();
    memcpy(a->body, body, len);
    a->body[len] = '\0';
    a->len = len;
    if (strlen(body) != len)
        fail("the answer's length is not its text's", a);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    static struct rt_config_diag diag;
    struct rt_key_api_config kc;
    char err[256];

    (void)argc;
    (void)argv;
    tg_log_set_level(TG_LOG_OFF);
    cfg = rt_config_load_buffer("router.yaml", config_yaml, strlen(config_yaml), &diag);
    if (cfg == NULL)
        abort();
    keys = rt_keys_create(cfg->keys, cfg->n_keys, cfg->max_keys, err, sizeof(err));
    if (keys == NULL)
        abort();
    teams = rt_teams_create(cfg->max_teams, err, sizeof(err));
    if (teams == NULL)
        abort();
    kc.cfg = cfg;
    kc.keys = keys;
    kc.control = NULL;
    kc.teams = teams;
    api = rt_key_api_create(&kc, err, sizeof(err));
    if (api == NULL)
        abort();
    return 0;
}

static void check_answer(const struct answer *a, const char *body, int array_ok)
{
    json_t *o;
    json_error_t jerr;

    if (a->calls != 1)
        fail("not exactly one answer", a);
    if (a->status != 200 && a->status != 400 && a->status != 404 && a->status != 405 &&
        a->status != 409 && a->status != 500 && a->status != 503)
        fail("a status the API does not document", a);
    o = json_loadb(a->body, a->len, 0, &jerr);
    if (!json_is_object(o) && !(array_ok && a->status == 200 && json_is_array(o)))
        fail("the answer is not a JSON object", a);
    if (a->status != 200 && !json_is_string(json_object_get(json_object_get(o, "error"),
                                                            "message")))
        fail("an error without error.message", a);
    json_decref(o);
    for (unsigned i = 0; i < n_remembered && i < REMEMBERED; i++) {
        /* a key the input repeats is one it chose to show (e.g. inside its own new_key, which
         * the answer echoes): only a key the input does not hold is a leak */
        if (!repeated[i] && strstr(a->body, remembered[i]) != NULL &&
            strstr(body, remembered[i]) == NULL)
            fail("an answer shows a raw key handed out before", a);
    }
}

/* A 200 from generate or regenerate: the new key is in the table under its hash; remember it. */
static void check_new_key(const struct answer *a, int regenerate, const char *old_hash,
                          const char *body)
{
    json_t *o = json_loads(a->body, 0, NULL);
    const char *k = json_string_value(json_object_get(o, "key"));
    const char *h = json_string_value(json_object_get(o, "key_hash"));
    char want[TG_SHA256_HEX_LEN + 1];
    struct rt_keys_table *t;

    if (h == NULL)
        fail("a new key's answer without key_hash", a);
    if (k == NULL) {
        /* an import by key_hash (generate only): key is null, key_hash the body's */
        if (regenerate || !json_is_null(json_object_get(o, "key")) || strstr(body, h) == NULL)
            fail("a new key's answer without key, not an import by key_hash", a);
        t = rt_keys_acquire(keys);
        if (rt_keys_lookup_hash(t, h) == NULL)
            fail("an imported key is not in the table", a);
        rt_keys_release(&t);
        json_decref(o);
        return;
    }
    if (strlen(k) > RT_KEY_API_KEY_MAX)
        fail("a new key's answer with a key over the bound", a);
    tg_sha256_hex(k, strlen(k), want);
    if (strcmp(want, h) != 0)
        fail("key_hash is not the SHA-256 of the key", a);
    t = rt_keys_acquire(keys);
    if (rt_keys_lookup_hash(t, h) == NULL)
        fail("a new key is not in the table", a);
    if (regenerate && old_hash[0] != '\0' && rt_keys_lookup_hash(t, old_hash) != NULL)
        fail("a regenerated key's old hash is still in the table", a);
    rt_keys_release(&t);
    /* The API's own random key, not one the input chose: the body names a chosen key as key or
     * new_key, possibly with JSON escapes (so the text of the body need not hold it). */
    {
        json_t *b = json_loads(body, 0, NULL);
        const char *chosen = json_string_value(json_object_get(b, "key"));
        const char *chosen_new = json_string_value(json_object_get(b, "new_key"));

        if (strstr(body, k) == NULL && (chosen == NULL || strcmp(chosen, k) != 0) &&
            (chosen_new == NULL || strcmp(chosen_new, k) != 0)) {
            snprintf(remembered[n_remembered % REMEMBERED], RT_KEY_API_KEY_MAX + 1, "%s", k);
            repeated[n_remembered % REMEMBERED] = 0;
            n_remembered++;
        }
        json_decref(b);
    }
    json_decref(o);
}

/* The hash the regenerate body names, when it names an existing key (else ""). */
static void named_hash(const char *body, size_t len, char *out)
{
    json_t *o = json_loadb(body, len, 0, NULL);
    const char *k = json_string_value(json_object_get(o, "key"));
    struct rt_keys_table *t = rt_keys_acquire(keys);
    const struct rt_key *key = NULL;

    out[0] = '\0';
    if (k != NULL) {
        key = rt_keys_lookup(t, k, strlen(k));
        if (key == NULL && strlen(k) == TG_SHA256_HEX_LEN)
            key = rt_keys_lookup_hash(t, k);
    }
    if (key != NULL)
        memcpy(out, key->hash, TG_SHA256_HEX_LEN + 1);
    rt_keys_release(&t);
    json_decref(o);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct answer a = {0, 0, NULL, 0};
    unsigned r;
    char *body;
    char old_hash[TG_SHA256_HEX_LEN + 1] = "";
    struct rt_keys_stats st;

    if (size == 0)
        return 0;
    for (unsigned i = 0; i < n_remembered && i < REMEMBERED; i++) {
        if (!repeated[i] && memmem(data, size, remembered[i], strlen(remembered[i])) != NULL)
            repeated[i] = 1;
    }
    if (data[0] >= 0x80) {
        struct rt_teams_table *t;
        unsigned tr = (data[0] & 0x7f) % (sizeof(team_routes) / sizeof(team_routes[0]));
        const char *path = team_routes[tr].path;
        int get = strcmp(team_routes[tr].method, "GET") == 0;

        body = malloc(size);
        if (body == NULL)
            return 0;
        memcpy(body, data + 1, size - 1);
        body[size - 1] = '\0';
        if (get && (strcmp(path, "/team/info") == 0 || strcmp(path, "/team/list") == 0))
            rt_key_api_handle(api, "GET", path, size > 1 ? body : NULL, NULL, 0, on_answer, &a);
        else
            rt_key_api_handle(api, team_routes[tr].method, path, NULL, body, size - 1, on_answer,
                              &a);
        check_answer(&a, body, strcmp(path, "/team/list") == 0);
        t = rt_teams_acquire(teams);
        if (rt_teams_count(t) > cfg->max_teams)
            fail("the teams table holds more than max_teams", &a);
        if (a.status == 200 && strcmp(path, "/team/new") == 0 && !get) {
            json_t *o = json_loads(a.body, 0, NULL);
            const char *id = json_string_value(json_object_get(o, "team_id"));

            if (id == NULL || rt_teams_lookup(t, id) == NULL)
                fail("a new team is not in the table", &a);
            json_decref(o);
        }
        rt_teams_release(&t);
        free(a.body);
        free(body);
        return 0;
    }
    r = data[0] % (sizeof(routes) / sizeof(routes[0]));
    body = malloc(size);
    if (body == NULL)
        return 0;
    memcpy(body, data + 1, size - 1);
    body[size - 1] = '\0';
    if (strcmp(routes[r].path, "/key/regenerate") == 0)
        named_hash(body, size - 1, old_hash);
    if (strcmp(routes[r].method, "GET") == 0 && strcmp(routes[r].path, "/key/info") == 0)
        rt_key_api_handle(api, "GET", "/key/info", body, NULL, 0, on_answer, &a);
    else
        rt_key_api_handle(api, routes[r].method, routes[r].path, NULL, body, size - 1, on_answer,
                          &a);
    check_answer(&a, body, 0);
    if (a.status == 200 && strcmp(routes[r].method, "POST") == 0 &&
        (strcmp(routes[r].path, "/key/generate") == 0 ||
         strcmp(routes[r].path, "/key/regenerate") == 0))
        check_new_key(&a, strcmp(routes[r].path, "/key/regenerate") == 0, old_hash, body);
    rt_keys_get_stats(keys, &st);
    if (st.count + st.blocked > st.capacity)
        fail("the table holds more than max_keys", &a);
    free(a.body);
    free(body);
    return 0;
}
