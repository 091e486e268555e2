/*
 * The embedded store's append-only log (queue_log.h): record encoding,
 * the writer thread (group commit), recovery and compaction.
 *
 * The writer keeps its own account of the file, the "mirror": for every
 * queue its high-water mark, its end-of-stream flag and where each live
 * PUT record lies. It updates the mirror from the records it writes (and
 * recovery from the records it reads), so compaction can copy the live
 * records into a new file without touching the queues or their locks.
 */
#define _GNU_SOURCE
#include "queue_log.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "osprey/log.h"

enum {
    LOG_PUT = 1,
    LOG_DELETE = 2,
    LOG_TRUNCATE = 3,
    LOG_STATE = 4,
};

static const uint8_t LOG_MAGIC[8] = {'O', 'S', 'P', 'Q', 'L', 'O', 'G', 0};
#define LOG_VERSION 1u
#define LOG_HEADER_BYTES 16u
#define LOG_RECORD_HEADER_BYTES 9u
#define LOG_DEFAULT_COMPACT_MIN_BYTES (16ull * 1024 * 1024)
/* The writer keeps this much zeroed file ahead of the records (policies
 * batch and always). An append that grows the file makes its fdatasync
 * commit the file system's journal too (the new size, the new blocks);
 * one that overwrites blocks already written flushes only the data: on
 * the development machine's ext4 that halved the median fdatasync, 0.33
 * to 0.15 ms. The zeros are written once per this many bytes of records,
 * recovery takes a tail of zeros as the clean end of the log, and a clean
 * close cuts it off. */
#define LOG_PREALLOC_BYTES (4u * 1024 * 1024)

/* ---- little-endian encoding ---- */

static void put_u16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}
static void put_u32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static void put_u64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
           (uint32_t)p[3] << 24;
}
static uint64_t get_u64(const uint8_t *p) {
    return (uint64_t)get_u32(p) | (uint64_t)get_u32(p + 4) << 32;
}

/* ---- batches ---- */

void log_batch_init(log_batch *batch) {
    memset(batch, 0, sizeof *batch);
}

void log_batch_destroy(log_batch *batch) {
    free(batch->data);
    log_batch_init(batch);
}

/* Room for `more` bytes at the end; NULL (and oom set) when not. */
static uint8_t *batch_room(log_batch *batch, size_t more) {
    if (batch->oom || batch->too_large)
        return NULL;
    if (batch->len + more > batch->cap) {
        size_t cap = batch->cap ? batch->cap : 256;
        while (cap < batch->len + more)
            cap *= 2;
        uint8_t *grown = realloc(batch->data, cap);
        if (grown == NULL) {
            batch->oom = true;
            return NULL;
        }
        batch->data = grown;
        batch->cap = cap;
    }
    return batch->data + batch->len;
}

/* Starts a record: header room plus the queue name. Returns the offset of
 * the record in the batch, or SIZE_MAX. */
static size_t record_begin(log_batch *batch, uint8_t type, const char *queue,
                           size_t payload_after_name) {
    size_t name_len = strlen(queue);
    uint64_t payload = 2 + (uint64_t)name_len + payload_after_name;
    if (payload > QUEUE_LOG_MAX_RECORD_BYTES || name_len > UINT16_MAX) {
        batch->too_large = true;
        return SIZE_MAX;
    }
    uint8_t *p = batch_room(batch, LOG_RECORD_HEADER_BYTES + (size_t)payload);
    if (p == NULL)
        return SIZE_MAX;
    size_t at = batch->len;
    put_u32(p, (uint32_t)payload);
    p[8] = type;
    put_u16(p + 9, (uint16_t)name_len);
    memcpy(p + 11, queue, name_len);
    batch->len += LOG_RECORD_HEADER_BYTES + 2 + name_len;
    return at;
}

/* Ends the record started at `at`: its CRC over type and payload. */
static void record_end(log_batch *batch, size_t at) {
    uint8_t *rec = batch->data + at;
    uint32_t payload = get_u32(rec);
    uLong crc = crc32(0L, rec + 8, 1);
    crc = crc32(crc, rec + LOG_RECORD_HEADER_BYTES, payload);
    put_u32(rec + 4, (uint32_t)crc);
}

static void batch_bytes(log_batch *batch, const void *data, size_t n) {
    memcpy(batch->data + batch->len, data, n); /* room made at begin */
    batch->len += n;
}
static void batch_u32(log_batch *batch, uint32_t v) {
    put_u32(batch->data + batch->len, v);
    batch->len += 4;
}
static void batch_u64(log_batch *batch, uint64_t v) {
    put_u64(batch->data + batch->len, v);
    batch->len += 8;
}

void log_batch_put(log_batch *batch, const char *queue,
                   const osp_queue_item *item) {
    uint64_t after = 8 + 4 + 8 + 4 + 4 + (uint64_t)item->size;
    for (size_t i = 0; i < item->n_tags; i++)
        after += 8 + strlen(item->tags[i].key) + strlen(item->tags[i].value);
    if (after > QUEUE_LOG_MAX_RECORD_BYTES) {
        batch->too_large = true;
        return;
    }
    size_t at = record_begin(batch, LOG_PUT, queue, (size_t)after);
    if (at == SIZE_MAX)
        return;
    batch_u64(batch, item->index);
    batch_u32(batch, (uint32_t)item->priority);
    batch_u64(batch, (uint64_t)item->put_unix_ns);
    batch_u32(batch, (uint32_t)item->n_tags);
    for (size_t i = 0; i < item->n_tags; i++) {
        size_t k = strlen(item->tags[i].key), v = strlen(item->tags[i].value);
        batch_u32(batch, (uint32_t)k);
        batch_bytes(batch, item->tags[i].key, k);
        batch_u32(batch, (uint32_t)v);
        batch_bytes(batch, item->tags[i].value, v);
    }
    batch_u32(batch, (uint32_t)item->size);
    if (item->size > 0)
        batch_bytes(batch, item->data, item->size);
    record_end(batch, at);
}

