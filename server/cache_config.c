/*
 * The redis response cache's --cache-config settings (cache_config.h): one
 * table of keys, each with how its value is read.
 */
#include "cache_config.h"

#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define USERNAME_ENV "TRITONCACHE_REDIS_USERNAME"
#define PASSWORD_ENV "TRITONCACHE_REDIS_PASSWORD"

typedef enum key_kind {
    KEY_STRING, /* owned char * in redis_cache_config */
    KEY_INT,    /* int in opts, within [min, max] */
    KEY_MS,     /* uint64_t milliseconds in opts, within [min, max] */
    KEY_TLS,    /* tls_enabled: true or false */
    KEY_IGNORED /* a TLS file or name: meaningful only with TLS */
} key_kind;

typedef struct key_def {
    const char *name;
    key_kind kind;
    size_t offset; /* KEY_STRING: in the config; KEY_INT, KEY_MS: in opts */
    long long min, max;
} key_def;

#define CFG(field) offsetof(redis_cache_config, field)
#define OPT(field) offsetof(osp_redis_cache_options, field)
#define DAY_MS 86400000LL

static const key_def KEYS[] = {
    {"host", KEY_STRING, CFG(host), 0, 0},
    {"port", KEY_INT, OPT(port), 1, 65535},
    {"user", KEY_STRING, CFG(user), 0, 0},
    {"password", KEY_STRING, CFG(password), 0, 0},
    {"db", KEY_INT, OPT(db), 0, INT_MAX},
    {"connect_timeout", KEY_MS, OPT(connect_timeout_ms), 0, DAY_MS},
    {"socket_timeout", KEY_MS, OPT(socket_timeout_ms), 0, DAY_MS},
    {"pool_size", KEY_INT, OPT(pool_size), 1, 1024},
    {"wait_timeout", KEY_MS, OPT(wait_timeout_ms), 0, DAY_MS},
    {"tls_enabled", KEY_TLS, 0, 0, 0},
    {"cert", KEY_IGNORED, 0, 0, 0},
    {"key", KEY_IGNORED, 0, 0, 0},
    {"cacert", KEY_IGNORED, 0, 0, 0},
    {"cacert_dir", KEY_IGNORED, 0, 0, 0},
    {"sni", KEY_IGNORED, 0, 0, 0},
};
#define N_KEYS (sizeof KEYS / sizeof KEYS[0])

void redis_cache_config_init(redis_cache_config *c) {
    memset(c, 0, sizeof *c);
    c->opts.pool_size = 1;
    c->opts.wait_timeout_ms = 1000;
}

static void free_secret(char *s) {
    if (s)
        memset(s, 0, strlen(s));
    free(s);
}

void redis_cache_config_destroy(redis_cache_config *c) {
    free(c->host);
    free(c->user);
    free_secret(c->password);
    memset(c, 0, sizeof *c);
}

/* The key named by s[0..n), or NULL. */
static const key_def *find_key(const char *s, size_t n) {
    for (size_t i = 0; i < N_KEYS; i++)
        if (strlen(KEYS[i].name) == n && memcmp(KEYS[i].name, s, n) == 0)
            return &KEYS[i];
    return NULL;
}

/* Where the value starting at v ends: the first comma followed by a known
 * key and '=', or the end. */
static const char *value_end(const char *v) {
    for (const char *p = strchr(v, ','); p; p = strchr(p + 1, ',')) {
        const char *eq = strchr(p + 1, '=');
        if (eq && find_key(p + 1, (size_t)(eq - p - 1)))
            return p;
    }
    return v + strlen(v);
}

static bool parse_number(const char *v, size_t n, long long min, long long max,
                         long long *out) {
    if (n == 0 || n > 19)
        return false;
    long long x = 0;
    for (size_t i = 0; i < n; i++) {
        if (v[i] < '0' || v[i] > '9')
            return false;
        x = x * 10 + (v[i] - '0');
    }
    if (x < min || x > max)
        return false;
    *out = x;
    return true;
}

