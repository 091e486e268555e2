/*
 * The embedded store's append-only log: one file `queue.log` in the store
 * directory holding every queue's mutations as checksummed records, one
 * writer thread that writes and fsyncs them in batches (group commit), the
 * recovery that replays the file on open (cutting a torn or corrupt tail),
 * and the compaction that rewrites the file when dead records dominate.
 * docs/queue-store.md describes the format and its guarantees.
 *
 * File: a 16-byte header ("OSPQLOG\0", u32 version 1, u32 0), then records:
 *
 *   u32 payload_len | u32 crc32(type, payload) | u8 type | payload
 *
 * all integers little-endian. Payloads start with the queue name (u16
 * length, bytes) and then:
 *   PUT       u64 index, i32 priority, i64 put_unix_ns, u32 n_tags,
 *             n_tags x (u32 len, key, u32 len, value), u32 size, data
 *             (the tags include "requestId", the item's request id)
 *   DELETE    u32 n, n x u64 index
 *   TRUNCATE  u64 before (every index < before is deleted)
 *   STATE     u64 next_index (high-water mark), u8 ended
 *
 * Ordering: records of one queue are appended in the order the queue
 * applied them (the caller appends while holding the queue's lock), and
 * the file is written strictly in append order, so a durable record
 * implies every record appended before it is durable.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "queue_store_impl.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct queue_log queue_log;

/* Record bytes being built for one append. oom or too_large: a record
 * could not be added (the batch must not be appended). */
typedef struct log_batch {
    uint8_t *data;
    size_t len, cap;
    bool oom;
    bool too_large;
} log_batch;

/* Largest payload a record may have; a length read from disk above it (or
 * above what is left of the file) marks the record corrupt. */
#define QUEUE_LOG_MAX_RECORD_BYTES (256u * 1024 * 1024)

void log_batch_init(log_batch *batch);
void log_batch_destroy(log_batch *batch);
void log_batch_put(log_batch *batch, const char *queue,
                   const osp_queue_item *item);
void log_batch_delete(log_batch *batch, const char *queue,
                      const uint64_t *indexes, size_t n);
void log_batch_truncate(log_batch *batch, const char *queue, uint64_t before);
void log_batch_state(log_batch *batch, const char *queue, uint64_t next_index,
                     bool ended);

/* A mutation waiting for the fsync that covers its records. The log calls
 * done once, on the writer thread with no lock held, with NULL or an error
 * the callee owns (the write or fsync failed, or the log closed before
 * writing it). OSP_REASON_STORAGE_FULL: the write found no room (full
 * disk, quota, file size limit); its records are not in the file and the
 * caller must undo the change in memory; the log goes on taking changes.
 * Made and owned by the caller; `next` and `lsn` belong to the log while
 * it waits. */
typedef struct log_waiter {
    struct log_waiter *next;
    uint64_t lsn;
    void (*done)(struct log_waiter *waiter, osp_error *err);
} log_waiter;

/* What recovery found, handed to the store in file order. The strings are
 * borrowed for the call; the put's item moves to the callee. */
typedef struct log_replay_ops {
    void (*put)(void *ctx, const char *queue, osp_queue_item *item);
    void (*delete_items)(void *ctx, const char *queue, const uint64_t *indexes,
                         size_t n);
    void (*truncate)(void *ctx, const char *queue, uint64_t before);
    void (*state)(void *ctx, const char *queue, uint64_t next_index,
                  bool ended);
} log_replay_ops;

/* Opens (creating) `dir`/queue.log, replays it through ops, cuts a torn or
 * corrupt tail (logged, the cut bytes kept in queue.log.cut) and starts
 * the writer. An error when the directory cannot be used, is locked by
 * another process, or holds a file that is not a queue log. Caller owns
 * *out. */
osp_error *queue_log_open(const char *dir, osp_queue_fsync fsync,
                          const log_replay_ops *ops, void *ctx,
                          queue_log **out);
/* Writes what is pending, answers every waiter, stops the writer, frees. */
void queue_log_free(queue_log *log);

/* NULL when an append would be taken (the log is open and has not
 * failed): checked before a mutation is applied in memory. */
osp_error *queue_log_check(queue_log *log);
/* Appends the batch's records and registers the waiters (a chain through
 * `next`, may be NULL): each is answered once every record appended so
 * far is as durable as the fsync policy promises. On error nothing was
 * appended and no waiter registered; the log is then failed for good
 * (the caller's memory already holds the change the log lacks). A write
 * that finds no room does not fail the log (see log_waiter). */
osp_error *queue_log_append(queue_log *log, const log_batch *batch,
                            log_waiter *waiters);

/* Tests and measurements. */
typedef struct queue_log_stats {
    uint64_t file_bytes; /* the file now */
    uint64_t live_bytes; /* records compaction keeps */
    uint64_t fsyncs;
    uint64_t writes;
    uint64_t compactions;
    uint64_t cut_bytes; /* cut at open */
    /* damaged records skipped at open (intact ones after them kept) and
     * their bytes, moved to queue.log.damaged */
    uint64_t lost_records;
    uint64_t damaged_bytes;
    /* writes refused for lack of room (their changes answered
     * OSP_REASON_STORAGE_FULL, nothing of them left in the file) */
    uint64_t no_space_writes;
} queue_log_stats;
void queue_log_get_stats(queue_log *log, queue_log_stats *out);
/* Compaction runs when the file is over min_bytes and dead records are
 * more than half of it (default 16 MiB). */
void queue_log_set_compact_min_bytes(queue_log *log, uint64_t min_bytes);
/* Compacts now (waits for it). */
osp_error *queue_log_compact(queue_log *log);

#ifdef __cplusplus
}
#endif