void log_batch_delete(log_batch *batch, const char *queue,
                      const uint64_t *indexes, size_t n) {
    /* Large lists are split so a record stays far below the limit. */
    const size_t per_record = 65536;
    for (size_t done = 0; done < n || (n == 0 && done == 0);) {
        size_t take = n - done < per_record ? n - done : per_record;
        size_t at = record_begin(batch, LOG_DELETE, queue, 4 + 8 * take);
        if (at == SIZE_MAX)
            return;
        batch_u32(batch, (uint32_t)take);
        for (size_t i = 0; i < take; i++)
            batch_u64(batch, indexes[done + i]);
        record_end(batch, at);
        done += take;
        if (n == 0)
            break;
    }
}

void log_batch_truncate(log_batch *batch, const char *queue, uint64_t before) {
    size_t at = record_begin(batch, LOG_TRUNCATE, queue, 8);
    if (at == SIZE_MAX)
        return;
    batch_u64(batch, before);
    record_end(batch, at);
}

void log_batch_state(log_batch *batch, const char *queue, uint64_t next_index,
                     bool ended) {
    size_t at = record_begin(batch, LOG_STATE, queue, 9);
    if (at == SIZE_MAX)
        return;
    batch_u64(batch, next_index);
    batch->data[batch->len++] = ended ? 1 : 0;
    record_end(batch, at);
}

/* ---- decoding ---- */

typedef struct log_reader {
    const uint8_t *p;
    size_t left;
    bool bad;
} log_reader;

static const uint8_t *read_bytes(log_reader *r, size_t n) {
    if (r->bad || n > r->left) {
        r->bad = true;
        return NULL;
    }
    const uint8_t *p = r->p;
    r->p += n;
    r->left -= n;
    return p;
}
static uint32_t read_u32(log_reader *r) {
    const uint8_t *p = read_bytes(r, 4);
    return p ? get_u32(p) : 0;
}
static uint64_t read_u64(log_reader *r) {
    const uint8_t *p = read_bytes(r, 8);
    return p ? get_u64(p) : 0;
}

/* A decoded record; pointers into the record's bytes. */
typedef struct log_record {
    uint8_t type;
    char queue[QUEUE_MAX_NAME_BYTES + 1];
    /* PUT */
    uint64_t index;
    int32_t priority;
    int64_t put_unix_ns;
    uint32_t n_tags;
    const uint8_t *tags; /* n_tags x (u32 len, key, u32 len, value) */
    size_t tags_bytes;
    const uint8_t *data;
    uint32_t size;
    /* DELETE */
    uint32_t n_indexes;
    const uint8_t *indexes; /* n x u64 */
    /* TRUNCATE */
    uint64_t before;
    /* STATE */
    uint64_t next_index;
    bool ended;
} log_record;

/* A string from the log: no NUL inside (it would cut it short). */
static const uint8_t *read_string(log_reader *r, size_t *len) {
    *len = read_u32(r);
    const uint8_t *s = read_bytes(r, *len);
    if (s != NULL && memchr(s, 0, *len) != NULL)
        r->bad = true;
    return r->bad ? NULL : s;
}

/* Decodes a payload whose CRC matched. false when it is malformed (a
 * record a bug or a collision let through: treated as corruption). */
static bool record_decode(uint8_t type, const uint8_t *payload, size_t len,
                          log_record *rec) {
    log_reader r = {payload, len, false};
    memset(rec, 0, sizeof *rec);
    rec->type = type;
    const uint8_t *lenp = read_bytes(&r, 2);
    size_t name_len = lenp ? (size_t)(lenp[0] | lenp[1] << 8) : 0;
    const uint8_t *name = read_bytes(&r, name_len);
    if (name == NULL || name_len == 0 || name_len > QUEUE_MAX_NAME_BYTES ||
        memchr(name, 0, name_len) != NULL)
        return false;
    memcpy(rec->queue, name, name_len);
    rec->queue[name_len] = '\0';
    switch (type) {
    case LOG_PUT: {
        rec->index = read_u64(&r);
        rec->priority = (int32_t)read_u32(&r);
        rec->put_unix_ns = (int64_t)read_u64(&r);
        rec->n_tags = read_u32(&r);
        rec->tags = r.p;
        bool has_request_id = false;
        for (uint32_t i = 0; i < rec->n_tags && !r.bad; i++) {
            size_t k, v;
            const uint8_t *key = read_string(&r, &k);
            read_string(&r, &v);
            if (key != NULL && k == 9 && memcmp(key, "requestId", 9) == 0)
                has_request_id = true;
        }
        if (r.bad || !has_request_id)
            return false;
        rec->tags_bytes = (size_t)(r.p - rec->tags);
        rec->size = read_u32(&r);
        rec->data = read_bytes(&r, rec->size);
        return !r.bad && r.left == 0 && rec->index > 0;
    }
    case LOG_DELETE:
        rec->n_indexes = read_u32(&r);
        if (rec->n_indexes > r.left / 8)
            return false;
        rec->indexes = read_bytes(&r, (size_t)rec->n_indexes * 8);
        return !r.bad && r.left == 0;
    case LOG_TRUNCATE:
        rec->before = read_u64(&r);
        return !r.bad && r.left == 0;
    case LOG_STATE: {
        rec->next_index = read_u64(&r);
        const uint8_t *ended = read_bytes(&r, 1);
        rec->ended = ended && *ended;
        return !r.bad && r.left == 0 && ended && *ended <= 1;
    }
    default:
        return false;
    }
}

/* The item of a decoded PUT record. NULL when out of memory. */
static osp_queue_item *record_item(const log_record *rec) {
    osp_queue_tag *tags = calloc(rec->n_tags ? rec->n_tags : 1, sizeof *tags);
    /* The strings need terminators: one copy of the tag bytes, each
     * length prefix overwritten by the previous string's NUL. */
    char *strings = malloc(rec->tags_bytes + 1);
    osp_queue_item *item = NULL;
    if (tags != NULL && strings != NULL) {
        log_reader r = {rec->tags, rec->tags_bytes, false};
        char *cursor = strings;
        for (uint32_t i = 0; i < rec->n_tags; i++) {
            size_t k, v;
            const uint8_t *key = read_string(&r, &k);
            memcpy(cursor, key, k);
            cursor[k] = '\0';
            tags[i].key = cursor;
            cursor += k + 1;
            const uint8_t *value = read_string(&r, &v);
            memcpy(cursor, value, v);
            cursor[v] = '\0';
            tags[i].value = cursor;
            cursor += v + 1;
        }
        item =
            queue_item_new(rec->index, rec->priority, NULL, tags, rec->n_tags,
                           rec->data, rec->size, rec->put_unix_ns);
    }
    free(tags);
    free(strings);
    return item;
}

