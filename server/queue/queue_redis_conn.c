/*
 * Redis connections of the Redis Streams queue store: URL parsing,
 * connect/reconnect with backoff, commands and scripts, reply checks
 * (queue_redis_conn.h).
 */
#define _GNU_SOURCE /* vasprintf */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "osprey/clock.h"
#include "queue_redis_conn.h"
#include "queue_store_impl.h"

#define CONNECT_TIMEOUT_MS 1000
/* A command that takes longer means Redis is stuck: the connection is
 * dropped and the call fails as UNAVAILABLE. */
#define COMMAND_TIMEOUT_MS 5000
#define BACKOFF_FIRST_NS (100ull * 1000 * 1000)
#define BACKOFF_MAX_NS (2000ull * 1000 * 1000)

/* Reads a decimal in [min, max] from s up to (not including) end. */
static bool parse_uint_range(const char *s, const char *end, long long min,
                             long long max, long long *out) {
    if (s == end || end - s > 18)
        return false;
    long long v = 0;
    for (const char *p = s; p < end; p++) {
        if (*p < '0' || *p > '9')
            return false;
        v = v * 10 + (*p - '0');
    }
    if (v < min || v > max)
        return false;
    *out = v;
    return true;
}

/* Applies one "key=value" of the URL's query (not NUL-terminated). */
static osp_error *url_apply_param(const char *p, const char *end,
                                  redis_url *out) {
    const char *eq = memchr(p, '=', (size_t)(end - p));
    if (eq == NULL)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "redis URL parameter '%.*s' has no value",
                             (int)(end - p), p);
    size_t klen = (size_t)(eq - p);
    const char *v = eq + 1;
    long long n;
    if (klen == 13 && memcmp(p, "claim_idle_ms", 13) == 0) {
        if (!parse_uint_range(v, end, 1, 86400000, &n))
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "redis URL: claim_idle_ms is 1 to 86400000");
        out->claim_idle_ms = (uint64_t)n;
        out->claim_idle_ms_given = true;
        return NULL;
    }
    if (klen == 6 && memcmp(p, "prefix", 6) == 0) {
        size_t vlen = (size_t)(end - v);
        if (vlen == 0 || vlen >= sizeof out->prefix)
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "redis URL: prefix is 1 to %zu bytes",
                                 sizeof out->prefix - 1);
        memcpy(out->prefix, v, vlen);
        out->prefix[vlen] = '\0';
        return NULL;
    }
    return osp_error_new(OSP_ERROR_INVALID_ARG,
                         "unknown redis URL parameter '%.*s' (expected "
                         "claim_idle_ms or prefix)",
                         (int)klen, p);
}

/* Percent-decodes src[0..n) into dst (cap bytes with the NUL); false
 * when it does not fit or an escape is malformed. */
