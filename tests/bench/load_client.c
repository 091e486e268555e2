/*
 * load_client: a closed-loop HTTP/1.1 load generator for Osprey benchmarks.
 *
 * Each of --concurrency keep-alive connections carries exactly one
 * outstanding request; when its response is complete (and checked) the next
 * request goes out on the same connection. Connections are spread over
 * --threads worker threads, each with its own epoll loop. The run stops at
 * --warmup + --duration seconds; requests still in flight then are abandoned
 * and reported as "incomplete". Only responses that complete inside the
 * measured window count towards throughput and latency; errors count
 * whenever they happen.
 *
 * Bodies are generated for the benchmark models (see usage()) or read from a
 * file. Generated bodies come in a few variants (different tensor values per
 * connection) so that a server that mixes up requests inside a batch fails
 * the content check instead of passing silently.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "loadgen.h"

#define MAX_VARIANTS 8
#define MAX_VARIANT_BYTES ((size_t)512 << 20) /* all variants together */
#define MAX_HEAD_BYTES 65536                  /* response status + headers */
#define RECV_SLACK 65536 /* free space kept for unknown-length reads */
#define RECONNECT_DELAY_NS 2000000ull /* after a failed connection: 2 ms */

typedef enum {
    MODE_JSON_SIMPLE,
    MODE_BINARY_SIMPLE,
    MODE_BINARY_FP32,
    MODE_JSON_FP32,
    MODE_RAW,
    MODE_FILE,
} body_mode;

static const char *const mode_names[] = {
    "json-simple", "binary-simple", "binary-fp32", "json-fp32", "raw", "file"};

typedef struct {
    char host[256];
    char port[16];
    const char *path; /* NULL: the mode's default */
    const char *method;
    const char *content_type; /* NULL: the mode's default */
    const char *body_file;
    body_mode mode;
    long body_bytes; /* raw body length */
    long ihcl;       /* --body-file: Inference-Header-Content-Length, -1 none */
    size_t max_response;
    loadgen_options load; /* --url, --model, --concurrency, ... */
} options;

/* One prepared request. Strings are owned by the variant. */
typedef struct {
    char *head; /* request line and headers, ends with CRLF CRLF */
    size_t head_len;
    char *body;
    size_t body_len;
    /* What a correct response carries, by mode. */
    int32_t expect_i32[32]; /* json-simple: OUTPUT0[16], then OUTPUT1[16] */
    float *expect_f32;      /* json-fp32: OUTPUT0 values, owned */
    size_t expect_count;
    const char *expect_blob; /* binary-fp32 / raw: borrowed from body;
                                binary-simple: expect_i32 */
    size_t expect_blob_len;
} request_variant;

typedef enum {
    CONN_BACKOFF, /* waiting to reconnect */
    CONN_CONNECTING,
    CONN_SENDING,
    CONN_RECEIVING,
} conn_state;

typedef enum { BODY_LENGTH, BODY_CHUNKED, BODY_UNTIL_CLOSE } body_framing;

typedef enum {
    CHUNK_SIZE,
    CHUNK_DATA,
    CHUNK_DATA_END,
    CHUNK_TRAILER,
} chunk_state;

typedef struct {
    int fd;
    conn_state state;
    uint32_t events; /* what epoll watches for fd */
    uint64_t retry_at;
    const request_variant *req;
    uint64_t seq; /* responses received on this connection slot */
    uint64_t start_ns;
    size_t sent; /* bytes of head + body written */

    /* Response: buf[0, head_end) is the head, then the body. */
    char *buf;
    size_t len, cap;
    size_t head_end; /* 0 until the head is parsed */
    int status;
    int close_after;
    body_framing framing;
    size_t content_length;
    long long resp_ihcl; /* -1: no Inference-Header-Content-Length */
    /* Chunked decoding, in place: decoded body is buf[head_end, dec_end),
       undecoded input is buf[raw_pos, len). */
    chunk_state chunk;
    size_t chunk_left, dec_end, raw_pos;
} connection;

typedef struct {
    const options *opt;
    const struct sockaddr_storage *addr;
    socklen_t addr_len;
    const request_variant *variants;
    int n_variants;
    int first_conn, n_conns;
    uint64_t measure_start, end;

    int epfd;
    connection *conns;
    int n_backoff;

    loadgen_results *results; /* this thread's, in main's array */
} worker;

/* ---- growable string, for building bodies ---------------------------- */

typedef struct {
    char *data;
    size_t len, cap;
    int failed; /* an allocation failed; data is unusable */
} strbuf;

static void sb_reserve(strbuf *sb, size_t extra) {
    if (sb->failed || sb->len + extra + 1 <= sb->cap)
        return;
    size_t cap = sb->cap ? sb->cap : 256;
    while (cap < sb->len + extra + 1)
        cap *= 2;
    char *p = realloc(sb->data, cap);
    if (!p) {
        sb->failed = 1;
        return;
    }
    sb->data = p;
    sb->cap = cap;
}

static void sb_printf(strbuf *sb, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
        sb->failed = 1;
        return;
    }
    sb_reserve(sb, (size_t)n);
    if (sb->failed)
        return;
    va_start(ap, fmt);
    vsnprintf(sb->data + sb->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    sb->len += (size_t)n;
}

static void sb_append(strbuf *sb, const void *data, size_t n) {
    sb_reserve(sb, n);
    if (sb->failed)
        return;
    memcpy(sb->data + sb->len, data, n);
    sb->len += n;
    sb->data[sb->len] = '\0';
}

