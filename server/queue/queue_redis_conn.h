/*
 * One connection to the Redis server behind the Redis Streams queue store
 * (queue_redis.c): the redis:// URL, connecting with a timeout, reconnecting
 * with a backoff after the server went away, running one command or one of
 * the store's Lua scripts (queue_redis_scripts.h), and the checks every
 * reply goes through before use.
 *
 * A redis_conn is used by one thread at a time (each store thread owns
 * one); nothing here locks. Every failure to reach Redis is an
 * OSP_ERROR_UNAVAILABLE error "queue store unavailable: ..."; while the
 * backoff runs, commands fail at once with the last reason instead of
 * waiting for another connect timeout.
 */
#pragma once

#include <hiredis/hiredis.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "osprey/error.h"
#include "queue_redis_scripts.h"

/* What a redis:// URL says. */
typedef struct redis_url {
    char host[256];
    int port;
    int db;
    /* ?claim_idle_ms=N: how long a pending item's consumer must have been
     * silent before another consumer of its group claims it (default the
     * store's consumer grace period, 10 s; tests make it short). */
    uint64_t claim_idle_ms;
    bool claim_idle_ms_given;
    /* ?prefix=P: the first part of every key and channel (default
     * "osprey"), so that several deployments can share one Redis. */
    char prefix[64];
    /* redis://USER:PASSWORD@HOST... (percent-decoded), or the store
     * options' password: sent with AUTH on every (re)connect, never
     * logged. USER may be empty (Redis's requirepass). */
    char user[128];
    char password[512];
    bool has_password;
} redis_url;

/* Parses "redis://[USER:PASSWORD@]HOST:PORT[/DB][?claim_idle_ms=N&prefix=P]"
 * (borrowed) into *out. INVALID_ARG naming what is wrong (never the
 * password). */
osp_error *redis_url_parse(const char *url, redis_url *out);

typedef struct redis_conn {
    const redis_url *url;         /* borrowed from the store */
    redisContext *ctx;            /* NULL while disconnected */
    uint64_t retry_at_ns;         /* no connect attempt before this (backoff) */
    uint64_t backoff_ns;          /* the next wait after a failure */
    char last_error[192];         /* why the last attempt failed */
    char shas[REDIS_SCRIPTS][41]; /* loaded on every connect */
    bool subscriber; /* SUBSCRIBE connection: no scripts, no timeout */
    bool auth_refused; /* the last connect's AUTH was answered an error */
} redis_conn;

/* A disconnected connection to url (borrowed; must outlive it). */
void redis_conn_init(redis_conn *conn, const redis_url *url, bool subscriber);
/* Closes the socket. */
void redis_conn_destroy(redis_conn *conn);

/* Connects (SELECT db, SCRIPT LOAD every script) unless connected.
 * UNAVAILABLE while Redis cannot be reached or the backoff runs. */
osp_error *redis_conn_ensure(redis_conn *conn);
/* Drops the socket after an I/O or protocol failure and starts the
 * backoff; the next call reconnects. `why` borrowed. */
void redis_conn_fail(redis_conn *conn, const char *why);

/* Arguments of one command, built up piece by piece. Pieces added with
 * redis_args_add are borrowed (they must outlive the call); formatted
 * pieces are owned. */
typedef struct redis_args {
    int argc;
    int cap;
    const char **argv;
    size_t *lens;
    char **owned;
    int n_owned;
    bool failed; /* out of memory: the command is not sent */
} redis_args;

void redis_args_init(redis_args *args);
void redis_args_destroy(redis_args *args);
void redis_args_add(redis_args *args, const void *data, size_t len);
void redis_args_str(redis_args *args, const char *s);
/* Adds an owned copy of len bytes of data (borrowed). */
void redis_args_copy(redis_args *args, const void *data, size_t len);
void redis_args_fmt(redis_args *args, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Runs one command. On success *out is the reply (caller owns it; free
 * with freeReplyObject); an error reply from Redis becomes INTERNAL with
 * Redis' text, unless allow_error_reply, when it is handed back as is.
 * UNAVAILABLE when Redis cannot be reached (the connection is dropped). */
osp_error *redis_conn_command(redis_conn *conn, redis_args *args,
                              bool allow_error_reply, redisReply **out);
/* Runs script `id` with args (its KEYS count first: the args hold
 * numkeys, keys..., argv... after EVALSHA sha, which this adds); reloads
 * the script once when Redis lost it (NOSCRIPT). Same results as
 * redis_conn_command; an error raised by the script is INTERNAL. */
osp_error *redis_conn_script(redis_conn *conn, redis_script id,
                             redis_args *args, redisReply **out);

/* The most calls redis_conn_script_pipeline takes at once. */
#define REDIS_PIPELINE_MAX 32
/* Runs script `id` once for each of args[0..n) (borrowed; each as
 * redis_conn_script takes them), pipelined: every call is sent, then every
 * reply read, so n calls cost one round trip instead of n. For each i,
 * out[i] is call i's reply or errs[i] its error (the caller owns both;
 * the other is NULL), as redis_conn_script would answer: a lost
 * connection fails the calls whose replies did not come (UNAVAILABLE), a
 * call that met NOSCRIPT is run again alone. n <= REDIS_PIPELINE_MAX. */
void redis_conn_script_pipeline(redis_conn *conn, redis_script id,
                                redis_args *const *args, size_t n,
                                redisReply **out, osp_error **errs);

/* ---- reply checks: true when the reply has that shape ---- */
bool redis_reply_is_array(const redisReply *r, size_t min_elements);
bool redis_reply_is_string(const redisReply *r);
/* An integer reply, or a string holding a decimal integer, into *out. */
bool redis_reply_int(const redisReply *r, long long *out);
/* The string reply as a NUL-terminated copy into buf of cap bytes; false
 * when it is not a string or does not fit. */
bool redis_reply_copy(const redisReply *r, char *buf, size_t cap);
/* true when r is a string equal to s. */
bool redis_reply_equals(const redisReply *r, const char *s);
