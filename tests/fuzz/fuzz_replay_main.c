/* Corpus replay: feeds every file of the directories (or files) named on the command line to
 * LLVMFuzzerTestOneInput (after LLVMFuzzerInitialize when the target has one), so the fuzz
 * properties are checked in every build, not only in clang fuzzing builds. Fails when no input
 * was found, so a moved corpus cannot pass silently. */
#include <dirent.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define REPLAY_FILE_MAX_BYTES (1024 * 1024)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
/* Optional, as in libFuzzer: a target that defines it is set up once before the first input. */
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

/* Returns 1 when the file was fed, 0 when skipped, -1 on a read error. */
static int replay_file(const char *path)
{
    struct stat st;
    uint8_t *buf = NULL;
    FILE *f = NULL;
    int rc = -1;

    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode))
        return 0;
    if (st.st_size > REPLAY_FILE_MAX_BYTES) {
        fprintf(stderr, "replay: %s: larger than %d bytes, skipped\n", path, REPLAY_FILE_MAX_BYTES);
        return 0;
    }
    /* exact size, no terminator: an over-read is visible to ASan */
    buf = malloc(st.st_size > 0 ? (size_t)st.st_size : 1);
    f = fopen(path, "rb");
    if (buf == NULL || f == NULL)
        goto out;
    if (fread(buf, 1, (size_t)st.st_size, f) != (size_t)st.st_size)
        goto out;
    LLVMFuzzerTestOneInput(buf, (size_t)st.st_size);
    rc = 1;
out:
    if (f != NULL)
        fclose(f);
    free(buf);
    if (rc < 0)
        fprintf(stderr, "replay: cannot read %s\n", path);
    return rc;
}

int main(int argc, char **argv)
{
    long fed = 0;

    if (LLVMFuzzerInitialize != NULL && LLVMFuzzerInitialize(&argc, &argv) != 0)
        return 1;
    for (int i = 1; i < argc; i++) {
        DIR *d = opendir(argv[i]);
        struct dirent *de;

        if (d == NULL) {
            int r = replay_file(argv[i]);
            if (r < 0)
                return 1;
            fed += r;
            continue;
        }
        while ((de = readdir(d)) != NULL) {
            char path[4096];
            int r;

            if (de->d_name[0] == '.')
                continue;
            snprintf(path, sizeof(path), "%s/%s", argv[i], de->d_name);
            r = replay_file(path);
            if (r < 0) {
                closedir(d);
                return 1;
            }
            fed += r;
        }
        closedir(d);
    }
    printf("replayed %ld inputs\n", fed);
    return fed > 0 ? 0 : 1;
}
