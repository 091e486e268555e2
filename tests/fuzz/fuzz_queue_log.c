/*
 * libFuzzer target for the embedded queue store's recovery
 * (server/queue/queue_log.c, replayed into queue_memory.c through
 * queue_embedded.c). Any bytes as the log file must give either a store
 * that opens (a torn or corrupt tail cut) and then works, or a clean error
 * (not a queue log), without crashing, leaking or reading out of bounds.
 * Build: see README.md.
 *
 * The first byte picks how the rest becomes the file:
 *   0 mod 3: the rest is the whole file, as is;
 *   1 mod 3: a valid header, then the rest;
 *   2 mod 3: a valid header, then the rest read as records whose lengths
 *            are clamped to what is left and whose checksums are set
 *            right, so the fuzzer reaches the record decoder and the
 *            replay past the CRC check.
 * An opened store then takes a put, a get, a delete, a truncate and a
 * compaction, is closed, and must open again from what it wrote.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "osprey/log.h"
#include "osprey/queue.h"
#include "queue_embedded.h"
#include "queue_log.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[64];
static char log_path[96];
static char cut_path[128];
static char damaged_path[128]; /* where recovery keeps damaged bytes */

/* One callback waited for. */
typedef struct wait_one {
    pthread_mutex_t mu;
    pthread_cond_t cond;
    int done;
} wait_one;

static void wait_init(wait_one *w) {
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cond, NULL);
    w->done = 0;
}
static void wait_signal(wait_one *w) {
    pthread_mutex_lock(&w->mu);
    w->done = 1;
    pthread_cond_signal(&w->cond);
    pthread_mutex_unlock(&w->mu);
}
static void wait_for(wait_one *w) {
    pthread_mutex_lock(&w->mu);
    while (!w->done)
        pthread_cond_wait(&w->cond, &w->mu);
    pthread_mutex_unlock(&w->mu);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cond);
}

static void on_put(void *ctx, osp_error *err, uint64_t index,
                   const char *request_id) {
    (void)index;
    (void)request_id;
    osp_error_free(err);
    wait_signal(ctx);
}
static void on_done(void *ctx, osp_error *err) {
    osp_error_free(err);
    wait_signal(ctx);
}
static void on_items(void *ctx, osp_error *err, osp_queue_item **items,
                     size_t n) {
    for (size_t i = 0; i < n; i++)
        if (items[i]->index == 0 || items[i]->request_id == NULL)
            abort(); /* an item is never index 0 and has a request id */
    osp_queue_items_free(items, n);
    osp_error_free(err);
    wait_signal(ctx);
}

static void visit_queue(void *ctx, osp_queue *q) {
    (void)ctx;
    osp_queue_attribute *attrs = NULL;
    size_t n = 0;
    osp_error *err = osp_queue_attributes(q, &attrs, &n);
    osp_error_free(err);
    osp_queue_attributes_free(attrs, n);
    wait_one w;
    wait_init(&w);
    osp_queue_get_args get = {.length = 8, .auto_delete = true};
    osp_queue_get(q, &get, on_items, &w);
    wait_for(&w);
}

/* Opens the store in `dir` and works it a little. */
static void open_and_operate(void) {
    osp_queue_store_options opts = {.dir = dir, .fsync = OSP_QUEUE_FSYNC_NONE};
    osp_queue_store *store = NULL;
    osp_error *err = osp_queue_store_open(&opts, &store);
    if (err != NULL) {
        osp_error_free(err);
        return;
    }
    osp_queue_store_foreach(store, visit_queue, NULL);
    osp_queue *q = NULL;
    err = osp_queue_store_queue(store, "svc", &q);
    if (err == NULL) {
        wait_one w;
        wait_init(&w);
        osp_queue_put_args put = {.data = "x", .size = 1};
        osp_queue_put(q, &put, on_put, &w);
        wait_for(&w);
        uint64_t first = 1;
        wait_init(&w);
        osp_queue_delete(q, &first, 1, on_done, &w);
        wait_for(&w);
        wait_init(&w);
        osp_queue_truncate(q, 3, on_done, &w);
        wait_for(&w);
    }
    osp_error_free(err);
    osp_error_free(queue_log_compact(queue_embedded_log(store)));
    osp_queue_store_free(store);
}

/* Sets each record's checksum right, clamping lengths to what is left. */
static void fix_records(uint8_t *p, size_t n) {
    size_t at = 0;
    while (n - at >= 9) {
        uint32_t len = (uint32_t)p[at] | (uint32_t)p[at + 1] << 8 |
                       (uint32_t)p[at + 2] << 16 | (uint32_t)p[at + 3] << 24;
        if (len > n - at - 9) {
            len = (uint32_t)(n - at - 9);
            for (int i = 0; i < 4; i++)
                p[at + i] = (uint8_t)(len >> (8 * i));
        }
        uLong crc = crc32(0L, p + at + 8, 1);
        crc = crc32(crc, p + at + 9, len);
        for (int i = 0; i < 4; i++)
            p[at + 4 + i] = (uint8_t)(crc >> (8 * i));
        at += 9 + (size_t)len;
    }
}

/* Leaves /tmp as it was. */
static void remove_dir(void) {
    char lock_path[96];
    snprintf(lock_path, sizeof lock_path, "%s/LOCK", dir);
    unlink(log_path);
    unlink(cut_path);
    unlink(damaged_path);
    unlink(lock_path);
    rmdir(dir);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1)
        return 0;
    if (dir[0] == '\0') {
        atexit(remove_dir);
        snprintf(dir, sizeof dir, "/tmp/osprey-fuzz-queue-log-%d",
                 (int)getpid());
        snprintf(log_path, sizeof log_path, "%s/queue.log", dir);
        snprintf(cut_path, sizeof cut_path, "%s/queue.log.cut", dir);
        snprintf(damaged_path, sizeof damaged_path, "%s/queue.log.damaged",
                 dir);
        osp_log_set_enabled(OSP_LOG_ERROR, false); /* every cut logs */
        osp_log_set_enabled(OSP_LOG_WARNING, false);
    }
    int mode = data[0] % 3;
    const uint8_t *rest = data + 1;
    size_t n = size - 1;
    static const uint8_t header[16] = {'O', 'S', 'P', 'Q', 'L', 'O',
                                       'G', 0,   1,   0,   0,   0};
    size_t file_len = (mode == 0 ? 0 : sizeof header) + n;
    uint8_t *file = malloc(file_len ? file_len : 1);
    if (file == NULL)
        return 0;
    size_t at = 0;
    if (mode != 0) {
        memcpy(file, header, sizeof header);
        at = sizeof header;
    }
    if (n > 0)
        memcpy(file + at, rest, n);
    if (mode == 2)
        fix_records(file + at, n);

    /* The directory holding just this log. */
    mkdir(dir, 0755);
    unlink(cut_path);
    unlink(damaged_path); /* appended to by every damaged input otherwise */
    FILE *f = fopen(log_path, "wb");
    if (f == NULL) {
        free(file);
        return 0;
    }
    fwrite(file, 1, file_len, f);
    fclose(f);
    free(file);

    open_and_operate();
    open_and_operate(); /* what recovery and the operations left opens */
    return 0;
}
