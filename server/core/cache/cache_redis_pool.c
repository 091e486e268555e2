/*
 * The redis response cache's connection pool and outage state
 * (cache_redis_pool.h).
 */
#include "cache_redis_pool.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "cond_deadline.h"
#include "osprey/clock.h"
#include "osprey/log.h"

#define BACKOFF_FIRST_NS (100ull * 1000 * 1000)
#define BACKOFF_MAX_NS (2000ull * 1000 * 1000)
#define MS_NS (1000ull * 1000)

typedef struct pool_conn {
    redisContext *ctx; /* NULL: not connected */
    uint64_t epoch;    /* the pool's epoch when it connected */
    bool served;       /* answered a command since it connected */
} pool_conn;

struct redis_pool {
    char *host, *user, *password; /* owned; user/password NULL: none */
    int port, db;
    uint64_t connect_timeout_ms, socket_timeout_ms, wait_timeout_ms;
    char address[300]; /* "HOST:PORT" */

    pthread_mutex_t lock;
    pthread_cond_t freed; /* a connection went back to the pool */
    pool_conn *conns;
    int *idle; /* stack of free connections' indices */
    int n_conns, n_idle;
    /* Outage state, under lock. An outage bumps the epoch, so that sockets
     * opened before it are dropped instead of failing one by one. */
    bool down;
    uint64_t retry_at_ns, backoff_ns, epoch;
};

static char *dup_or_null(const char *s) {
    return s ? strdup(s) : NULL;
}

osp_error *redis_pool_new(const osp_redis_cache_options *opts,
                          redis_pool **out) {
    if (!opts->host || !opts->host[0])
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "the redis cache needs a host");
    if (opts->port < 1 || opts->port > 65535)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "the redis cache's port is 1 to 65535");
    if (opts->pool_size < 1)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "the redis cache's pool_size is at least 1");
    if (opts->db < 0)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "the redis cache's db is 0 or more");
    redis_pool *p = calloc(1, sizeof(*p));
    if (!p)
        return osp_error_out_of_memory();
    /* Redis' "default" user is AUTH with the password alone. */
    const char *user =
        opts->user && opts->user[0] && strcmp(opts->user, "default") != 0
            ? opts->user
            : NULL;
    p->host = strdup(opts->host);
    p->user = dup_or_null(user);
    p->password = dup_or_null(opts->password);
    p->conns = calloc((size_t)opts->pool_size, sizeof(*p->conns));
    p->idle = calloc((size_t)opts->pool_size, sizeof(*p->idle));
    if (!p->host || !p->conns || !p->idle || (user && !p->user) ||
        (opts->password && !p->password)) {
        redis_pool_free(p);
        return osp_error_out_of_memory();
    }
    p->port = opts->port;
    p->db = opts->db;
    p->connect_timeout_ms = opts->connect_timeout_ms;
    p->socket_timeout_ms = opts->socket_timeout_ms;
    p->wait_timeout_ms = opts->wait_timeout_ms;
    snprintf(p->address, sizeof p->address,
             strchr(p->host, ':') ? "[%s]:%d" : "%s:%d", p->host, p->port);
    p->n_conns = p->n_idle = opts->pool_size;
    for (int i = 0; i < p->n_conns; i++)
        p->idle[i] = i;
    p->backoff_ns = BACKOFF_FIRST_NS;
    pthread_mutex_init(&p->lock, NULL);
    cond_init_monotonic(&p->freed);
    *out = p;
    return NULL;
}

void redis_pool_free(redis_pool *p) {
    if (!p)
        return;
    for (int i = 0; p->conns && i < p->n_conns; i++)
        if (p->conns[i].ctx)
            redisFree(p->conns[i].ctx);
    if (p->n_conns) {
        pthread_mutex_destroy(&p->lock);
        pthread_cond_destroy(&p->freed);
    }
    if (p->password) /* not left in freed memory */
        memset(p->password, 0, strlen(p->password));
    free(p->password);
    free(p->user);
    free(p->host);
    free(p->conns);
    free(p->idle);
    free(p);
}