/* ---- the mirror ---- */

typedef struct mirror_put {
    uint64_t index;
    uint64_t offset;     /* of the record (header included) in the file */
    uint64_t new_offset; /* in the file a compaction is writing */
    uint32_t bytes;      /* 0 once deleted */
} mirror_put;

typedef struct mirror_queue {
    char *name;
    uint64_t next_index;
    bool ended;
    mirror_put *puts; /* ascending index */
    size_t n_puts, cap_puts, n_dead;
} mirror_queue;

typedef struct mirror {
    mirror_queue *queues;
    size_t n_queues, cap_queues;
    size_t last; /* the queue found last (puts come in runs) */
    uint64_t live_bytes;
    bool oom;
} mirror;

static mirror_queue *mirror_queue_get(mirror *m, const char *name) {
    if (m->last < m->n_queues && strcmp(m->queues[m->last].name, name) == 0)
        return &m->queues[m->last];
    for (size_t i = 0; i < m->n_queues; i++)
        if (strcmp(m->queues[i].name, name) == 0) {
            m->last = i;
            return &m->queues[i];
        }
    if (m->n_queues == m->cap_queues) {
        size_t cap = m->cap_queues ? m->cap_queues * 2 : 8;
        mirror_queue *grown = realloc(m->queues, cap * sizeof *grown);
        if (grown == NULL)
            return NULL;
        m->queues = grown;
        m->cap_queues = cap;
    }
    mirror_queue *mq = &m->queues[m->n_queues];
    memset(mq, 0, sizeof *mq);
    mq->name = strdup(name);
    if (mq->name == NULL)
        return NULL;
    mq->next_index = 1;
    m->last = m->n_queues++;
    return mq;
}

static void mirror_free(mirror *m) {
    for (size_t i = 0; i < m->n_queues; i++) {
        free(m->queues[i].name);
        free(m->queues[i].puts);
    }
    free(m->queues);
    memset(m, 0, sizeof *m);
}

static size_t mirror_lower_bound(const mirror_queue *mq, uint64_t index) {
    size_t lo = 0, hi = mq->n_puts;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (mq->puts[mid].index < index)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static void mirror_kill(mirror *m, mirror_queue *mq, size_t at) {
    if (mq->puts[at].bytes == 0)
        return;
    m->live_bytes -= mq->puts[at].bytes;
    mq->puts[at].bytes = 0;
    mq->n_dead++;
}

static void mirror_queue_compact(mirror_queue *mq) {
    if (mq->n_dead < 64 || mq->n_dead * 2 < mq->n_puts)
        return;
    size_t w = 0;
    for (size_t i = 0; i < mq->n_puts; i++)
        if (mq->puts[i].bytes != 0)
            mq->puts[w++] = mq->puts[i];
    mq->n_puts = w;
    mq->n_dead = 0;
}

/* Accounts for record `rec` of `bytes` bytes at file offset `offset`. */
static void mirror_apply(mirror *m, const log_record *rec, uint64_t offset,
                         uint32_t bytes) {
    mirror_queue *mq = mirror_queue_get(m, rec->queue);
    if (mq == NULL) {
        m->oom = true; /* compaction is off from now on */
        return;
    }
    switch (rec->type) {
    case LOG_PUT:
        if (mq->n_puts > 0 && mq->puts[mq->n_puts - 1].index >= rec->index) {
            /* Out of order (only a hand-made file): not compactable. */
            m->oom = true;
            return;
        }
        if (mq->n_puts == mq->cap_puts) {
            size_t cap = mq->cap_puts ? mq->cap_puts * 2 : 16;
            mirror_put *grown = realloc(mq->puts, cap * sizeof *grown);
            if (grown == NULL) {
                m->oom = true;
                return;
            }
            mq->puts = grown;
            mq->cap_puts = cap;
        }
        mq->puts[mq->n_puts++] = (mirror_put){rec->index, offset, 0, bytes};
        m->live_bytes += bytes;
        if (rec->index >= mq->next_index)
            mq->next_index = rec->index + 1;
        break;
    case LOG_DELETE:
        for (uint32_t i = 0; i < rec->n_indexes; i++) {
            uint64_t index = get_u64(rec->indexes + 8 * (size_t)i);
            size_t at = mirror_lower_bound(mq, index);
            if (at < mq->n_puts && mq->puts[at].index == index)
                mirror_kill(m, mq, at);
        }
        mirror_queue_compact(mq);
        break;
    case LOG_TRUNCATE: {
        size_t end = mirror_lower_bound(mq, rec->before);
        for (size_t i = 0; i < end; i++)
            mirror_kill(m, mq, i);
        mirror_queue_compact(mq);
        break;
    }
    case LOG_STATE:
        if (rec->next_index > mq->next_index)
            mq->next_index = rec->next_index;
        mq->ended = rec->ended;
        break;
    }
}

/* ---- the log ---- */

struct queue_log {
    char *dir;
    char *path;
    int fd;
    int dir_fd;
    int lock_fd;
    osp_queue_fsync policy;

    pthread_mutex_t mu;
    pthread_cond_t wake; /* the writer: bytes, closing, compaction */
    pthread_cond_t done; /* a compaction finished */
    uint8_t *buf;        /* appended, not yet taken by the writer */
    size_t len, cap;
    uint64_t appended_lsn; /* bytes ever appended */
    uint64_t written_lsn;  /* bytes the writer has made durable */
    log_waiter *waiters_head, *waiters_tail;
    bool closing;
    osp_error *failed; /* sticky: the log lost a write */
    bool disk_full;    /* the last write found no room (logged once) */
    bool compact_requested;
    uint64_t compact_generation;
    osp_error *compact_result;
    uint64_t compact_min_bytes;
    queue_log_stats stats; /* under mu */
    pthread_t writer;
    bool writer_started;

    /* the writer's own (and recovery's) */
    uint8_t *wbuf;
    size_t wcap;
    uint64_t file_size;  /* the end of the records */
    uint64_t alloc_size; /* the file's size: file_size plus zeros */
    mirror mirror;
    uint64_t compact_backoff_bytes; /* after a failed compaction */
    uint64_t writer_fsyncs;
};

static osp_error *errno_error(const char *what, const char *path) {
    return osp_error_new(OSP_ERROR_UNAVAILABLE, "queue log: %s %s: %s", what,
                         path, strerror(errno));
}

static bool write_all(int fd, const uint8_t *p, size_t n, uint64_t offset) {
    while (n > 0) {
        ssize_t w = pwrite(fd, p, n, (off_t)offset);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return false;
        }
        p += w;
        n -= (size_t)w;
        offset += (uint64_t)w;
    }
    return true;
}

