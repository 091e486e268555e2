/*
 * The settings of Triton's redis response cache, as --cache-config gives
 * them: "redis,KEY=VALUE", repeatable, as Triton's
 * (--cache-config redis,host=H --cache-config redis,port=P), and, as a
 * shorthand Triton does not have, several at once
 * (--cache-config=redis,host=H,port=P): a comma starts a new setting only
 * where a known key and '=' follow it, so other commas stay in a value.
 *
 * Keys and defaults are Triton's: host and port (required), user
 * ("default"), password, db (0), connect_timeout and socket_timeout (ms,
 * 0 = no limit), pool_size (1), wait_timeout (ms, 1000; 0 = no limit),
 * tls_enabled with cert, key, cacert, cacert_dir and sni. User and
 * password may come from TRITONCACHE_REDIS_USERNAME and
 * TRITONCACHE_REDIS_PASSWORD instead; a key given on the command line
 * wins. No message ever shows the password.
 */
#pragma once

#include <stdbool.h>

#include "osprey/server.h"

typedef struct redis_cache_config {
    /* What osp_server_options.redis_cache points at; its strings are the
     * owned copies below. */
    osp_redis_cache_options opts;
    char *host, *user, *password;
    bool host_given, port_given;
    bool tls_enabled;
} redis_cache_config;

/* Triton's defaults. */
void redis_cache_config_init(redis_cache_config *c);
void redis_cache_config_destroy(redis_cache_config *c);

/* Applies the settings of one --cache-config after "redis," (borrowed).
 * False after printing what is wrong to stderr. */
bool redis_cache_config_apply(redis_cache_config *c, const char *settings);

/* After every flag: the required keys, the environment's user and
 * password, and the refusal of TLS where hiredis has none. False after
 * printing why. */
bool redis_cache_config_finish(redis_cache_config *c);
