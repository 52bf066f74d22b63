/* control_vectors: see control_vectors.h. */
#include "control_vectors.h"

#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static int by_name(const void *a, const void *b)
{
    return strcmp(((const struct cv_vector *)a)->name, ((const struct cv_vector *)b)->name);
}

static char *read_all(const char *path)
{
    FILE *f = fopen(path, "rb");
    char *buf;
    long n;

    assert_non_null(f);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    n = ftell(f);
    assert_true(n >= 0 && n < 1 << 20);
    rewind(f);
    buf = malloc((size_t)n + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

/* parse: the lines of v->buf ("# comment" or "name: text"). */
static void parse(struct cv_vector *v)
{
    char *line = v->buf;

    while (line != NULL && *line != '\0') {
        char *nl = strchr(line, '\n'), *sep;

        if (nl != NULL)
            *nl = '\0';
        if (line[0] != '#' && line[0] != '\0') {
            sep = strstr(line, ": ");
            if (sep == NULL && line[strlen(line) - 1] == ':')
                sep = line + strlen(line) - 1; /* "name:" with empty text */
            if (sep == NULL)
                fail_msg("%s.vec: a line without \"name: \": %s", v->name, line);
            *sep = '\0';
            sep += sep[1] == ' ' ? 2 : 1;
            if (strcmp(line, "record_key") == 0) {
                v->record_key = sep;
            } else if (strcmp(line, "value") == 0) {
                v->value = sep;
                v->value_len = strlen(sep);
            } else if (strcmp(line, "expect") == 0) {
                v->expect = sep;
            } else {
                if (v->n >= CV_FIELDS_MAX)
                    fail_msg("%s.vec: more than %d fields", v->name, CV_FIELDS_MAX);
                v->names[v->n] = line;
                v->texts[v->n++] = sep;
            }
        }
        line = nl != NULL ? nl + 1 : NULL;
    }
    if (v->record_key == NULL || v->expect == NULL)
        fail_msg("%s.vec: record_key and expect are required", v->name);
}

struct cv_vector *cv_load(size_t *n)
{
    const char *src = getenv("TG_SOURCE_DIR");
    char dir[512], path[1024];
    struct cv_vector *v = NULL;
    size_t cap = 0;
    struct dirent *e;
    DIR *d;

    snprintf(dir, sizeof(dir), "%s/tests/golden/control", src != NULL ? src : ".");
    d = opendir(dir);
    assert_non_null(d);
    *n = 0;
    while ((e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);

        if (len < 5 || strcmp(e->d_name + len - 4, ".vec") != 0)
            continue;
        if (*n == cap) {
            cap = cap ? cap * 2 : 32;
            v = realloc(v, cap * sizeof(*v));
            assert_non_null(v);
        }
        memset(&v[*n], 0, sizeof(v[*n]));
        snprintf(v[*n].name, sizeof(v[*n].name), "%.*s", (int)(len - 4), e->d_name);
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        v[*n].buf = read_all(path);
        parse(&v[*n]);
        (*n)++;
    }
    closedir(d);
    assert_true(*n >= 20); /* the set in the repository; a lost directory must not pass */
    qsort(v, *n, sizeof(*v), by_name);
    return v;
}

void cv_free(struct cv_vector *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i].buf);
    free(v);
}

const char *cv_get(const struct cv_vector *v, const char *name)
{
    for (size_t i = 0; i < v->n; i++)
        if (strcmp(v->names[i], name) == 0)
            return v->texts[i];
    return NULL;
}

int64_t cv_int(const struct cv_vector *v, const char *name)
{
    const char *t = cv_get(v, name);
    char *end = NULL;
    long long x;

    if (t == NULL)
        fail_msg("%s.vec: no %s", v->name, name);
    x = strtoll(t, &end, 10);
    if (end == t || *end != '\0')
        fail_msg("%s.vec: %s is not a whole number", v->name, name);
    return (int64_t)x;
}