static bool read_all(int fd, uint8_t *p, size_t n, uint64_t offset) {
    while (n > 0) {
        ssize_t r = pread(fd, p, n, (off_t)offset);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return false;
        p += r;
        n -= (size_t)r;
        offset += (uint64_t)r;
    }
    return true;
}

/* fdatasync (fsync for a directory), except under the policy none, which
 * never flushes (not for compaction or recovery either). Counts the
 * log's own flushes. */
static bool sync_file(queue_log *log, int fd) {
    if (log->policy == OSP_QUEUE_FSYNC_NONE)
        return true;
    if (fd == log->fd)
        log->writer_fsyncs++;
    return (fd == log->dir_fd ? fsync(fd) : fdatasync(fd)) == 0;
}

/* Grows the file with zeros so that `end` and LOG_PREALLOC_BYTES more lie
 * inside it (see LOG_PREALLOC_BYTES). Not under the policy none, which
 * never flushes. Best effort: on a failure (a full disk) the records are
 * appended as before and meet the same error themselves. */
static void writer_preallocate(queue_log *log, uint64_t end) {
    static const uint8_t zeros[64 * 1024];
    if (log->policy == OSP_QUEUE_FSYNC_NONE || end <= log->alloc_size)
        return;
    uint64_t from =
        log->alloc_size > log->file_size ? log->alloc_size : log->file_size;
    uint64_t to = end + LOG_PREALLOC_BYTES;
    while (from < to) {
        size_t n =
            to - from < sizeof zeros ? (size_t)(to - from) : sizeof zeros;
        if (!write_all(log->fd, zeros, n, from))
            return;
        from += n;
        log->alloc_size = from;
    }
}

/* Whether a failed write's errno means "no room": a full disk, a quota,
 * or a file size limit (RLIMIT_FSIZE with SIGXFSZ ignored). */
static bool errno_is_no_space(int e) {
    return e == ENOSPC || e == EDQUOT || e == EFBIG;
}

/* The error each change of a write refused for lack of room gets. No file
 * path: it goes into replies. */
static osp_error *storage_full_error(int e) {
    return osp_error_new_reason(OSP_ERROR_UNAVAILABLE, OSP_REASON_STORAGE_FULL,
                                "the queue store's disk is full (%s): the "
                                "change was not stored",
                                strerror(e));
}

/* A write that found no room: cuts whatever part of it reached the file
 * (a torn append, possibly with whole records of changes about to be
 * refused) so the next write starts at the end of the last written
 * record. false when the cut itself failed (the log must then stop). */
static bool writer_undo_torn_append(queue_log *log) {
    if (ftruncate(log->fd, (off_t)log->file_size) != 0 ||
        !sync_file(log, log->fd))
        return false;
    log->alloc_size = log->file_size; /* the preallocated zeros went too */
    return true;
}

/* Makes the records in the writer's buffer a durable part of the file:
 * writes, syncs, updates the mirror. A write that finds no room (see
 * errno_is_no_space) is undone and answered with *no_space set: the log
 * stays usable and the next write tries again. Any other error leaves
 * the log failed. */
static osp_error *writer_write(queue_log *log, const uint8_t *p, size_t n,
                               bool *no_space) {
    *no_space = false;
    writer_preallocate(log, log->file_size + n);
    if (!write_all(log->fd, p, n, log->file_size)) {
        int e = errno;
        if (errno_is_no_space(e) && writer_undo_torn_append(log)) {
            *no_space = true;
            return storage_full_error(e);
        }
        errno = e;
        return errno_error("cannot write", log->path);
    }
    for (size_t at = 0; at < n;) { /* our own records: well formed */
        uint32_t payload = get_u32(p + at);
        log_record rec;
        if (record_decode(p[at + 8], p + at + LOG_RECORD_HEADER_BYTES, payload,
                          &rec))
            mirror_apply(&log->mirror, &rec, log->file_size + at,
                         LOG_RECORD_HEADER_BYTES + payload);
        at += LOG_RECORD_HEADER_BYTES + payload;
    }
    log->file_size += n;
    if (log->file_size > log->alloc_size)
        log->alloc_size = log->file_size;
    if (!sync_file(log, log->fd))
        return errno_error("cannot fsync", log->path);
    return NULL;
}

/* Writes a compacted copy of the file (the mirror's live records) and
 * puts it in place. Runs on the writer thread, no lock held. */