/* ---- request bodies ---------------------------------------------------- */

static int build_json_simple(request_variant *rv, int v, strbuf *sb) {
    sb_printf(sb, "{\"inputs\":[");
    for (int in = 0; in < 2; in++) {
        sb_printf(sb,
                  "%s{\"name\":\"INPUT%d\",\"shape\":[1,16],"
                  "\"datatype\":\"INT32\",\"data\":[",
                  in ? "," : "", in);
        for (int i = 0; i < 16; i++)
            sb_printf(sb, "%s%d", i ? "," : "",
                      (int)loadgen_simple_input(v, in, i));
        sb_printf(sb, "]}");
    }
    sb_printf(sb, "],\"outputs\":[{\"name\":\"OUTPUT0\"},"
                  "{\"name\":\"OUTPUT1\"}]}");
    for (int i = 0; i < 16; i++) {
        int32_t a = loadgen_simple_input(v, 0, i),
                b = loadgen_simple_input(v, 1, i);
        rv->expect_i32[i] = a + b;
        rv->expect_i32[16 + i] = a - b;
    }
    rv->expect_count = 16;
    return 0;
}

/* simple with binary tensors in and out, as tritonclient.http sends them by
   default; OUTPUT0 and OUTPUT1 come back as one blob in that order.
   Returns the JSON header length (the IHCL value). */
static size_t build_binary_simple(request_variant *rv, int v, strbuf *sb) {
    sb_printf(sb, "{\"inputs\":[");
    for (int in = 0; in < 2; in++)
        sb_printf(sb,
                  "%s{\"name\":\"INPUT%d\",\"shape\":[1,16],"
                  "\"datatype\":\"INT32\",\"parameters\":"
                  "{\"binary_data_size\":64}}",
                  in ? "," : "", in);
    sb_printf(sb, "],\"outputs\":[{\"name\":\"OUTPUT0\",\"parameters\":"
                  "{\"binary_data\":true}},{\"name\":\"OUTPUT1\","
                  "\"parameters\":{\"binary_data\":true}}]}");
    size_t json_len = sb->len;
    for (int in = 0; in < 2; in++)
        for (int i = 0; i < 16; i++) {
            int32_t x = loadgen_simple_input(v, in, i);
            sb_append(sb, &x, sizeof x);
        }
    for (int i = 0; i < 16; i++) {
        int32_t a = loadgen_simple_input(v, 0, i),
                b = loadgen_simple_input(v, 1, i);
        rv->expect_i32[i] = a + b;
        rv->expect_i32[16 + i] = a - b;
    }
    rv->expect_blob = (const char *)rv->expect_i32;
    rv->expect_blob_len = sizeof rv->expect_i32;
    return json_len;
}

/* Returns the JSON header length (the IHCL value). */
static size_t build_binary_fp32(request_variant *rv, int v, long n,
                                strbuf *sb) {
    size_t bytes = (size_t)n * sizeof(float);
    sb_printf(sb,
              "{\"inputs\":[{\"name\":\"INPUT0\",\"shape\":[1,%ld],"
              "\"datatype\":\"FP32\",\"parameters\":{\"binary_data_size\":%zu}"
              "}],\"outputs\":[{\"name\":\"OUTPUT0\",\"parameters\":"
              "{\"binary_data\":true}}]}",
              n, bytes);
    size_t json_len = sb->len;
    sb_reserve(sb, bytes);
    if (sb->failed)
        return 0;
    float *blob = (float *)(sb->data + sb->len);
    for (long i = 0; i < n; i++) {
        float x = loadgen_fp32_value(v, i);
        memcpy(&blob[i], &x, sizeof x); /* blob may be unaligned */
    }
    sb->len += bytes;
    sb->data[sb->len] = '\0';
    (void)rv; /* expect_blob is set once the body has its final address */
    return json_len;
}

static int build_json_fp32(request_variant *rv, int v, long n, strbuf *sb) {
    rv->expect_f32 = malloc((size_t)n * sizeof(float));
    if (!rv->expect_f32)
        return -1;
    sb_printf(sb,
              "{\"inputs\":[{\"name\":\"INPUT0\",\"shape\":[1,%ld],"
              "\"datatype\":\"FP32\",\"data\":[",
              n);
    for (long i = 0; i < n && !sb->failed; i++) {
        float x = loadgen_fp32_value(v, i);
        rv->expect_f32[i] = x;
        sb_printf(sb, "%s%g", i ? "," : "", (double)x);
    }
    sb_printf(sb, "]}],\"outputs\":[{\"name\":\"OUTPUT0\"}]}");
    rv->expect_count = (size_t)n;
    return 0;
}

static void build_raw(int v, long n, strbuf *sb) {
    sb_reserve(sb, (size_t)n);
    if (sb->failed)
        return;
    for (long i = 0; i < n; i++)
        sb->data[i] = (char)(unsigned char)(i * 131 + v * 17 + (i >> 12));
    sb->len = (size_t)n;
    sb->data[n] = '\0';
}

static int read_file(const char *path, strbuf *sb) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    char chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
        sb_append(sb, chunk, n);
    int bad = ferror(f) || sb->failed;
    fclose(f);
    if (!sb->data)
        sb_reserve(sb, 0); /* an empty file is an empty body */
    return bad || sb->failed ? -1 : 0;
}

