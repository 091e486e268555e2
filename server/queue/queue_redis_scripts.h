/*
 * The Lua scripts of the Redis Streams queue store: their ids, sources and
 * names. Each script's comment (queue_redis_scripts.c) gives its ARGV and
 * its reply; every script takes KEYS[1] = the queue's key prefix, KEYS[2]
 * = the store's notification channel and ARGV[1] = the queue's name.
 */
#pragma once

typedef enum redis_script {
    REDIS_SCRIPT_PUT,
    REDIS_SCRIPT_GET,
    REDIS_SCRIPT_DELETE,
    REDIS_SCRIPT_TRUNCATE,
    REDIS_SCRIPT_END,
    REDIS_SCRIPT_SEARCH,
    REDIS_SCRIPT_COUNT,
    REDIS_SCRIPT_ATTRS,
    REDIS_SCRIPT_PUMP,
    REDIS_SCRIPT_FORGET,
    REDIS_SCRIPT_REJECT,
    REDIS_SCRIPTS /* how many */
} redis_script;

/* The script's Lua text (static). */
const char *redis_script_source(redis_script id);
/* A short name for messages (static). */
const char *redis_script_name(redis_script id);