const char *redis_pool_address(const redis_pool *p) {
    return p->address;
}

static struct timeval timeval_ms(uint64_t ms) {
    return (struct timeval){.tv_sec = (time_t)(ms / 1000),
                            .tv_usec = (suseconds_t)(ms % 1000) * 1000};
}

/* ---- outages ------------------------------------------------------------- */

/* Starts or prolongs an outage (lock not held). Logged when it starts. */
static void report_failure(redis_pool *p, const char *why) {
    pthread_mutex_lock(&p->lock);
    bool started = !p->down;
    if (started) {
        p->down = true;
        p->epoch++;
        p->backoff_ns = BACKOFF_FIRST_NS;
    }
    p->retry_at_ns = osp_now_ns() + p->backoff_ns;
    p->backoff_ns =
        p->backoff_ns * 2 > BACKOFF_MAX_NS ? BACKOFF_MAX_NS : p->backoff_ns * 2;
    pthread_mutex_unlock(&p->lock);
    if (started)
        OSP_LOG_ERROR("redis response cache at %s is unavailable: %s; "
                      "requests are served as cache misses until it is back",
                      p->address, why);
}

/* Ends an outage, if one is on (lock not held). Logged when it ends. */
static void report_success(redis_pool *p) {
    pthread_mutex_lock(&p->lock);
    bool ended = p->down;
    p->down = false;
    p->backoff_ns = BACKOFF_FIRST_NS;
    pthread_mutex_unlock(&p->lock);
    if (ended)
        OSP_LOG_INFO("redis response cache at %s is reachable again",
                     p->address);
}

/* ---- connections --------------------------------------------------------- */

/* Copies the reason a context failed into why. */
static void context_error(const redisContext *ctx, char *why, size_t cap) {
    if (!ctx)
        snprintf(why, cap, "out of memory");
    else if (ctx->err == REDIS_ERR_EOF)
        snprintf(why, cap, "connection closed by the server");
    else if (ctx->err == REDIS_ERR_IO && ctx->errstr[0] &&
             strstr(ctx->errstr, "temporarily unavailable"))
        snprintf(why, cap, "no reply within socket_timeout");
    else
        snprintf(why, cap, "%s", ctx->errstr[0] ? ctx->errstr : "I/O error");
}

/* One setup command (AUTH, SELECT); false with why unless Redis said OK. */
static bool setup_command(redisContext *ctx, int argc, const char **argv,
                          char *why, size_t cap) {
    size_t lens[3];
    for (int i = 0; i < argc; i++)
        lens[i] = strlen(argv[i]);
    redisReply *r = redisCommandArgv(ctx, argc, argv, lens);
    if (!r) {
        context_error(ctx, why, cap);
        return false;
    }
    bool ok = r->type != REDIS_REPLY_ERROR;
    if (!ok) /* Redis' words: never the password */
        snprintf(why, cap, "%s refused: %.*s", argv[0],
                 (int)(r->len > 200 ? 200 : r->len), r->str ? r->str : "");
    freeReplyObject(r);
    return ok;
}

/* Connects c (which has no socket): connect_timeout, socket_timeout on
 * every later read, AUTH, SELECT. False with why. */
static bool connect_conn(redis_pool *p, pool_conn *c, uint64_t epoch, char *why,
                         size_t cap) {
    redisContext *ctx =
        p->connect_timeout_ms
            ? redisConnectWithTimeout(p->host, p->port,
                                      timeval_ms(p->connect_timeout_ms))
            : redisConnect(p->host, p->port);
    if (!ctx || ctx->err) {
        context_error(ctx, why, cap);
        if (ctx)
            redisFree(ctx);
        return false;
    }
    bool ok = true;
    if (p->socket_timeout_ms &&
        redisSetTimeout(ctx, timeval_ms(p->socket_timeout_ms)) != REDIS_OK) {
        context_error(ctx, why, cap);
        ok = false;
    }
    if (ok)
        redisEnableKeepAlive(ctx);
    if (ok && p->password) {
        const char *auth[3] = {"AUTH", p->user ? p->user : p->password,
                               p->password};
        ok = setup_command(ctx, p->user ? 3 : 2, auth, why, cap);
    }
    if (ok && p->db) {
        char db[16];
        snprintf(db, sizeof db, "%d", p->db);
        const char *select[2] = {"SELECT", db};
        ok = setup_command(ctx, 2, select, why, cap);
    }
    if (!ok) {
        redisFree(ctx);
        return false;
    }
    c->ctx = ctx;
    c->epoch = epoch;
    c->served = false;
    return true;
}