static const char *default_path(const options *opt, char *buf, size_t size) {
    if (opt->path)
        return opt->path;
    switch (opt->mode) {
    case MODE_JSON_SIMPLE:
    case MODE_BINARY_SIMPLE:
        snprintf(buf, size, "/v2/models/%s/infer",
                 opt->load.model ? opt->load.model : "simple");
        return buf;
    case MODE_BINARY_FP32:
    case MODE_JSON_FP32:
        snprintf(buf, size, "/v2/models/%s/infer",
                 opt->load.model ? opt->load.model : "identity_fp32");
        return buf;
    default:
        return "/";
    }
}

/* Fills *rv with variant v of the request for opt. On failure prints why and
   returns -1; rv may hold partial allocations (variant_free releases them).
 */
static int variant_build(request_variant *rv, const options *opt, int v) {
    strbuf body = {0};
    long ihcl = -1;
    const char *ctype = "application/octet-stream";
    int rc = 0;

    switch (opt->mode) {
    case MODE_JSON_SIMPLE:
        rc = build_json_simple(rv, v, &body);
        ctype = "application/json";
        break;
    case MODE_BINARY_SIMPLE:
        ihcl = (long)build_binary_simple(rv, v, &body);
        break;
    case MODE_BINARY_FP32:
        ihcl = (long)build_binary_fp32(rv, v, opt->load.elements, &body);
        break;
    case MODE_JSON_FP32:
        rc = build_json_fp32(rv, v, opt->load.elements, &body);
        ctype = "application/json";
        break;
    case MODE_RAW:
        build_raw(v, opt->body_bytes, &body);
        break;
    case MODE_FILE:
        if (read_file(opt->body_file, &body)) {
            fprintf(stderr, "load_client: cannot read %s: %s\n", opt->body_file,
                    strerror(errno));
            free(body.data);
            return -1;
        }
        ihcl = opt->ihcl;
        if (ihcl < 0)
            ctype = "application/json";
        break;
    }
    if (rc || body.failed) {
        fprintf(stderr, "load_client: out of memory building the body\n");
        free(body.data);
        return -1;
    }
    rv->body = body.data;
    rv->body_len = body.len;
    if (opt->mode == MODE_BINARY_FP32) {
        rv->expect_blob = rv->body + ihcl;
        rv->expect_blob_len = rv->body_len - (size_t)ihcl;
    } else if (opt->mode == MODE_RAW) {
        rv->expect_blob = rv->body;
        rv->expect_blob_len = rv->body_len;
    }

    char path_buf[512];
    strbuf head = {0};
    sb_printf(&head, "%s %s HTTP/1.1\r\nHost: %s:%s\r\n", opt->method,
              default_path(opt, path_buf, sizeof path_buf), opt->host,
              opt->port);
    if (strcmp(opt->method, "GET") != 0 || rv->body_len > 0)
        sb_printf(&head, "Content-Type: %s\r\nContent-Length: %zu\r\n",
                  opt->content_type ? opt->content_type : ctype, rv->body_len);
    if (ihcl >= 0)
        sb_printf(&head, "Inference-Header-Content-Length: %ld\r\n", ihcl);
    sb_printf(&head, "\r\n");
    if (head.failed) {
        fprintf(stderr, "load_client: out of memory building the head\n");
        free(head.data);
        return -1;
    }
    rv->head = head.data;
    rv->head_len = head.len;
    return 0;
}

static void variant_free(request_variant *rv) {
    free(rv->head);
    free(rv->body);
    free(rv->expect_f32);
}

/* ---- response checks --------------------------------------------------- */

/* Parses one JSON number at *p, advancing *p. Integers and short decimals
   (all this client generates) take the exact fast path; anything else goes
   to strtod. Returns 0 on success. */
static int parse_number(const char **p, const char *end, double *out) {
    const char *s = *p;
    int neg = 0;
    if (s < end && *s == '-') {
        neg = 1;
        s++;
    }
    uint64_t mant = 0;
    int digits = 0, frac = 0;
    while (s < end && *s >= '0' && *s <= '9' && digits < 18) {
        mant = mant * 10 + (uint64_t)(*s++ - '0');
        digits++;
    }
    if (s < end && *s == '.') {
        s++;
        while (s < end && *s >= '0' && *s <= '9' && digits < 18) {
            mant = mant * 10 + (uint64_t)(*s++ - '0');
            digits++;
            frac++;
        }
    }
    int simple =
        digits > 0 &&
        (s == end || (*s != 'e' && *s != 'E' && !(*s >= '0' && *s <= '9')));
    if (simple) {
        static const double pow10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,
                                       1e7,  1e8,  1e9,  1e10, 1e11, 1e12, 1e13,
                                       1e14, 1e15, 1e16, 1e17, 1e18};
        double x = (double)mant / pow10[frac];
        *out = neg ? -x : x;
        *p = s;
        return 0;
    }
    /* The body is NUL-terminated, so strtod cannot run past it. */
    char *stop;
    errno = 0;
    *out = strtod(*p, &stop);
    if (stop == *p || stop > end)
        return -1;
    *p = stop;
    return 0;
}

/* Finds the "data" array of output `name` in a compact JSON response and
   returns a pointer just past its '[' (NULL if absent). Assumes, as Triton
   writes it, that "name" precedes "data" inside each output object. */
static const char *find_output_data(const char *body, const char *name) {
    char key[64];
    snprintf(key, sizeof key, "\"name\":\"%s\"", name);
    const char *p = strstr(body, key);
    if (!p)
        return NULL;
    p = strstr(p, "\"data\"");
    if (!p)
        return NULL;
    p = strchr(p, '[');
    return p ? p + 1 : NULL;
}