static osp_error *writer_compact(queue_log *log) {
    char *tmp = NULL;
    if (asprintf(&tmp, "%s/queue.log.compact", log->dir) < 0)
        return osp_error_out_of_memory();
    osp_error *err = NULL;
    int fd = open(tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    log_batch out;
    log_batch_init(&out);
    if (fd < 0) {
        err = errno_error("cannot create", tmp);
        goto out;
    }
    uint64_t pos = 0;
    uint8_t header[LOG_HEADER_BYTES] = {0};
    memcpy(header, LOG_MAGIC, 8);
    put_u32(header + 8, LOG_VERSION);
    uint8_t *room = batch_room(&out, sizeof header);
    if (room != NULL) {
        memcpy(room, header, sizeof header);
        out.len += sizeof header;
    }
    for (size_t q = 0; q < log->mirror.n_queues && !out.oom; q++) {
        mirror_queue *mq = &log->mirror.queues[q];
        for (size_t i = 0; i < mq->n_puts && !out.oom; i++) {
            mirror_put *put = &mq->puts[i];
            if (put->bytes == 0)
                continue;
            uint8_t *dst = batch_room(&out, put->bytes);
            if (dst == NULL)
                break;
            if (!read_all(log->fd, dst, put->bytes, put->offset)) {
                err = errno_error("cannot read", log->path);
                goto out;
            }
            put->new_offset = pos + out.len;
            out.len += put->bytes;
            if (out.len >= (1u << 20)) {
                if (!write_all(fd, out.data, out.len, pos)) {
                    err = errno_error("cannot write", tmp);
                    goto out;
                }
                pos += out.len;
                out.len = 0;
            }
        }
        /* After its items: replay takes a PUT below the high-water mark
         * for one out of order. */
        log_batch_state(&out, mq->name, mq->next_index, mq->ended);
    }
    if (out.oom || out.too_large) {
        err = osp_error_out_of_memory();
        goto out;
    }
    if (!write_all(fd, out.data, out.len, pos)) {
        err = errno_error("cannot write", tmp);
        goto out;
    }
    pos += out.len;
    if (!sync_file(log, fd)) {
        err = errno_error("cannot fsync", tmp);
        goto out;
    }
    if (rename(tmp, log->path) != 0) {
        err = errno_error("cannot rename", tmp);
        goto out;
    }
    sync_file(log, log->dir_fd); /* the rename; both files are whole */
    for (size_t q = 0; q < log->mirror.n_queues; q++) {
        mirror_queue *mq = &log->mirror.queues[q];
        size_t w = 0;
        for (size_t i = 0; i < mq->n_puts; i++)
            if (mq->puts[i].bytes != 0) {
                mq->puts[w] = mq->puts[i];
                mq->puts[w].offset = mq->puts[i].new_offset;
                w++;
            }
        mq->n_puts = w;
        mq->n_dead = 0;
    }
    close(log->fd);
    log->fd = fd;
    fd = -1;
    OSP_LOG_VERBOSE("queue log %s compacted: %llu to %llu bytes", log->path,
                    (unsigned long long)log->file_size,
                    (unsigned long long)pos);
    log->file_size = pos;
    log->alloc_size = pos;
out:
    if (fd >= 0) {
        close(fd);
        unlink(tmp);
    }
    free(tmp);
    log_batch_destroy(&out);
    return err;
}

static bool compaction_due(queue_log *log) {
    uint64_t size = log->file_size;
    return !log->mirror.oom && size > log->compact_min_bytes &&
           size > log->compact_backoff_bytes &&
           log->mirror.live_bytes < size / 2;
}

/* Compacts; on failure waits for the file to double before trying again. */
static osp_error *writer_try_compact(queue_log *log) {
    osp_error *err = writer_compact(log);
    pthread_mutex_lock(&log->mu);
    log->stats.file_bytes = log->file_size;
    log->stats.live_bytes = log->mirror.live_bytes;
    if (err == NULL) {
        log->stats.compactions++;
        log->compact_backoff_bytes = 0;
    } else {
        log->compact_backoff_bytes = log->file_size * 2;
    }
    pthread_mutex_unlock(&log->mu);
    if (err != NULL)
        OSP_LOG_WARN("queue log %s: compaction failed (the log keeps "
                     "growing): %s",
                     log->path, osp_error_message(err));
    return err;
}

static void *writer_main(void *arg) {
    queue_log *log = arg;
    pthread_mutex_lock(&log->mu);
    for (;;) {
        while (
            log->len == 0 && !log->closing && !log->compact_requested &&
            !(log->waiters_head && log->waiters_head->lsn <= log->written_lsn))
            pthread_cond_wait(&log->wake, &log->mu);
        if (log->compact_requested) {
            log->compact_requested = false;
            pthread_mutex_unlock(&log->mu);
            osp_error *err =
                log->mirror.oom
                    ? osp_error_new(OSP_ERROR_UNSUPPORTED,
                                    "queue log: no compaction after an "
                                    "out-of-memory")
                    : writer_try_compact(log);
            pthread_mutex_lock(&log->mu);
            osp_error_free(log->compact_result);
            log->compact_result = err;
            log->compact_generation++;
            pthread_cond_broadcast(&log->done);
            continue;
        }
        if (log->len == 0 && log->waiters_head == NULL) /* closing */
            break;
        /* What this write covers: everything (batch, none), or up to the
         * first waiting mutation (always: one fsync per mutation). */
        size_t take = log->len;
        if (log->policy == OSP_QUEUE_FSYNC_ALWAYS && log->waiters_head) {
            uint64_t end = log->waiters_head->lsn - log->written_lsn;
            if (end < take)
                take = (size_t)end;
        }
        if (take == 0) {
            /* only waiters whose records are already written */
        } else if (take == log->len) {
            uint8_t *b = log->buf;
            size_t c = log->cap;
            log->buf = log->wbuf;
            log->cap = log->wcap;
            log->wbuf = b;
            log->wcap = c;
            log->len = 0;
        } else {
            if (log->wcap < take) {
                uint8_t *grown = realloc(log->wbuf, take);
                if (grown == NULL) {
                    /* Wait for memory rather than lose order. */
                    pthread_mutex_unlock(&log->mu);
                    usleep(1000);
                    pthread_mutex_lock(&log->mu);
                    continue;
                }
                log->wbuf = grown;
                log->wcap = take;
            }
            memcpy(log->wbuf, log->buf, take);
            memmove(log->buf, log->buf + take, log->len - take);
            log->len -= take;
        }
        bool failed = log->failed != NULL;
        pthread_mutex_unlock(&log->mu);

        bool no_space = false;
        osp_error *err = failed || take == 0
                             ? NULL
                             : writer_write(log, log->wbuf, take, &no_space);

        pthread_mutex_lock(&log->mu);
        /* Changes of a write that found no room are refused one by one
         * (err); the log takes the next ones. */
        uint64_t refused_after = log->written_lsn;
        bool wrote = err == NULL;
        if (no_space) {
            if (!log->disk_full)
                OSP_LOG_ERROR("queue log %s: %s; changes are refused until "
                              "space returns",
                              log->path, osp_error_message(err));
            log->disk_full = true;
            log->stats.no_space_writes++;
        } else if (err != NULL) {
            OSP_LOG_ERROR("%s; the queue store takes no more changes",
                          osp_error_message(err));
            log->failed = err;
            err = NULL;
        } else if (take > 0 && log->disk_full) {
            OSP_LOG_INFO("queue log %s: space is back; changes are stored "
                         "again",
                         log->path);
            log->disk_full = false;
        }
        if (take > 0)
            log->stats.writes++;
        log->stats.fsyncs = log->writer_fsyncs;
        log->stats.file_bytes = log->file_size;
        log->stats.live_bytes = log->mirror.live_bytes;
        log->written_lsn += take;
        log_waiter *ready = NULL, **tail = &ready;
        while (log->waiters_head &&
               log->waiters_head->lsn <= log->written_lsn) {
            log_waiter *w = log->waiters_head;
            log->waiters_head = w->next;
            w->next = NULL;
            *tail = w;
            tail = &w->next;
        }
        if (log->waiters_head == NULL)
            log->waiters_tail = NULL;
        const char *why = log->failed ? osp_error_message(log->failed) : NULL;
        char *why_copy = why ? strdup(why) : NULL;
        pthread_mutex_unlock(&log->mu);

        for (log_waiter *w = ready, *next; w; w = next) {
            next = w->next;
            osp_error *answer = NULL;
            if (why)
                answer =
                    osp_error_new(OSP_ERROR_UNAVAILABLE, "%s",
                                  why_copy ? why_copy : "queue log failed");
            else if (err != NULL && w->lsn > refused_after)
                answer = osp_error_new_reason(osp_error_get_code(err),
                                              osp_error_get_reason(err), "%s",
                                              osp_error_message(err));
            w->done(w, answer);
        }
        free(why_copy);
        osp_error_free(err);
        if (!failed && wrote && compaction_due(log)) {
            osp_error *cerr = writer_try_compact(log);
            osp_error_free(cerr);
        }
        pthread_mutex_lock(&log->mu);
    }
    pthread_mutex_unlock(&log->mu);
    return NULL;
}

osp_error *queue_log_check(queue_log *log) {
    osp_error *err = NULL;
    pthread_mutex_lock(&log->mu);
    if (log->closing)
        err = osp_error_new_reason(OSP_ERROR_UNAVAILABLE,
                                   OSP_REASON_SHUTTING_DOWN,
                                   "the queue store is closing");
    else if (log->failed)
        err = osp_error_new(OSP_ERROR_UNAVAILABLE, "%s",
                            osp_error_message(log->failed));
    pthread_mutex_unlock(&log->mu);
    return err;
}

osp_error *queue_log_append(queue_log *log, const log_batch *batch,
                            log_waiter *waiters) {
    if (batch->oom)
        return osp_error_out_of_memory();
    if (batch->too_large)
        return osp_error_new_reason(OSP_ERROR_INVALID_ARG, OSP_REASON_TOO_LARGE,
                                    "a queue log record is limited to %u "
                                    "bytes",
                                    QUEUE_LOG_MAX_RECORD_BYTES);
    osp_error *err = NULL;
    pthread_mutex_lock(&log->mu);
    if (log->closing || log->failed) {
        err = log->closing ? osp_error_new_reason(OSP_ERROR_UNAVAILABLE,
                                                  OSP_REASON_SHUTTING_DOWN,
                                                  "the queue store is closing")
                           : osp_error_new(OSP_ERROR_UNAVAILABLE, "%s",
                                           osp_error_message(log->failed));
        goto out;
    }
    if (log->len + batch->len > log->cap) {
        size_t cap = log->cap ? log->cap : 65536;
        while (cap < log->len + batch->len)
            cap *= 2;
        uint8_t *grown = realloc(log->buf, cap);
        if (grown == NULL) {
            err = osp_error_out_of_memory();
            log->failed = osp_error_new(OSP_ERROR_UNAVAILABLE,
                                        "queue log: out of memory");
            goto out;
        }
        log->buf = grown;
        log->cap = cap;
    }
    if (batch->len > 0)
        memcpy(log->buf + log->len, batch->data, batch->len);
    log->len += batch->len;
    log->appended_lsn += batch->len;
    for (log_waiter *w = waiters, *next; w; w = next) {
        next = w->next;
        w->next = NULL;
        w->lsn = log->appended_lsn;
        if (log->waiters_tail)
            log->waiters_tail->next = w;
        else
            log->waiters_head = w;
        log->waiters_tail = w;
    }
    if (batch->len > 0 || waiters != NULL)
        pthread_cond_signal(&log->wake);
out:
    pthread_mutex_unlock(&log->mu);
    return err;
}

/* A waiter of an empty batch still waits for every record appended
 * before it: the writer answers it once written_lsn reaches its lsn. */

/* ---- open and recovery ---- */

static osp_error *make_dirs(const char *dir) {
    char *path = strdup(dir);
    if (path == NULL)
        return osp_error_out_of_memory();
    for (char *p = path + 1;; p++) {
        if (*p == '/' || *p == '\0') {
            char c = *p;
            *p = '\0';
            if (mkdir(path, 0755) != 0 && errno != EEXIST) {
                osp_error *err = errno_error("cannot create directory", path);
                free(path);
                return err;
            }
            *p = c;
            if (c == '\0')
                break;
        }
    }
    free(path);
    return NULL;
}

/* Keeps the bytes about to be cut next to the log, for a person to look
 * at (best effort). */
static void save_cut_bytes(queue_log *log, const uint8_t *p, size_t n) {
    char *cut = NULL;
    if (asprintf(&cut, "%s.cut", log->path) < 0)
        return;
    int fd = open(cut, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd >= 0) {
        write_all(fd, p, n, 0);
        fsync(fd);
        close(fd);
    }
    free(cut);
}

static bool all_zero(const uint8_t *p, uint64_t n) {
    for (uint64_t i = 0; i < n; i++)
        if (p[i] != 0)
            return false;
    return true;
}

/* Whether a whole record that checks starts at file[at] (size bytes in
 * all): a length within the limit and the file, a known type, a matching
 * CRC and a payload that decodes. Sets *why when not, and *rec. */
static bool record_at(const uint8_t *file, uint64_t size, uint64_t at,
                      log_record *rec, const char **why) {
    if (size - at < LOG_RECORD_HEADER_BYTES) {
        *why = "a torn record header";
        return false;
    }
    const uint8_t *h = file + at;
    uint32_t payload = get_u32(h);
    if (payload > QUEUE_LOG_MAX_RECORD_BYTES) {
        *why = "a record length over the limit";
        return false;
    }
    if (payload > size - at - LOG_RECORD_HEADER_BYTES) {
        *why = "a torn record";
        return false;
    }
    if (h[8] < LOG_PUT || h[8] > LOG_STATE) {
        *why = "a malformed record";
        return false;
    }
    const uint8_t *body = h + LOG_RECORD_HEADER_BYTES;
    uLong crc = crc32(0L, h + 8, 1);
    crc = crc32(crc, body, payload);
    if ((uint32_t)crc != get_u32(h + 4)) {
        *why = "a record whose checksum does not match";
        return false;
    }
    if (!record_decode(h[8], body, payload, rec)) {
        *why = "a malformed record";
        return false;
    }
    return true;
}

/* The offset of the first record that checks after the damaged one at
 * `at`, or `size` when none does (then the damage is the log's tail).
 * Cheap checks come before the CRC, so random bytes cost little; a false
 * match needs a 32-bit CRC to agree as well. */
static uint64_t resync(const uint8_t *file, uint64_t size, uint64_t at) {
    log_record rec;
    const char *why;
    for (uint64_t o = at + 1; o + LOG_RECORD_HEADER_BYTES <= size; o++)
        if (record_at(file, size, o, &rec, &why))
            return o;
    return size;
}

/* Appends the damaged bytes to queue.log.damaged next to the log, for a
 * person to look at (best effort). */
static void save_damaged_bytes(queue_log *log, const uint8_t *p, size_t n) {
    char *path = NULL;
    if (asprintf(&path, "%s.damaged", log->path) < 0)
        return;
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd >= 0) {
        for (size_t done = 0; done < n;) {
            ssize_t w = write(fd, p + done, n - done);
            if (w <= 0)
                break;
            done += (size_t)w;
        }
        fsync(fd);
        close(fd);
    }
    free(path);
}

