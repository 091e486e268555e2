/*
 * The redis response cache's connections to Redis (Triton's pool_size,
 * wait_timeout, connect_timeout, socket_timeout): a fixed pool; a command
 * takes a free connection (waiting up to wait_timeout), connects it when
 * it has no socket (connect_timeout, then AUTH and SELECT), and runs with
 * socket_timeout per reply.
 *
 * Outages: the first failure to reach Redis (refused, timed out, closed)
 * starts one; it is logged once, every pooled socket is dropped, and
 * commands fail at once, without touching the network, until a backoff
 * (100 ms doubling to 2 s) lets one command try again. The first command
 * that gets through ends it (logged once). So a request never waits on a
 * Redis known to be down, and never past the timeouts on one that is not.
 *
 * Thread-safe. The password is sent with AUTH and never logged.
 */
#pragma once

#include <hiredis/hiredis.h>
#include <stdbool.h>
#include <stddef.h>

#include "osprey/error.h"
#include "osprey/server.h"

typedef struct redis_pool redis_pool;

/* A pool for opts (borrowed; copied), not yet connected. INVALID_ARG for
 * a missing host, a port outside 1..65535, a pool_size below 1 or a
 * negative db. Caller owns *out. */
osp_error *redis_pool_new(const osp_redis_cache_options *opts,
                          redis_pool **out);
/* Closes every socket. No command may be running. */
void redis_pool_free(redis_pool *pool);

typedef enum redis_pool_result {
    REDIS_POOL_OK,          /* *reply is Redis' answer (maybe an error one) */
    REDIS_POOL_UNAVAILABLE, /* tried, and not reached in time */
    REDIS_POOL_DOWN,        /* in an outage's backoff: nothing was sent */
    REDIS_POOL_BUSY,        /* no connection free within wait_timeout */
} redis_pool_result;

/* Runs one command of argc pieces (argv/lens borrowed). On REDIS_POOL_OK
 * the caller owns *reply (freeReplyObject); otherwise `why` (cap bytes)
 * says what happened. A socket found closed on a connection that served
 * before (Redis' idle timeout) is reconnected and the command sent once
 * more before that counts as an outage. */
redis_pool_result redis_pool_command(redis_pool *pool, int argc,
                                     const char **argv, const size_t *lens,
                                     redisReply **reply, char *why, size_t cap);

/* "HOST:PORT" of the pool's Redis, for messages. Borrowed. */
const char *redis_pool_address(const redis_pool *pool);
