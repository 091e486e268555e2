/*
 * Placeholder for the Redis Streams store until its branch lands: opening
 * a redis:// store fails cleanly.
 */
#include "queue_store_impl.h"

osp_error *queue_redis_open(const osp_queue_store_options *opts,
                            osp_queue_store **out) {
    (void)opts;
    (void)out;
    return osp_error_new(OSP_ERROR_UNSUPPORTED,
                         "the Redis queue store is not built yet");
}