/* Replays the file; sets *valid_end to the end of the last good record.
 * A damaged record with good records after it is skipped (its bytes are
 * saved aside and counted as a lost record): every intact record after
 * it still counts. Damage with nothing good after it is the tail. */
static void replay(queue_log *log, const uint8_t *file, uint64_t size,
                   const log_replay_ops *ops, void *ctx, uint64_t *valid_end,
                   const char **why) {
    uint64_t at = LOG_HEADER_BYTES;
    *why = NULL;
    while (at < size) {
        log_record rec;
        if (!record_at(file, size, at, &rec, why)) {
            /* A zeroed header is the writer's preallocated space (or a
             * write the crash left unpersisted): whatever follows was
             * never acknowledged, so it is the tail, not damage. */
            if (size - at >= LOG_RECORD_HEADER_BYTES &&
                all_zero(file + at, LOG_RECORD_HEADER_BYTES))
                break;
            uint64_t next = resync(file, size, at);
            if (next == size)
                break; /* the tail */
            OSP_LOG_ERROR("queue log %s: %s at byte %llu; skipped %llu "
                          "damaged bytes to the next intact record (kept "
                          "in %s.damaged)",
                          log->path, *why, (unsigned long long)at,
                          (unsigned long long)(next - at), log->path);
            save_damaged_bytes(log, file + at, (size_t)(next - at));
            log->stats.lost_records++;
            log->stats.damaged_bytes += next - at;
            *why = NULL;
            at = next;
            continue;
        }
        uint32_t payload = get_u32(file + at);
        switch (rec.type) {
        case LOG_PUT: {
            osp_queue_item *item = record_item(&rec);
            if (item == NULL) {
                *why = "out of memory while loading";
                goto out;
            }
            ops->put(ctx, rec.queue, item);
            break;
        }
        case LOG_DELETE: {
            uint64_t *indexes =
                malloc((rec.n_indexes ? rec.n_indexes : 1) * sizeof *indexes);
            if (indexes == NULL) {
                *why = "out of memory while loading";
                goto out;
            }
            for (uint32_t i = 0; i < rec.n_indexes; i++)
                indexes[i] = get_u64(rec.indexes + 8 * (size_t)i);
            ops->delete_items(ctx, rec.queue, indexes, rec.n_indexes);
            free(indexes);
            break;
        }
        case LOG_TRUNCATE:
            ops->truncate(ctx, rec.queue, rec.before);
            break;
        case LOG_STATE:
            ops->state(ctx, rec.queue, rec.next_index, rec.ended);
            break;
        }
        mirror_apply(&log->mirror, &rec, at, LOG_RECORD_HEADER_BYTES + payload);
        at += LOG_RECORD_HEADER_BYTES + payload;
    }
out:
    *valid_end = at;
}

