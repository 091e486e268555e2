/*
 * echo_server: the physical baseline for Osprey's HTTP benchmarks.
 *
 * A libmicrohttpd server with Osprey's threading model (internal polling
 * thread pool; poll() by default as in server/http/http_server.c, or epoll
 * with --io epoll) that reads each request body whole and answers 200
 * with the same bytes. The body is copied once from libmicrohttpd's upload
 * buffer into a pooled buffer, and that buffer is sent without a further
 * copy, which is the least work any server on this stack can do for a
 * request. Whatever Osprey spends beyond this is the cost of inference
 * handling. Buffers are pooled, as Osprey pools tensor memory: a fresh
 * malloc of a large body would be mmap'ed and page-faulted on every request
 * and make the baseline slower than it needs to be.
 *
 * Prints "Started HTTPService at <address>:<port>" once listening (port 0
 * picks a free port) and exits 0 on SIGINT or SIGTERM.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    size_t max_body;
} echo_config;

/* ---- buffer pool --------------------------------------------------------
 * Buffers carry their capacity in a header just before the data, so the
 * response's free callback needs only the data pointer. Capacities are
 * powers of two, so bodies of similar size reuse each other's buffers. */

#define POOL_SLOTS 64
#define POOL_MAX_BYTES ((size_t)2 << 30)
#define BUF_HEADER 64 /* keeps the data 64-byte aligned */

static struct {
    pthread_mutex_t mu;
    char *bufs[POOL_SLOTS]; /* data pointers */
    int n;
    size_t bytes;
} pool = {.mu = PTHREAD_MUTEX_INITIALIZER};

static size_t buf_cap(const char *data) {
    size_t cap;
    memcpy(&cap, data - BUF_HEADER, sizeof cap);
    return cap;
}

/* Returns a buffer of at least `need` bytes (caller owns; give it back with
   buf_release), or NULL when out of memory. */
static char *buf_take(size_t need) {
    size_t cap = 4096;
    while (cap < need)
        cap *= 2;
    pthread_mutex_lock(&pool.mu);
    for (int i = 0; i < pool.n; i++) {
        char *data = pool.bufs[i];
        size_t c = buf_cap(data);
        if (c >= cap && c <= 2 * cap) {
            pool.bufs[i] = pool.bufs[--pool.n];
            pool.bytes -= c;
            pthread_mutex_unlock(&pool.mu);
            return data;
        }
    }
    pthread_mutex_unlock(&pool.mu);
    char *raw = malloc(BUF_HEADER + cap);
    if (!raw)
        return NULL;
    memcpy(raw, &cap, sizeof cap);
    return raw + BUF_HEADER;
}

/* Takes back a buffer from buf_take (ownership moves; NULL is ignored).
   Signature of MHD_ContentReaderFreeCallback. */
static void buf_release(void *ptr) {
    char *data = ptr;
    if (!data)
        return;
    size_t cap = buf_cap(data);
    pthread_mutex_lock(&pool.mu);
    if (pool.n < POOL_SLOTS && pool.bytes + cap <= POOL_MAX_BYTES) {
        pool.bufs[pool.n++] = data;
        pool.bytes += cap;
        data = NULL;
    }
    pthread_mutex_unlock(&pool.mu);
    free(data ? data - BUF_HEADER : NULL);
}

/* One request's upload, owned by the connection's con_cls slot. */
typedef struct {
    char *data; /* from buf_take, NULL until the first byte */
    size_t len, cap;
    unsigned int reject; /* HTTP status to answer instead, 0 = none */
} upload;

static int upload_reserve(upload *u, size_t need) {
    if (need <= u->cap)
        return 0;
    /* Only bodies without Content-Length (chunked) grow. */
    char *p = buf_take(need > 2 * u->cap ? need : 2 * u->cap);
    if (!p)
        return -1;
    if (u->len)
        memcpy(p, u->data, u->len);
    buf_release(u->data);
    u->data = p;
    u->cap = buf_cap(p);
    return 0;
}

static enum MHD_Result queue_text(struct MHD_Connection *conn,
                                  unsigned int status, const char *text) {
    struct MHD_Response *r = MHD_create_response_from_buffer(
        strlen(text), (void *)text, MHD_RESPMEM_PERSISTENT);
    if (!r)
        return MHD_NO;
    enum MHD_Result ret = MHD_queue_response(conn, status, r);
    MHD_destroy_response(r);
    return ret;
}

/* Access handler. The first call only allocates (queuing a response there
   would make libmicrohttpd close the connection); the following calls
   append upload data; the last one sends the body back. */
static enum MHD_Result echo_access(void *cls, struct MHD_Connection *conn,
                                   const char *url, const char *method,
                                   const char *version, const char *upload_data,
                                   size_t *upload_data_size, void **con_cls) {
    const echo_config *cfg = cls;
    upload *u = *con_cls;
    (void)url;
    (void)method;
    (void)version;

    if (!u) {
        u = calloc(1, sizeof *u);
        if (!u)
            return MHD_NO;
        *con_cls = u;
        const char *cl = MHD_lookup_connection_value(
            conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl) {
            unsigned long long n = strtoull(cl, NULL, 10);
            if (n > cfg->max_body)
                u->reject = MHD_HTTP_CONTENT_TOO_LARGE;
            else if (upload_reserve(u, (size_t)n))
                u->reject = MHD_HTTP_SERVICE_UNAVAILABLE;
        }
        return MHD_YES;
    }
    if (*upload_data_size) {
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        if (u->reject)
            return MHD_YES; /* drain the body, answer at the end */
        if (u->len + n > cfg->max_body) {
            u->reject = MHD_HTTP_CONTENT_TOO_LARGE;
            return MHD_YES;
        }
        if (upload_reserve(u, u->len + n)) {
            u->reject = MHD_HTTP_SERVICE_UNAVAILABLE;
            return MHD_YES;
        }
        memcpy(u->data + u->len, upload_data, n);
        u->len += n;
        return MHD_YES;
    }

    if (u->reject == MHD_HTTP_CONTENT_TOO_LARGE)
        return queue_text(conn, u->reject, "body too large\n");
    if (u->reject)
        return queue_text(conn, u->reject, "out of memory\n");
    /* The response takes the buffer and gives it back to the pool once
       sent. */
    struct MHD_Response *r =
        MHD_create_response_from_buffer_with_free_callback_cls(
            u->len, u->data, buf_release, u->data);
    if (!r)
        return MHD_NO; /* u->data is still ours: echo_completed frees it */
    u->data = NULL;
    u->len = u->cap = 0;
    enum MHD_Result ret = MHD_YES;
    if (MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
                                "application/octet-stream") != MHD_YES)
        ret = MHD_NO;
    if (ret == MHD_YES)
        ret = MHD_queue_response(conn, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return ret;
}

