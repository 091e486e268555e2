/*
 * Runs a libFuzzer target's LLVMFuzzerTestOneInput on saved inputs, without
 * libFuzzer, so that any compiler can build it and `ctest` can replay the
 * seed corpora and saved crash inputs on every build (label fuzz-replay).
 *
 * Usage: <target>_replay PATH...
 * Each PATH is a file, or a folder whose regular files (not recursive, names
 * starting with '.' skipped, name order) are each one input. Each input is
 * handed over in a buffer of exactly its size, so ASan builds catch reads
 * past the end as the fuzzer does. A target reports a bug by crashing
 * (abort, a sanitizer report); this program exits 1 when a path cannot be
 * read or no input was found at all, and 0 otherwise.
 */
#include <dirent.h>
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
/* (optional) Targets may define it, as libFuzzer allows. */
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

/* Reads `path` into a new buffer of exactly its size (at least 1 byte is
 * allocated). Caller frees *data. Returns 0, or -1 with errno set. */
static int read_file(const char *path, uint8_t **data, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    uint8_t *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len == cap) {
            cap = cap ? cap * 2 : 4096;
            uint8_t *bigger = realloc(buf, cap);
            if (!bigger)
                goto fail;
            buf = bigger;
        }
        size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (got == 0)
            break;
    }
    if (ferror(f))
        goto fail;
    fclose(f);
    /* Shrink to the exact size so that overreads are caught. */
    uint8_t *exact = malloc(len ? len : 1);
    if (!exact) {
        free(buf);
        return -1;
    }
    memcpy(exact, buf, len);
    free(buf);
    *data = exact;
    *size = len;
    return 0;
fail:
    free(buf);
    fclose(f);
    return -1;
}

static int run_file(const char *path, size_t *n_inputs) {
    uint8_t *data = NULL;
    size_t size = 0;
    if (read_file(path, &data, &size) != 0) {
        fprintf(stderr, "replay: cannot read %s: %s\n", path, strerror(errno));
        return -1;
    }
    fprintf(stderr, "replay: %s (%zu bytes)\n", path, size);
    LLVMFuzzerTestOneInput(data, size);
    free(data);
    (*n_inputs)++;
    return 0;
}

static int by_name(const struct dirent **a, const struct dirent **b) {
    return strcmp((*a)->d_name, (*b)->d_name);
}

static int skip_hidden(const struct dirent *e) {
    return e->d_name[0] != '.';
}

static int run_dir(const char *dir, size_t *n_inputs) {
    struct dirent **names = NULL;
    int n = scandir(dir, &names, skip_hidden, by_name);
    if (n < 0) {
        fprintf(stderr, "replay: cannot list %s: %s\n", dir, strerror(errno));
        return -1;
    }
    int result = 0;
    for (int i = 0; i < n; i++) {
        char path[4096];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", dir, names[i]->d_name);
        if (result == 0 && stat(path, &st) == 0 && S_ISREG(st.st_mode))
            result = run_file(path, n_inputs);
        free(names[i]);
    }
    free(names);
    return result;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s FILE_OR_FOLDER...\n", argv[0]);
        return 2;
    }
    if (LLVMFuzzerInitialize)
        LLVMFuzzerInitialize(&argc, &argv);
    size_t n_inputs = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            fprintf(stderr, "replay: %s: %s\n", argv[i], strerror(errno));
            return 1;
        }
        int result = S_ISDIR(st.st_mode) ? run_dir(argv[i], &n_inputs)
                                         : run_file(argv[i], &n_inputs);
        if (result != 0)
            return 1;
    }
    if (n_inputs == 0) {
        fprintf(stderr, "replay: no inputs found\n");
        return 1;
    }
    fprintf(stderr, "replay: %zu inputs, no crash\n", n_inputs);
    return 0;
}