/* Compares the output's JSON data with want_i32 or want_f32 (one non-NULL).
   Returns 0 when all n values match exactly and the array ends there. */
static int check_json_values(const char *body, size_t len, const char *name,
                             const int32_t *want_i32, const float *want_f32,
                             size_t n) {
    const char *end = body + len;
    const char *p = find_output_data(body, name);
    if (!p)
        return -1;
    for (size_t i = 0; i < n; i++) {
        while (p < end && (*p == ' ' || *p == '\n'))
            p++;
        if (i > 0) {
            if (p >= end || *p != ',')
                return -1;
            p++;
        }
        double x;
        if (parse_number(&p, end, &x))
            return -1;
        if (want_i32 ? x != (double)want_i32[i] : (float)x != want_f32[i])
            return -1;
    }
    while (p < end && (*p == ' ' || *p == '\n'))
        p++;
    return p < end && *p == ']' ? 0 : -1;
}

/* Checks a 200 response body against what the mode's model must return.
   On mismatch writes a short reason into why and returns -1. */
static int verify_response(const options *opt, const connection *c,
                           const char *body, size_t len, char *why,
                           size_t why_size) {
    const request_variant *rv = c->req;
    switch (opt->mode) {
    case MODE_JSON_SIMPLE:
        if (check_json_values(body, len, "OUTPUT0", rv->expect_i32, NULL, 16) ||
            check_json_values(body, len, "OUTPUT1", rv->expect_i32 + 16, NULL,
                              16)) {
            snprintf(why, why_size, "OUTPUT0/OUTPUT1 values differ");
            return -1;
        }
        return 0;
    case MODE_JSON_FP32:
        if (check_json_values(body, len, "OUTPUT0", NULL, rv->expect_f32,
                              rv->expect_count)) {
            snprintf(why, why_size, "OUTPUT0 values differ");
            return -1;
        }
        return 0;
    case MODE_BINARY_SIMPLE:
    case MODE_BINARY_FP32: {
        if (c->resp_ihcl < 0 || (size_t)c->resp_ihcl > len) {
            snprintf(why, why_size,
                     "missing or bad Inference-Header-Content-Length");
            return -1;
        }
        size_t blob_len = len - (size_t)c->resp_ihcl;
        if (blob_len != rv->expect_blob_len ||
            memcmp(body + c->resp_ihcl, rv->expect_blob, blob_len) != 0) {
            snprintf(why, why_size,
                     "binary outputs differ (%zu bytes, expected %zu)",
                     blob_len, rv->expect_blob_len);
            return -1;
        }
        return 0;
    }
    case MODE_RAW:
        if (len != rv->expect_blob_len ||
            memcmp(body, rv->expect_blob, len) != 0) {
            snprintf(why, why_size, "echo differs (%zu bytes, expected %zu)",
                     len, rv->expect_blob_len);
            return -1;
        }
        return 0;
    case MODE_FILE:
        return 0;
    }
    return 0;
}

/* ---- connections ------------------------------------------------------- */

static void conn_watch(worker *w, connection *c, uint32_t events) {
    if (c->events == events)
        return;
    struct epoll_event ev = {.events = events, .data.ptr = c};
    epoll_ctl(w->epfd, c->events ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, c->fd, &ev);
    c->events = events;
}

static void conn_close(worker *w, connection *c) {
    if (c->fd >= 0) {
        epoll_ctl(w->epfd, EPOLL_CTL_DEL, c->fd, NULL);
        close(c->fd);
    }
    c->fd = -1;
    c->events = 0;
}

static void conn_send(worker *w, connection *c);
static void conn_open(worker *w, connection *c);

/* Starts the next request on an open connection. */
static void conn_begin_request(worker *w, connection *c) {
    c->req = &w->variants[(c - w->conns + w->first_conn) % w->n_variants];
    c->start_ns = loadgen_now_ns();
    c->sent = 0;
    c->len = 0;
    c->head_end = 0;
    c->status = 0;
    c->close_after = 0;
    c->resp_ihcl = -1;
    if (c->state == CONN_CONNECTING)
        return; /* conn_on_event sends once the connect completes */
    c->state = CONN_SENDING;
    conn_send(w, c);
}

/* Drops the connection after an I/O or protocol failure and schedules a
   reconnect. The failed request counts as one io error. */
static void conn_fail(worker *w, connection *c, const char *what, int err) {
    w->results->io_errors++;
    if (err)
        loadgen_record_error(w->results, "%s: %s", what, strerror(err));
    else
        loadgen_record_error(w->results, "%s", what);
    conn_close(w, c);
    c->state = CONN_BACKOFF;
    c->retry_at = loadgen_now_ns() + RECONNECT_DELAY_NS;
    w->n_backoff++;
}

static void conn_open(worker *w, connection *c) {
    c->fd = socket(w->addr->ss_family,
                   SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->fd < 0) {
        conn_fail(w, c, "socket", errno);
        return;
    }
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(c->fd, (const struct sockaddr *)w->addr, w->addr_len) == 0) {
        c->state = CONN_SENDING;
    } else if (errno == EINPROGRESS) {
        c->state = CONN_CONNECTING;
        conn_watch(w, c, EPOLLOUT);
    } else {
        conn_fail(w, c, "connect", errno);
        return;
    }
    conn_begin_request(w, c);
}

