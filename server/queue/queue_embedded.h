/*
 * The embedded store's internals that tests and measurements reach for
 * (queue_embedded.c). The server itself only uses include/osprey/queue.h.
 */
#pragma once

#include "queue_log.h"
#include "queue_store_impl.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The log of an embedded store (stats, compaction hooks); NULL for a store
 * of another kind. Borrowed; valid until osp_queue_store_free. */
queue_log *queue_embedded_log(osp_queue_store *store);

#ifdef __cplusplus
}
#endif