static osp_error *write_header(queue_log *log) {
    uint8_t header[LOG_HEADER_BYTES] = {0};
    memcpy(header, LOG_MAGIC, 8);
    put_u32(header + 8, LOG_VERSION);
    if (ftruncate(log->fd, 0) != 0 ||
        !write_all(log->fd, header, sizeof header, 0) ||
        !sync_file(log, log->fd) || !sync_file(log, log->dir_fd))
        return errno_error("cannot initialise", log->path);
    log->file_size = LOG_HEADER_BYTES;
    log->alloc_size = LOG_HEADER_BYTES;
    return NULL;
}


/* Reads the file at open: header checks, replay, and the cut. */
static osp_error *recover(queue_log *log, const log_replay_ops *ops,
                          void *ctx) {
    struct stat st;
    if (fstat(log->fd, &st) != 0)
        return errno_error("cannot stat", log->path);
    uint64_t size = (uint64_t)st.st_size;
    if (size < LOG_HEADER_BYTES) {
        /* New, or torn while it was being created: only a prefix of our
         * own header may be there. */
        uint8_t head[LOG_HEADER_BYTES] = {0};
        if (size > 0 && !read_all(log->fd, head, (size_t)size, 0))
            return errno_error("cannot read", log->path);
        uint8_t want[LOG_HEADER_BYTES] = {0};
        memcpy(want, LOG_MAGIC, 8);
        put_u32(want + 8, LOG_VERSION);
        if (memcmp(head, want, (size_t)size) != 0)
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "queue log %s: not an Osprey queue log",
                                 log->path);
        return write_header(log);
    }
    uint8_t *file =
        mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, log->fd, 0);
    if (file == MAP_FAILED)
        return errno_error("cannot map", log->path);
    if (memcmp(file, LOG_MAGIC, 8) != 0 || get_u32(file + 8) != LOG_VERSION) {
        munmap(file, (size_t)size);
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "queue log %s: not an Osprey queue log of "
                             "version %u",
                             log->path, LOG_VERSION);
    }
    uint64_t valid_end = 0;
    const char *why = NULL;
    replay(log, file, size, ops, ctx, &valid_end, &why);
    osp_error *err = NULL;
    log->alloc_size = size;
    if (valid_end < size && all_zero(file + valid_end, size - valid_end)) {
        /* The writer's zeros after the last record: the clean end of a log
         * that was not closed cleanly (a zeroed record header never
         * checks). Kept for the next records. */
    } else if (valid_end < size) {
        OSP_LOG_ERROR("queue log %s: %s at byte %llu of %llu; cutting the "
                      "last %llu bytes (kept in %s.cut)",
                      log->path, why ? why : "an unreadable record",
                      (unsigned long long)valid_end, (unsigned long long)size,
                      (unsigned long long)(size - valid_end), log->path);
        save_cut_bytes(log, file + valid_end, (size_t)(size - valid_end));
        if (ftruncate(log->fd, (off_t)valid_end) != 0 ||
            !sync_file(log, log->fd))
            err = errno_error("cannot cut", log->path);
        log->stats.cut_bytes = size - valid_end;
        log->alloc_size = valid_end;
    }
    munmap(file, (size_t)size);
    log->file_size = valid_end;
    return err;
}