static void conn_send(worker *w, connection *c) {
    const request_variant *rv = c->req;
    size_t total = rv->head_len + rv->body_len;
    while (c->sent < total) {
        struct iovec iov[2];
        int n_iov = 0;
        if (c->sent < rv->head_len) {
            iov[n_iov].iov_base = rv->head + c->sent;
            iov[n_iov++].iov_len = rv->head_len - c->sent;
        }
        size_t body_off = c->sent > rv->head_len ? c->sent - rv->head_len : 0;
        if (body_off < rv->body_len) {
            iov[n_iov].iov_base = rv->body + body_off;
            iov[n_iov++].iov_len = rv->body_len - body_off;
        }
        struct msghdr msg = {.msg_iov = iov, .msg_iovlen = (size_t)n_iov};
        ssize_t n = sendmsg(c->fd, &msg, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                /* Also watch for an early reply (e.g. a 4xx). */
                conn_watch(w, c, EPOLLOUT | EPOLLIN);
                return;
            }
            conn_fail(w, c, "send", errno);
            return;
        }
        c->sent += (size_t)n;
    }
    c->state = CONN_RECEIVING;
    conn_watch(w, c, EPOLLIN);
}

/* Grows the response buffer to hold at least `need` bytes. */
static int conn_reserve(connection *c, size_t need) {
    if (need <= c->cap)
        return 0;
    size_t cap = c->cap ? c->cap : RECV_SLACK;
    while (cap < need)
        cap *= 2;
    char *p = realloc(c->buf, cap);
    if (!p)
        return -1;
    c->buf = p;
    c->cap = cap;
    return 0;
}

static int header_is(const char *line, size_t len, const char *name) {
    size_t n = strlen(name);
    return len > n && line[n] == ':' && strncasecmp(line, name, n) == 0;
}

/* Value of a "Name: value" line, without leading blanks, NUL-terminated in
   tmp (long values are cut, which is fine for the headers read here). */
static const char *header_value(const char *line, size_t len, char *tmp,
                                size_t tmp_size) {
    const char *v = memchr(line, ':', len) + 1;
    while (v < line + len && (*v == ' ' || *v == '\t'))
        v++;
    size_t n = (size_t)(line + len - v);
    if (n >= tmp_size)
        n = tmp_size - 1;
    memcpy(tmp, v, n);
    tmp[n] = '\0';
    return tmp;
}

/* Parses the status line and headers in buf[0, head_len). */
static int parse_head(const options *opt, connection *c, size_t head_len) {
    const char *p = c->buf, *end = c->buf + head_len;
    const char *eol = memmem(p, (size_t)(end - p), "\r\n", 2);
    int minor;
    if (!eol || sscanf(p, "HTTP/1.%d %3d", &minor, &c->status) != 2)
        return -1;
    c->close_after = minor == 0;
    c->framing = BODY_UNTIL_CLOSE;
    c->resp_ihcl = -1;
    char tmp[64];
    for (p = eol + 2; p < end; p = eol + 2) {
        eol = memmem(p, (size_t)(end - p), "\r\n", 2);
        if (!eol || eol == p)
            break;
        size_t n = (size_t)(eol - p);
        if (header_is(p, n, "Content-Length")) {
            char *stop;
            const char *v = header_value(p, n, tmp, sizeof tmp);
            unsigned long long cl = strtoull(v, &stop, 10);
            if (stop == v || cl > opt->max_response)
                return -1;
            if (c->framing != BODY_CHUNKED) {
                c->framing = BODY_LENGTH;
                c->content_length = (size_t)cl;
            }
        } else if (header_is(p, n, "Transfer-Encoding")) {
            if (strcasestr(header_value(p, n, tmp, sizeof tmp), "chunked"))
                c->framing = BODY_CHUNKED;
        } else if (header_is(p, n, "Connection")) {
            const char *v = header_value(p, n, tmp, sizeof tmp);
            if (strcasestr(v, "close"))
                c->close_after = 1;
            else if (strcasestr(v, "keep-alive"))
                c->close_after = 0;
        } else if (header_is(p, n, "Inference-Header-Content-Length")) {
            c->resp_ihcl =
                strtoll(header_value(p, n, tmp, sizeof tmp), NULL, 10);
        }
    }
    if (c->status == 204 || c->status == 304) {
        c->framing = BODY_LENGTH;
        c->content_length = 0;
    }
    return 0;
}

/* Decodes chunked input in place. Returns 1 when the whole body is in,
   0 when more input is needed, -1 when the framing is malformed. */