static int hex_value(char c) {
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

static bool percent_decode(const char *src, size_t n, char *dst, size_t cap) {
    size_t w = 0;
    for (size_t i = 0; i < n; i++) {
        char c = src[i];
        if (c == '%') {
            if (n - i < 3 || hex_value(src[i + 1]) < 0 ||
                hex_value(src[i + 2]) < 0)
                return false;
            c = (char)(hex_value(src[i + 1]) * 16 + hex_value(src[i + 2]));
            i += 2;
        }
        if (w + 1 >= cap)
            return false;
        dst[w++] = c;
    }
    dst[w] = '\0';
    return true;
}

osp_error *redis_url_parse(const char *url, redis_url *out) {
    memset(out, 0, sizeof *out);
    out->claim_idle_ms = QUEUE_CONSUMER_GRACE_NS / 1000000;
    strcpy(out->prefix, "osprey");
    if (strncmp(url, "redis://", 8) != 0)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "a Redis queue store URL starts with redis://");
    const char *host = url + 8;
    /* USER:PASSWORD@ before the host; the messages below show the URL
     * from the host on, so no password reaches a log. */
    const char *at = strchr(host, '@');
    if (at != NULL) {
        const char *colon = memchr(host, ':', (size_t)(at - host));
        if (colon == NULL ||
            !percent_decode(host, (size_t)(colon - host), out->user,
                            sizeof out->user) ||
            !percent_decode(colon + 1, (size_t)(at - colon - 1), out->password,
                            sizeof out->password))
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "redis URL: the part before '@' is "
                                 "USER:PASSWORD (percent-encoded; USER may "
                                 "be empty)");
        out->has_password = true;
        host = at + 1;
        url = host; /* what the messages below show */
    }
    const char *query = strchr(host, '?');
    const char *end = query != NULL ? query : host + strlen(host);
    const char *slash = memchr(host, '/', (size_t)(end - host));
    const char *hp_end = slash != NULL ? slash : end;
    /* The last ':' separates the port ([::1] keeps its colons). */
    const char *colon = NULL;
    for (const char *p = host; p < hp_end; p++)
        if (*p == ':')
            colon = p;
    if (colon == NULL || colon == host)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "redis URL '%s': expected redis://HOST:PORT[/DB]",
                             url);
    const char *h = host, *h_end = colon;
    if (*h == '[' && h_end > h + 1 && h_end[-1] == ']') {
        h++;
        h_end--;
    }
    if ((size_t)(h_end - h) >= sizeof out->host)
        return osp_error_new(OSP_ERROR_INVALID_ARG, "redis URL: host too long");
    memcpy(out->host, h, (size_t)(h_end - h));
    out->host[h_end - h] = '\0';
    long long n;
    if (!parse_uint_range(colon + 1, hp_end, 1, 65535, &n))
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "redis URL '%s': the port is 1 to 65535", url);
    out->port = (int)n;
    if (slash != NULL && slash + 1 < end) {
        if (!parse_uint_range(slash + 1, end, 0, 65535, &n))
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "redis URL '%s': the database is a number",
                                 url);
        out->db = (int)n;
    }
    if (query != NULL) {
        const char *p = query + 1;
        while (*p != '\0') {
            const char *amp = strchr(p, '&');
            const char *pend = amp != NULL ? amp : p + strlen(p);
            if (pend > p) {
                osp_error *err = url_apply_param(p, pend, out);
                if (err != NULL)
                    return err;
            }
            p = amp != NULL ? amp + 1 : pend;
        }
    }
    return NULL;
}

void redis_conn_init(redis_conn *conn, const redis_url *url, bool subscriber) {
    memset(conn, 0, sizeof *conn);
    conn->url = url;
    conn->subscriber = subscriber;
    conn->backoff_ns = BACKOFF_FIRST_NS;
}

void redis_conn_destroy(redis_conn *conn) {
    if (conn->ctx != NULL)
        redisFree(conn->ctx);
    conn->ctx = NULL;
}

void redis_conn_fail(redis_conn *conn, const char *why) {
    snprintf(conn->last_error, sizeof conn->last_error, "%s", why);
    if (conn->ctx != NULL)
        redisFree(conn->ctx);
    conn->ctx = NULL;
    conn->retry_at_ns = osp_now_ns() + conn->backoff_ns;
    conn->backoff_ns *= 2;
    if (conn->backoff_ns > BACKOFF_MAX_NS)
        conn->backoff_ns = BACKOFF_MAX_NS;
}

static osp_error *unavailable(const redis_conn *conn) {
    return osp_error_new(OSP_ERROR_UNAVAILABLE,
                         "queue store unavailable: redis %s:%d: %s",
                         conn->url->host, conn->url->port, conn->last_error);
}

/* One command on a context being set up; false (and conn failed) unless
 * the reply is not an error. Caller owns *out when given. */
static bool setup_command(redis_conn *conn, redis_args *args,
                          redisReply **out) {
    redisReply *r = args->failed ? NULL
                                 : redisCommandArgv(conn->ctx, args->argc,
                                                    args->argv, args->lens);
    if (r == NULL) {
        redis_conn_fail(conn,
                        conn->ctx->err ? conn->ctx->errstr : "out of memory");
        return false;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        char why[160];
        snprintf(why, sizeof why, "%.*s", (int)r->len, r->str);
        freeReplyObject(r);
        redis_conn_fail(conn, why);
        return false;
    }
    if (out != NULL)
        *out = r;
    else
        freeReplyObject(r);
    return true;
}