osp_error *queue_log_open(const char *dir, osp_queue_fsync fsync_policy,
                          const log_replay_ops *ops, void *ctx,
                          queue_log **out) {
    osp_error *err = make_dirs(dir);
    if (err != NULL)
        return err;
    queue_log *log = calloc(1, sizeof *log);
    if (log == NULL)
        return osp_error_out_of_memory();
    log->fd = log->dir_fd = log->lock_fd = -1;
    log->policy = fsync_policy;
    log->compact_min_bytes = LOG_DEFAULT_COMPACT_MIN_BYTES;
    pthread_mutex_init(&log->mu, NULL);
    pthread_cond_init(&log->wake, NULL);
    pthread_cond_init(&log->done, NULL);
    char *lock_path = NULL, *tmp = NULL;
    log->dir = strdup(dir);
    if (log->dir == NULL || asprintf(&log->path, "%s/queue.log", dir) < 0 ||
        asprintf(&lock_path, "%s/LOCK", dir) < 0 ||
        asprintf(&tmp, "%s/queue.log.compact", dir) < 0) {
        log->path = NULL;
        err = osp_error_out_of_memory();
        goto out;
    }
    log->lock_fd = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (log->lock_fd < 0) {
        err = errno_error("cannot open", lock_path);
        goto out;
    }
    if (flock(log->lock_fd, LOCK_EX | LOCK_NB) != 0) {
        err = osp_error_new(OSP_ERROR_UNAVAILABLE,
                            "queue store %s is in use by another store "
                            "(%s is locked)",
                            dir, lock_path);
        goto out;
    }
    unlink(tmp); /* a compaction that a crash interrupted */
    log->dir_fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (log->dir_fd < 0) {
        err = errno_error("cannot open directory", dir);
        goto out;
    }
    log->fd = open(log->path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (log->fd < 0) {
        err = errno_error("cannot open", log->path);
        goto out;
    }
    err = recover(log, ops, ctx);
    if (err == NULL && log->stats.damaged_bytes > 0)
        err = writer_compact(log); /* the damaged bytes leave the log */
    if (err != NULL)
        goto out;
    log->stats.file_bytes = log->file_size;
    log->stats.live_bytes = log->mirror.live_bytes;
    if (pthread_create(&log->writer, NULL, writer_main, log) != 0) {
        err = osp_error_new(OSP_ERROR_UNAVAILABLE,
                            "queue log: cannot start the writer thread");
        goto out;
    }
    log->writer_started = true;
out:
    free(lock_path);
    free(tmp);
    if (err != NULL) {
        queue_log_free(log);
        return err;
    }
    *out = log;
    return NULL;
}

void queue_log_free(queue_log *log) {
    if (log == NULL)
        return;
    if (log->writer_started) {
        pthread_mutex_lock(&log->mu);
        log->closing = true;
        pthread_cond_signal(&log->wake);
        pthread_mutex_unlock(&log->mu);
        pthread_join(log->writer, NULL);
    }
    /* A clean close leaves no zeros after the records. */
    if (log->fd >= 0 && log->alloc_size > log->file_size &&
        ftruncate(log->fd, (off_t)log->file_size) == 0)
        sync_file(log, log->fd);
    if (log->fd >= 0)
        close(log->fd);
    if (log->dir_fd >= 0)
        close(log->dir_fd);
    if (log->lock_fd >= 0)
        close(log->lock_fd); /* releases the flock */
    mirror_free(&log->mirror);
    osp_error_free(log->failed);
    osp_error_free(log->compact_result);
    pthread_mutex_destroy(&log->mu);
    pthread_cond_destroy(&log->wake);
    pthread_cond_destroy(&log->done);
    free(log->buf);
    free(log->wbuf);
    free(log->dir);
    free(log->path);
    free(log);
}

void queue_log_get_stats(queue_log *log, queue_log_stats *out) {
    pthread_mutex_lock(&log->mu);
    *out = log->stats;
    pthread_mutex_unlock(&log->mu);
}

void queue_log_set_compact_min_bytes(queue_log *log, uint64_t min_bytes) {
    pthread_mutex_lock(&log->mu);
    log->compact_min_bytes = min_bytes;
    pthread_mutex_unlock(&log->mu);
}

osp_error *queue_log_compact(queue_log *log) {
    pthread_mutex_lock(&log->mu);
    uint64_t generation = log->compact_generation;
    log->compact_requested = true;
    pthread_cond_signal(&log->wake);
    while (log->compact_generation == generation)
        pthread_cond_wait(&log->done, &log->mu);
    osp_error *err = log->compact_result;
    log->compact_result = NULL;
    pthread_mutex_unlock(&log->mu);
    return err;
}