/* Applies key = v[0..n). False after printing why (never the password). */
static bool apply_key(redis_cache_config *c, const key_def *k, const char *v,
                      size_t n) {
    long long x;
    switch (k->kind) {
    case KEY_STRING: {
        char **field = (char **)((char *)c + k->offset);
        char *copy = strndup(v, n);
        if (!copy) {
            fprintf(stderr, "Error: --cache-config: out of memory\n");
            return false;
        }
        if (field == &c->password)
            free_secret(*field);
        else
            free(*field);
        *field = copy;
        if (field == &c->host)
            c->host_given = true;
        return true;
    }
    case KEY_INT:
    case KEY_MS:
        if (!parse_number(v, n, k->min, k->max, &x)) {
            fprintf(stderr,
                    "Error: --cache-config: redis %s is a whole number from "
                    "%lld to %lld%s, got '%.*s'\n",
                    k->name, k->min, k->max,
                    k->kind == KEY_MS ? " (milliseconds)" : "", (int)n, v);
            return false;
        }
        if (k->kind == KEY_INT)
            *(int *)((char *)&c->opts + k->offset) = (int)x;
        else
            *(uint64_t *)((char *)&c->opts + k->offset) = (uint64_t)x;
        if (k->offset == OPT(port))
            c->port_given = true;
        return true;
    case KEY_TLS:
        if (n == 4 && memcmp(v, "true", 4) == 0)
            c->tls_enabled = true;
        else if (n == 5 && memcmp(v, "false", 5) == 0)
            c->tls_enabled = false;
        else {
            fprintf(stderr,
                    "Error: --cache-config: redis tls_enabled is true or "
                    "false, got '%.*s'\n",
                    (int)n, v);
            return false;
        }
        return true;
    case KEY_IGNORED:
        return true;
    }
    return false;
}

bool redis_cache_config_apply(redis_cache_config *c, const char *settings) {
    const char *p = settings;
    do {
        const char *eq = strchr(p, '=');
        const char *comma = strchr(p, ',');
        if (!eq || (comma && comma < eq)) {
            fprintf(stderr,
                    "Error: --cache-config: expected redis,<key>=<value>, got "
                    "a setting without '=' (keys: host, port, user, "
                    "password, db, connect_timeout, socket_timeout, "
                    "pool_size, wait_timeout, tls_enabled, cert, key, "
                    "cacert, cacert_dir, sni)\n");
            return false;
        }
        const key_def *k = find_key(p, (size_t)(eq - p));
        if (!k) {
            fprintf(stderr,
                    "Error: --cache-config: unknown redis cache key '%.*s' "
                    "(keys: host, port, user, password, db, "
                    "connect_timeout, socket_timeout, pool_size, "
                    "wait_timeout, tls_enabled, cert, key, cacert, "
                    "cacert_dir, sni)\n",
                    (int)(eq - p), p);
            return false;
        }
        const char *v = eq + 1, *end = value_end(v);
        if (!apply_key(c, k, v, (size_t)(end - v)))
            return false;
        p = *end ? end + 1 : end;
    } while (*p);
    return true;
}

bool redis_cache_config_finish(redis_cache_config *c) {
    if (!c->host_given || !c->port_given || !c->host || !c->host[0]) {
        /* Triton's words, with Osprey's example */
        fprintf(stderr,
                "Error: Failed to initialize RedisCache, didn't specify "
                "address. Must at a minimum specify 'host' and 'port' in the "
                "configuration - e.g. osprey --cache-config redis,host=redis "
                "--cache-config redis,port=6379 --model-repository=/models "
                "...\n");
        return false;
    }
    if (c->tls_enabled) {
        fprintf(stderr,
                "Error: --cache-config: redis tls_enabled=true is not "
                "supported: Osprey reaches Redis through Debian's hiredis "
                "0.14, which has no TLS (hiredis_ssl). Reach a TLS Redis "
                "through a local TLS tunnel (stunnel, or a sidecar) and "
                "point host and port at it, or set tls_enabled=false.\n");
        return false;
    }
    const char *env_user = getenv(USERNAME_ENV);
    const char *env_password = getenv(PASSWORD_ENV);
    if (!c->user && env_user && !(c->user = strdup(env_user)))
        return false;
    if (!c->password && env_password && !(c->password = strdup(env_password)))
        return false;
    c->opts.host = c->host;
    c->opts.user = c->user;
    c->opts.password = c->password;
    return true;
}