static int chunked_decode(const options *opt, connection *c) {
    for (;;) {
        char *p = c->buf + c->raw_pos;
        size_t avail = c->len - c->raw_pos;
        if (c->chunk == CHUNK_SIZE || c->chunk == CHUNK_TRAILER) {
            char *eol = memmem(p, avail, "\r\n", 2);
            if (!eol) {
                if (avail > 4096)
                    return -1;
                break;
            }
            c->raw_pos += (size_t)(eol - p) + 2;
            if (c->chunk == CHUNK_TRAILER) {
                if (eol != p)
                    continue; /* a trailer field: skip it */
                if (c->raw_pos != c->len)
                    return -1; /* bytes after the response */
                c->len = c->dec_end;
                return 1;
            }
            size_t size = 0;
            int digits = 0;
            for (; p < eol; p++, digits++) {
                int d = *p >= '0' && *p <= '9'   ? *p - '0'
                        : *p >= 'a' && *p <= 'f' ? *p - 'a' + 10
                        : *p >= 'A' && *p <= 'F' ? *p - 'A' + 10
                                                 : -1;
                if (d < 0)
                    break; /* chunk extension or blanks follow */
                size = size * 16 + (size_t)d;
                if (size > opt->max_response)
                    return -1;
            }
            if (!digits)
                return -1;
            c->chunk_left = size;
            c->chunk = size ? CHUNK_DATA : CHUNK_TRAILER;
        } else if (c->chunk == CHUNK_DATA) {
            size_t k = avail < c->chunk_left ? avail : c->chunk_left;
            if (k == 0)
                break;
            if (c->dec_end + k - c->head_end > opt->max_response)
                return -1;
            memmove(c->buf + c->dec_end, p, k);
            c->dec_end += k;
            c->raw_pos += k;
            c->chunk_left -= k;
            if (c->chunk_left == 0)
                c->chunk = CHUNK_DATA_END;
        } else { /* CHUNK_DATA_END: the CRLF after the data */
            if (avail < 2)
                break;
            if (p[0] != '\r' || p[1] != '\n')
                return -1;
            c->raw_pos += 2;
            c->chunk = CHUNK_SIZE;
        }
    }
    /* Move undecoded input down so the buffer only holds the body. */
    size_t rest = c->len - c->raw_pos;
    memmove(c->buf + c->dec_end, c->buf + c->raw_pos, rest);
    c->raw_pos = c->dec_end;
    c->len = c->dec_end + rest;
    return 0;
}

/* Advances response parsing after new bytes arrived at buf[old_len, len).
   Returns 1 when the response is complete, 0 for more, -1 on bad framing. */
static int conn_parse(const options *opt, connection *c, size_t old_len) {
    while (!c->head_end) {
        size_t from = old_len > 3 ? old_len - 3 : 0;
        char *hit = memmem(c->buf + from, c->len - from, "\r\n\r\n", 4);
        if (!hit)
            return c->len > MAX_HEAD_BYTES ? -1 : 0;
        size_t head_len = (size_t)(hit - c->buf) + 4;
        if (parse_head(opt, c, head_len))
            return -1;
        if (c->status >= 100 && c->status < 200) {
            /* Interim response: drop it and parse what follows. */
            memmove(c->buf, c->buf + head_len, c->len - head_len);
            c->len -= head_len;
            c->buf[c->len] = '\0';
            old_len = 0;
            continue;
        }
        c->head_end = head_len;
        if (c->framing == BODY_LENGTH &&
            conn_reserve(c, head_len + c->content_length + 1))
            return -1;
        if (c->framing == BODY_CHUNKED) {
            c->chunk = CHUNK_SIZE;
            c->dec_end = c->raw_pos = head_len;
        }
    }
    switch (c->framing) {
    case BODY_LENGTH: {
        size_t total = c->head_end + c->content_length;
        if (c->len > total)
            return -1; /* more bytes than the response carries */
        return c->len == total;
    }
    case BODY_CHUNKED:
        return chunked_decode(opt, c);
    case BODY_UNTIL_CLOSE:
        return c->len - c->head_end > opt->max_response ? -1 : 0;
    }
    return -1;
}

/* A whole response is in buf: account for it and start the next request. */
static void conn_complete(worker *w, connection *c) {
    const options *opt = w->opt;
    uint64_t now = loadgen_now_ns();
    int in_window = now >= w->measure_start && now < w->end;
    char *body = c->buf + c->head_end;
    size_t body_len = c->len - c->head_end;
    c->buf[c->len] = '\0'; /* conn_reserve always leaves room for it */
    uint64_t seq = c->seq++;

    if (c->status >= 0 && c->status < 600)
        w->results->status_counts[c->status]++;
    if (c->status != 200) {
        w->results->status_errors++;
        loadgen_record_error(w->results, "HTTP %d: %.300s", c->status, body);
    } else {
        char why[160];
        if (opt->load.verify_every > 0 &&
            seq % (uint64_t)opt->load.verify_every == 0 &&
            verify_response(opt, c, body, body_len, why, sizeof why)) {
            w->results->verify_errors++;
            loadgen_record_error(
                w->results, "bad response content: %s; body starts: %.200s",
                why, body);
        } else if (in_window) {
            w->results->ok++;
            w->results->req_bytes += c->req->body_len;
            w->results->resp_bytes += body_len;
            loadgen_record_latency(w->results, now - c->start_ns);
        }
    }

    int all_sent = c->sent == c->req->head_len + c->req->body_len;
    if (c->close_after || !all_sent) {
        conn_close(w, c);
        w->results->reconnects++;
        conn_open(w, c);
    } else {
        conn_begin_request(w, c);
    }
}