static void drop_conn(pool_conn *c) {
    if (c->ctx)
        redisFree(c->ctx);
    c->ctx = NULL;
}

/* Takes a free connection: its index, or -1 with the result to give
 * (DOWN in an outage's backoff, BUSY past wait_timeout). *epoch is
 * the pool's epoch now. */
static int acquire(redis_pool *p, uint64_t *epoch, redis_pool_result *res,
                   char *why, size_t cap) {
    uint64_t deadline =
        p->wait_timeout_ms ? deadline_after_ns(p->wait_timeout_ms * MS_NS) : 0;
    pthread_mutex_lock(&p->lock);
    int i = -1;
    for (;;) {
        if (p->down && osp_now_ns() < p->retry_at_ns) {
            *res = REDIS_POOL_DOWN;
            snprintf(why, cap, "redis at %s is unavailable", p->address);
            break;
        }
        if (p->n_idle > 0) {
            i = p->idle[--p->n_idle];
            /* The one command that tries a Redis that was down; the
             * others keep failing fast until it has answered. */
            if (p->down)
                p->retry_at_ns = osp_now_ns() + p->backoff_ns;
            *epoch = p->epoch;
            break;
        }
        if (deadline == 0)
            pthread_cond_wait(&p->freed, &p->lock);
        else if (!cond_wait_until(&p->freed, &p->lock, deadline)) {
            *res = REDIS_POOL_BUSY;
            snprintf(why, cap,
                     "no connection to redis free within "
                     "wait_timeout");
            break;
        }
    }
    pthread_mutex_unlock(&p->lock);
    return i;
}

static void release(redis_pool *p, int i) {
    pthread_mutex_lock(&p->lock);
    p->idle[p->n_idle++] = i;
    pthread_cond_signal(&p->freed);
    pthread_mutex_unlock(&p->lock);
}

/* Whether a failed command on a connection that served before may have
 * met a socket Redis closed while it was idle: worth one fresh try. */
static bool stale_socket(const redisContext *ctx) {
    return ctx->err == REDIS_ERR_EOF ||
           (ctx->err == REDIS_ERR_IO &&
            (strstr(ctx->errstr, "reset") || strstr(ctx->errstr, "pipe")));
}

redis_pool_result redis_pool_command(redis_pool *p, int argc, const char **argv,
                                     const size_t *lens, redisReply **reply,
                                     char *why, size_t cap) {
    uint64_t epoch = 0;
    redis_pool_result res = REDIS_POOL_OK;
    int i = acquire(p, &epoch, &res, why, cap);
    if (i < 0)
        return res;
    pool_conn *c = &p->conns[i];
    if (c->ctx && c->epoch != epoch) /* opened before an outage */
        drop_conn(c);
    *reply = NULL;
    for (int attempt = 0; attempt < 2 && !*reply; attempt++) {
        if (!c->ctx && !connect_conn(p, c, epoch, why, cap))
            break;
        *reply = redisCommandArgv(c->ctx, argc, argv, lens);
        if (*reply) {
            c->served = true;
            break;
        }
        bool retry = c->served && stale_socket(c->ctx);
        context_error(c->ctx, why, cap);
        drop_conn(c); /* a failed context cannot be used again */
        if (!retry)
            break;
    }
    release(p, i);
    if (!*reply) {
        report_failure(p, why);
        return REDIS_POOL_UNAVAILABLE;
    }
    report_success(p);
    return REDIS_POOL_OK;
}
