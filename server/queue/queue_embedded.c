/*
 * Temporary stand-in for the embedded store while it is built on its own
 * branch (qembed), so that the Redis store links and is tested; the
 * embedded store's queue_embedded.c replaces this file.
 */
#include "queue_store_impl.h"

osp_error *queue_embedded_open(const osp_queue_store_options *opts,
                               osp_queue_store **out) {
    (void)opts;
    (void)out;
    return osp_error_new(OSP_ERROR_UNSUPPORTED,
                         "the embedded queue store is not built in");
}