static void conn_receive(worker *w, connection *c) {
    const options *opt = w->opt;
    for (;;) {
        size_t want;
        if (c->head_end && c->framing == BODY_LENGTH) {
            want = c->head_end + c->content_length - c->len;
            if (want == 0)
                want = 1; /* only to detect a close or stray bytes */
            if (conn_reserve(c, c->len + want + 1)) {
                conn_fail(w, c, "out of memory for the response", 0);
                return;
            }
        } else {
            if (conn_reserve(c, c->len + RECV_SLACK + 1)) {
                conn_fail(w, c, "out of memory for the response", 0);
                return;
            }
            want = c->cap - c->len - 1;
        }
        ssize_t n = recv(c->fd, c->buf + c->len, want, 0);
        if (n > 0) {
            size_t old_len = c->len;
            c->len += (size_t)n;
            c->buf[c->len] = '\0'; /* for the string functions in parsing */
            int r = conn_parse(opt, c, old_len);
            if (r < 0) {
                conn_fail(w, c, "malformed HTTP response", 0);
                return;
            }
            if (r > 0) {
                conn_complete(w, c);
                return;
            }
        } else if (n == 0) {
            if (c->head_end && c->framing == BODY_UNTIL_CLOSE) {
                c->close_after = 1;
                conn_complete(w, c);
            } else {
                conn_fail(w, c, "server closed the connection", 0);
            }
            return;
        } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
            return;
        } else if (errno != EINTR) {
            conn_fail(w, c, "recv", errno);
            return;
        }
    }
}

static void conn_on_event(worker *w, connection *c, uint32_t events) {
    if (c->state == CONN_CONNECTING) {
        int err = 0;
        socklen_t len = sizeof err;
        getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len);
        if (err) {
            conn_fail(w, c, "connect", err);
            return;
        }
        c->state = CONN_SENDING;
        conn_send(w, c);
        return;
    }
    if (c->state == CONN_SENDING && (events & (EPOLLIN | EPOLLHUP)) == 0) {
        conn_send(w, c);
        return;
    }
    /* Readable: the response (or an early one while still sending). */
    conn_receive(w, c);
}

static void *worker_run(void *arg) {
    worker *w = arg;
    w->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (w->epfd < 0) {
        loadgen_record_error(w->results, "epoll_create1: %s", strerror(errno));
        w->results->io_errors++;
        return NULL;
    }
    for (int i = 0; i < w->n_conns; i++) {
        w->conns[i].fd = -1;
        conn_open(w, &w->conns[i]);
    }
    struct epoll_event events[256];
    for (;;) {
        uint64_t now = loadgen_now_ns();
        if (now >= w->end)
            break;
        uint64_t wake = w->end;
        if (w->n_backoff) {
            for (int i = 0; i < w->n_conns; i++) {
                connection *c = &w->conns[i];
                if (c->state != CONN_BACKOFF)
                    continue;
                if (c->retry_at <= now) {
                    w->n_backoff--;
                    w->results->reconnects++;
                    conn_open(w, c);
                } else if (c->retry_at < wake) {
                    wake = c->retry_at;
                }
            }
        }
        int timeout_ms = (int)((wake - now + 999999) / 1000000);
        int n = epoll_wait(w->epfd, events, 256, timeout_ms);
        if (n < 0 && errno != EINTR) {
            loadgen_record_error(w->results, "epoll_wait: %s", strerror(errno));
            break;
        }
        for (int i = 0; i < n; i++)
            conn_on_event(w, events[i].data.ptr, events[i].events);
    }
    for (int i = 0; i < w->n_conns; i++) {
        connection *c = &w->conns[i];
        if (c->state != CONN_BACKOFF)
            w->results->incomplete++;
        conn_close(w, c);
        free(c->buf);
    }
    close(w->epfd);
    return NULL;
}

/* ---- command line and report ------------------------------------------ */

static void usage(FILE *f) {
    fputs("usage: load_client --url HOST:PORT [options]\n"
          "  --url HOST:PORT       server; http:// and a path are accepted\n"
          "  --path PATH           request path (default: mode's endpoint)\n"
          "  --model NAME          model in the default path\n"
          "  --mode MODE           body to send (default json-simple):\n"
          "     json-simple          simple: INT32 [1,16] x2, JSON\n"
          "     binary-simple        simple: INT32 [1,16] x2, binary\n"
          "     binary-fp32          identity_fp32: FP32 [1,N], binary\n"
          "     json-fp32            identity_fp32: FP32 [1,N], JSON\n"
          "     raw                  --body-bytes N bytes (echo server)\n"
          "  --elements N          fp32 tensor length (16)\n"
          "  --body-bytes N        raw body length (1024)\n"
          "  --body-file FILE      send this file (no content check)\n"
          "  --ihcl N              with --body-file: the IHCL header\n"
          "  --content-type TYPE   override the Content-Type header\n"
          "  --method METHOD       request method (POST)\n"
          "  --concurrency N       connections, one request each (1)\n"
          "  --threads N           worker threads (1)\n"
          "  --duration S          measured seconds (3)\n"
          "  --warmup S            unmeasured seconds before that (0)\n"
          "  --verify-every N      check every Nth response; 0 off (1)\n"
          "  --max-response BYTES  largest response body (1 GiB)\n"
          "  --json                print one JSON object\n"
          "Every response must be 200 with the expected content; others\n"
          "count as errors. Exit status 0 when there were no errors and at\n"
          "least one request completed.\n",
          f);
}

/* loadgen_cli's use_url: splits [http://]HOST:PORT[/PATH] into the
   options' host, port and (unless --path gave one) path. */
static int parse_url(void *ctx, const char *url) {
    options *opt = ctx;
    if (strncmp(url, "http://", 7) == 0)
        url += 7;
    const char *slash = strchr(url, '/');
    size_t hp_len = slash ? (size_t)(slash - url) : strlen(url);
    const char *colon = memrchr(url, ':', hp_len);
    if (!colon || colon == url)
        return -1;
    size_t host_len = (size_t)(colon - url);
    size_t port_len = hp_len - host_len - 1;
    if (host_len >= sizeof opt->host || port_len == 0 ||
        port_len >= sizeof opt->port)
        return -1;
    memcpy(opt->host, url, host_len);
    opt->host[host_len] = '\0';
    memcpy(opt->port, colon + 1, port_len);
    opt->port[port_len] = '\0';
    if (slash && !opt->path)
        opt->path = slash;
    return 0;
}