static bool load_scripts(redis_conn *conn) {
    for (int i = 0; i < REDIS_SCRIPTS; i++) {
        redis_args a;
        redis_args_init(&a);
        redis_args_str(&a, "SCRIPT");
        redis_args_str(&a, "LOAD");
        redis_args_str(&a, redis_script_source((redis_script)i));
        redisReply *r = NULL;
        bool ok = setup_command(conn, &a, &r);
        redis_args_destroy(&a);
        if (!ok)
            return false;
        bool copied = redis_reply_copy(r, conn->shas[i], sizeof conn->shas[i]);
        freeReplyObject(r);
        if (!copied) {
            redis_conn_fail(conn, "SCRIPT LOAD answered no SHA1");
            return false;
        }
    }
    return true;
}

osp_error *redis_conn_ensure(redis_conn *conn) {
    if (conn->ctx != NULL)
        return NULL;
    if (osp_now_ns() < conn->retry_at_ns)
        return unavailable(conn);
    struct timeval tv = {.tv_sec = CONNECT_TIMEOUT_MS / 1000,
                         .tv_usec = (CONNECT_TIMEOUT_MS % 1000) * 1000};
    conn->ctx = redisConnectWithTimeout(conn->url->host, conn->url->port, tv);
    if (conn->ctx == NULL) {
        redis_conn_fail(conn, "out of memory");
        return unavailable(conn);
    }
    if (conn->ctx->err) {
        char why[160];
        snprintf(why, sizeof why, "%s", conn->ctx->errstr);
        redis_conn_fail(conn, why);
        return unavailable(conn);
    }
    if (!conn->subscriber) {
        struct timeval ct = {.tv_sec = COMMAND_TIMEOUT_MS / 1000,
                             .tv_usec = (COMMAND_TIMEOUT_MS % 1000) * 1000};
        redisSetTimeout(conn->ctx, ct);
    }
    redisEnableKeepAlive(conn->ctx);
    conn->auth_refused = false;
    if (conn->url->has_password) {
        redis_args a;
        redis_args_init(&a);
        redis_args_str(&a, "AUTH");
        if (conn->url->user[0])
            redis_args_str(&a, conn->url->user);
        redis_args_str(&a, conn->url->password);
        bool ok = setup_command(conn, &a, NULL);
        redis_args_destroy(&a);
        if (!ok) {
            conn->auth_refused = true;
            return unavailable(conn);
        }
    }
    if (conn->url->db != 0) {
        redis_args a;
        redis_args_init(&a);
        redis_args_str(&a, "SELECT");
        redis_args_fmt(&a, "%d", conn->url->db);
        bool ok = setup_command(conn, &a, NULL);
        redis_args_destroy(&a);
        if (!ok)
            return unavailable(conn);
    }
    if (!conn->subscriber && !load_scripts(conn))
        return unavailable(conn);
    conn->backoff_ns = BACKOFF_FIRST_NS;
    conn->last_error[0] = '\0';
    return NULL;
}

void redis_args_init(redis_args *args) {
    memset(args, 0, sizeof *args);
}

void redis_args_destroy(redis_args *args) {
    for (int i = 0; i < args->n_owned; i++)
        free(args->owned[i]);
    free(args->owned);
    free(args->argv);
    free(args->lens);
    memset(args, 0, sizeof *args);
}

void redis_args_add(redis_args *args, const void *data, size_t len) {
    if (args->failed)
        return;
    if (args->argc == args->cap) {
        int cap = args->cap ? args->cap * 2 : 16;
        const char **argv = realloc(args->argv, (size_t)cap * sizeof *argv);
        if (argv != NULL)
            args->argv = argv;
        size_t *lens = realloc(args->lens, (size_t)cap * sizeof *lens);
        if (lens != NULL)
            args->lens = lens;
        if (argv == NULL || lens == NULL) {
            args->failed = true;
            return;
        }
        args->cap = cap;
    }
    args->argv[args->argc] = data != NULL ? data : "";
    args->lens[args->argc] = len;
    args->argc++;
}

void redis_args_str(redis_args *args, const char *s) {
    redis_args_add(args, s, strlen(s));
}

/* Takes ownership of s (freed on failure too). */
static bool args_own(redis_args *args, char *s) {
    char **owned =
        realloc(args->owned, (size_t)(args->n_owned + 1) * sizeof *owned);
    if (owned == NULL) {
        free(s);
        args->failed = true;
        return false;
    }
    args->owned = owned;
    args->owned[args->n_owned++] = s;
    return true;
}