static void echo_completed(void *cls, struct MHD_Connection *conn,
                           void **con_cls,
                           enum MHD_RequestTerminationCode toe) {
    upload *u = *con_cls;
    (void)cls;
    (void)conn;
    (void)toe;
    if (u) {
        buf_release(u->data);
        free(u);
        *con_cls = NULL;
    }
}

static void usage(FILE *f) {
    fprintf(
        f,
        "usage: echo_server [options]\n"
        "  --port N               listen port; 0 picks a free one (default 0)\n"
        "  --address A            IPv4 listen address (default 127.0.0.1)\n"
        "  --threads N            libmicrohttpd thread pool size (default 8)\n"
        "  --memory-limit BYTES   per-connection memory (default 131072, as\n"
        "                         Osprey; MHD zeroes it after each request)\n"
        "  --io poll|epoll        event loop of each pool thread (default "
        "poll)\n"
        "  --max-body BYTES       largest accepted body (default 1 GiB)\n");
}

static int parse_size(const char *s, unsigned long long min,
                      unsigned long long *out) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || s[0] == '-' || v < min)
        return -1;
    *out = v;
    return 0;
}

int main(int argc, char **argv) {
    /* Defaults follow server/http/http_server.c so that only the request
       handling differs between the two servers. */
    unsigned long long port = 0, threads = 8, memory_limit = 128 * 1024;
    unsigned long long max_body = 1ull << 30;
    const char *address = "127.0.0.1";
    unsigned int io_flag = MHD_USE_POLL;

    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i], *val;
        char name[32];
        const char *eq = strchr(arg, '=');
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            usage(stdout);
            return 0;
        }
        if (eq && (size_t)(eq - arg) < sizeof name) {
            memcpy(name, arg, (size_t)(eq - arg));
            name[eq - arg] = '\0';
            val = eq + 1;
        } else if (!eq && strlen(arg) < sizeof name && i + 1 < argc) {
            strcpy(name, arg);
            val = argv[++i];
        } else {
            goto bad;
        }
        int bad = 0;
        if (strcmp(name, "--address") == 0)
            address = val;
        else if (strcmp(name, "--io") == 0 && strcmp(val, "poll") == 0)
            io_flag = MHD_USE_POLL;
        else if (strcmp(name, "--io") == 0 && strcmp(val, "epoll") == 0)
            io_flag = MHD_USE_EPOLL;
        else if (strcmp(name, "--port") == 0)
            bad = parse_size(val, 0, &port) || port > 65535;
        else if (strcmp(name, "--threads") == 0)
            bad = parse_size(val, 1, &threads) || threads > 1024;
        else if (strcmp(name, "--memory-limit") == 0)
            bad = parse_size(val, 4096, &memory_limit);
        else if (strcmp(name, "--max-body") == 0)
            bad = parse_size(val, 0, &max_body);
        else
            bad = 1;
        if (bad)
            goto bad;
        continue;
    bad:
        fprintf(stderr, "echo_server: bad option '%s'\n", arg);
        usage(stderr);
        return 2;
    }

    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)port)};
    if (inet_pton(AF_INET, address, &sa.sin_addr) != 1) {
        fprintf(stderr, "echo_server: bad IPv4 address '%s'\n", address);
        return 2;
    }

    /* Signals go to sigwait below, not to libmicrohttpd's threads. */
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);
    signal(SIGPIPE, SIG_IGN);

    echo_config cfg = {.max_body = (size_t)max_body};
    /* clang-format off */
    struct MHD_Daemon *d = MHD_start_daemon(
        MHD_USE_INTERNAL_POLLING_THREAD | io_flag | MHD_USE_ERROR_LOG,
        (uint16_t)port, NULL, NULL, echo_access, &cfg,
        MHD_OPTION_SOCK_ADDR, &sa,
        MHD_OPTION_THREAD_POOL_SIZE, (unsigned int)threads,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)memory_limit,
        MHD_OPTION_CONNECTION_LIMIT, 8192u,
        MHD_OPTION_LISTEN_BACKLOG_SIZE, 1024u,
        MHD_OPTION_CONNECTION_TIMEOUT, 0u,
        MHD_OPTION_NOTIFY_COMPLETED, echo_completed, NULL,
        MHD_OPTION_END);
    /* clang-format on */
    if (!d) {
        fprintf(stderr, "echo_server: cannot listen on %s:%llu\n", address,
                port);
        return 1;
    }
    const union MHD_DaemonInfo *info =
        MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    printf("Started HTTPService at %s:%u\n", address,
           info ? (unsigned)info->port : (unsigned)port);
    fflush(stdout);

    int sig;
    sigwait(&stop, &sig);
    MHD_stop_daemon(d);
    return 0;
}