/* loadgen_apply_fn for load_client's own options; ctx is the options. */
static int apply_option(void *ctx, const char *name, const char *val) {
    options *opt = ctx;
    long n = 0;
    if (strcmp(name, "--path") == 0) {
        opt->path = val;
    } else if (strcmp(name, "--method") == 0) {
        opt->method = val;
    } else if (strcmp(name, "--content-type") == 0) {
        opt->content_type = val;
    } else if (strcmp(name, "--body-file") == 0) {
        opt->body_file = val;
        opt->mode = MODE_FILE;
    } else if (strcmp(name, "--mode") == 0) {
        size_t m;
        for (m = 0; m < MODE_FILE; m++)
            if (strcmp(val, mode_names[m]) == 0)
                break;
        if (m == MODE_FILE)
            return -1;
        opt->mode = (body_mode)m;
    } else if (strcmp(name, "--body-bytes") == 0) {
        if (loadgen_parse_long(val, 0, &opt->body_bytes) ||
            opt->body_bytes > (1L << 30))
            return -1;
    } else if (strcmp(name, "--ihcl") == 0) {
        if (loadgen_parse_long(val, 0, &opt->ihcl))
            return -1;
    } else if (strcmp(name, "--max-response") == 0) {
        if (loadgen_parse_long(val, 1, &n))
            return -1;
        opt->max_response = (size_t)n;
    } else {
        return -1;
    }
    return 0;
}

int main(int argc, char **argv) {
    options opt = {
        .method = "POST",
        .mode = MODE_JSON_SIMPLE,
        .body_bytes = 1024,
        .ihcl = -1,
        .max_response = (size_t)1 << 30,
        .load = LOADGEN_OPTIONS_DEFAULT,
    };
    const loadgen_cli cli = {.prog = "load_client",
                             .apply = apply_option,
                             .use_url = parse_url,
                             .ctx = &opt};
    int parsed = loadgen_parse_args(&opt.load, argc, argv, &cli);
    if (parsed) {
        usage(parsed > 0 ? stdout : stderr);
        return parsed > 0 ? 0 : 2;
    }
    signal(SIGPIPE, SIG_IGN);

    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai;
    int gai = getaddrinfo(opt.host, opt.port, &hints, &ai);
    if (gai) {
        fprintf(stderr, "load_client: %s:%s: %s\n", opt.host, opt.port,
                gai_strerror(gai));
        return 2;
    }
    struct sockaddr_storage addr;
    socklen_t addr_len = ai->ai_addrlen;
    memcpy(&addr, ai->ai_addr, ai->ai_addrlen);
    freeaddrinfo(ai);

    /* Distinct bodies let batching mix-ups show; cap their total memory. */
    int result = 2;
    int n_variants = opt.mode == MODE_FILE ? 1
                     : opt.load.concurrency < MAX_VARIANTS
                         ? opt.load.concurrency
                         : MAX_VARIANTS;
    request_variant *variants = calloc((size_t)n_variants, sizeof *variants);
    worker *workers = calloc((size_t)opt.load.threads, sizeof *workers);
    connection *conns = calloc((size_t)opt.load.concurrency, sizeof *conns);
    loadgen_results *results = loadgen_results_new(opt.load.threads);
    if (!variants || !workers || !conns || !results) {
        fprintf(stderr, "load_client: out of memory\n");
        goto out;
    }
    for (int v = 0; v < n_variants; v++) {
        if (variant_build(&variants[v], &opt, v))
            goto out;
        if ((size_t)(v + 1) * variants[v].body_len > MAX_VARIANT_BYTES) {
            n_variants = v + 1; /* large bodies: fewer variants */
            break;
        }
    }

    uint64_t measure_start, end;
    loadgen_window(&opt.load, &measure_start, &end);
    int next_conn = 0;
    for (int t = 0; t < opt.load.threads; t++) {
        worker *w = &workers[t];
        int n = loadgen_thread_share(&opt.load, t);
        *w = (worker){.opt = &opt,
                      .addr = &addr,
                      .addr_len = addr_len,
                      .variants = variants,
                      .n_variants = n_variants,
                      .first_conn = next_conn,
                      .n_conns = n,
                      .measure_start = measure_start,
                      .end = end,
                      .conns = conns + next_conn,
                      .results = &results[t]};
        next_conn += n;
    }
    if (loadgen_run_threads(worker_run, workers, opt.load.threads,
                            sizeof *workers, "load_client"))
        goto out;

    char path_buf[512];
    char url[sizeof opt.host + sizeof opt.port + 1];
    snprintf(url, sizeof url, "%s:%s", opt.host, opt.port);
    loadgen_target target = {
        .mode = mode_names[opt.mode],
        .url = url,
        .path = default_path(&opt, path_buf, sizeof path_buf),
        .request_body_bytes = variants[0].body_len,
    };
    result = loadgen_report("load_client", &opt.load, &target, results,
                            opt.load.threads);

out:
    for (int v = 0; variants && v < n_variants; v++)
        variant_free(&variants[v]);
    loadgen_results_free(results, opt.load.threads);
    free(variants);
    free(workers);
    free(conns);
    return result;
}