void redis_args_copy(redis_args *args, const void *data, size_t len) {
    if (args->failed)
        return;
    char *copy = malloc(len > 0 ? len : 1);
    if (copy == NULL) {
        args->failed = true;
        return;
    }
    if (len > 0)
        memcpy(copy, data, len);
    if (args_own(args, copy))
        redis_args_add(args, copy, len);
}

void redis_args_fmt(redis_args *args, const char *fmt, ...) {
    if (args->failed)
        return;
    va_list ap;
    va_start(ap, fmt);
    char *s = NULL;
    int len = vasprintf(&s, fmt, ap);
    va_end(ap);
    if (len < 0) {
        args->failed = true;
        return;
    }
    if (args_own(args, s))
        redis_args_add(args, s, (size_t)len);
}

static bool reply_starts_with(const redisReply *r, const char *prefix) {
    size_t n = strlen(prefix);
    return r->str != NULL && r->len >= n && memcmp(r->str, prefix, n) == 0;
}

/* Drops the connection after hiredis reported an I/O failure. */
static void io_failed(redis_conn *conn) {
    char why[160];
    snprintf(why, sizeof why, "%s",
             conn->ctx->err == REDIS_ERR_EOF ? "connection closed by the server"
             : conn->ctx->errstr[0]          ? conn->ctx->errstr
                                             : "connection lost");
    redis_conn_fail(conn, why);
}

/* Sends args and reads one reply; NULL (and the connection dropped) on an
 * I/O failure. */
static redisReply *roundtrip(redis_conn *conn, redis_args *args) {
    redisReply *r =
        redisCommandArgv(conn->ctx, args->argc, args->argv, args->lens);
    if (r == NULL)
        io_failed(conn);
    return r;
}

osp_error *redis_conn_command(redis_conn *conn, redis_args *args,
                              bool allow_error_reply, redisReply **out) {
    if (args->failed)
        return osp_error_out_of_memory();
    osp_error *err = redis_conn_ensure(conn);
    if (err != NULL)
        return err;
    redisReply *r = roundtrip(conn, args);
    if (r == NULL)
        return unavailable(conn);
    if (r->type == REDIS_REPLY_ERROR && !allow_error_reply) {
        /* A Redis that is loading its data or read-only is unavailable for
         * now, not broken. */
        bool transient = reply_starts_with(r, "LOADING") ||
                         reply_starts_with(r, "READONLY") ||
                         reply_starts_with(r, "MASTERDOWN");
        err = osp_error_new(
            transient ? OSP_ERROR_UNAVAILABLE : OSP_ERROR_INTERNAL,
            "%sredis: %.*s", transient ? "queue store unavailable: " : "",
            (int)(r->len > 300 ? 300 : r->len), r->str);
        freeReplyObject(r);
        return err;
    }
    *out = r;
    return NULL;
}

/* The error of a script's error reply r (which stays the caller's). */
static osp_error *script_error(redis_script id, const redisReply *r) {
    bool transient =
        reply_starts_with(r, "LOADING") || reply_starts_with(r, "BUSY");
    return osp_error_new(
        transient ? OSP_ERROR_UNAVAILABLE : OSP_ERROR_INTERNAL,
        "%sredis script %s: %.*s", transient ? "queue store unavailable: " : "",
        redis_script_name(id), (int)(r->len > 300 ? 300 : r->len), r->str);
}

/* EVALSHA sha, then args' pieces (borrowed), into full. */
static void script_args(redis_conn *conn, redis_script id,
                        const redis_args *args, redis_args *full) {
    redis_args_init(full);
    redis_args_str(full, "EVALSHA");
    redis_args_str(full, conn->shas[id]);
    for (int i = 0; i < args->argc; i++)
        redis_args_add(full, args->argv[i], args->lens[i]);
}

osp_error *redis_conn_script(redis_conn *conn, redis_script id,
                             redis_args *args, redisReply **out) {
    if (args->failed)
        return osp_error_out_of_memory();
    for (int attempt = 0;; attempt++) {
        osp_error *err = redis_conn_ensure(conn);
        if (err != NULL)
            return err;
        redis_args full;
        script_args(conn, id, args, &full);
        redisReply *r = NULL;
        err = redis_conn_command(conn, &full, true, &r);
        redis_args_destroy(&full);
        if (err != NULL)
            return err;
        if (r->type == REDIS_REPLY_ERROR && reply_starts_with(r, "NOSCRIPT") &&
            attempt == 0) {
            /* Redis restarted or SCRIPT FLUSH: load them all again. */
            freeReplyObject(r);
            if (!load_scripts(conn))
                return unavailable(conn);
            continue;
        }
        if (r->type == REDIS_REPLY_ERROR) {
            err = script_error(id, r);
            freeReplyObject(r);
            return err;
        }
        *out = r;
        return NULL;
    }
}

void redis_conn_script_pipeline(redis_conn *conn, redis_script id,
                                redis_args *const *args, size_t n,
                                redisReply **out, osp_error **errs) {
    bool sent[REDIS_PIPELINE_MAX] = {false};
    bool again[REDIS_PIPELINE_MAX] = {false};
    for (size_t i = 0; i < n; i++) {
        out[i] = NULL;
        errs[i] = NULL;
    }
    osp_error *down = n > REDIS_PIPELINE_MAX
                          ? osp_error_new(OSP_ERROR_INTERNAL,
                                          "redis pipeline of %zu calls", n)
                          : redis_conn_ensure(conn);
    if (down != NULL) {
        for (size_t i = 0; i < n; i++)
            errs[i] = i == 0 ? down
                             : osp_error_new(osp_error_get_code(down), "%s",
                                             osp_error_message(down));
        return;
    }
    /* Everything goes into hiredis' output buffer, then out in one write
     * with the first read. */
    for (size_t i = 0; i < n; i++) {
        redis_args full;
        script_args(conn, id, args[i], &full);
        if (args[i]->failed || full.failed ||
            redisAppendCommandArgv(conn->ctx, full.argc, full.argv,
                                   full.lens) != REDIS_OK)
            errs[i] = osp_error_out_of_memory();
        else
            sent[i] = true;
        redis_args_destroy(&full);
    }
    for (size_t i = 0; i < n; i++) {
        if (!sent[i])
            continue;
        void *reply = NULL;
        if (conn->ctx == NULL) { /* an earlier reply was lost */
            errs[i] = unavailable(conn);
            continue;
        }
        if (redisGetReply(conn->ctx, &reply) != REDIS_OK || reply == NULL) {
            io_failed(conn);
            errs[i] = unavailable(conn);
            continue;
        }
        redisReply *r = reply;
        if (r->type == REDIS_REPLY_ERROR && reply_starts_with(r, "NOSCRIPT"))
            again[i] = true;
        else if (r->type == REDIS_REPLY_ERROR)
            errs[i] = script_error(id, r);
        else
            out[i] = r;
        if (out[i] == NULL)
            freeReplyObject(r);
    }
    /* Redis lost its scripts (restarted): each such call alone, which
     * loads them again first. */
    for (size_t i = 0; i < n; i++)
        if (again[i])
            errs[i] = redis_conn_script(conn, id, args[i], &out[i]);
}

bool redis_reply_is_array(const redisReply *r, size_t min_elements) {
    return r != NULL && r->type == REDIS_REPLY_ARRAY &&
           r->elements >= min_elements &&
           (r->elements == 0 || r->element != NULL);
}

bool redis_reply_is_string(const redisReply *r) {
    return r != NULL &&
           (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS) &&
           (r->str != NULL || r->len == 0);
}

bool redis_reply_int(const redisReply *r, long long *out) {
    if (r == NULL)
        return false;
    if (r->type == REDIS_REPLY_INTEGER) {
        *out = r->integer;
        return true;
    }
    if (!redis_reply_is_string(r) || r->len == 0 || r->len > 20)
        return false;
    char buf[24];
    memcpy(buf, r->str, r->len);
    buf[r->len] = '\0';
    char *end = NULL;
    errno = 0;
    long long v = strtoll(buf, &end, 10);
    if (errno != 0 || end != buf + r->len)
        return false;
    *out = v;
    return true;
}

bool redis_reply_copy(const redisReply *r, char *buf, size_t cap) {
    if (!redis_reply_is_string(r) || r->len >= cap)
        return false;
    if (r->len > 0)
        memcpy(buf, r->str, r->len);
    buf[r->len] = '\0';
    return true;
}

bool redis_reply_equals(const redisReply *r, const char *s) {
    size_t n = strlen(s);
    return redis_reply_is_string(r) && r->len == n && memcmp(r->str, s, n) == 0;
}
