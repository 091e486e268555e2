#include "http_server.h"
#include "http_stream.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <microhttpd.h>

#include "array_grow.h"
#include "http_query.h"
#include "http_upgrade.h"
#include "json_util.h"
#include "osprey/clock.h"
#include "osprey/log.h"

/* Per-connection memory: MHD hands uploads to the access handler in pieces
 * of about half of it, so this sets the copy granularity of large bodies.
 * It also bounds the request line and headers, hence the query string.
 * And libmicrohttpd zeroes all of it after every request of a keep-alive
 * connection (MHD_pool_reset), which made it the largest cost of a small
 * request: at 512 KiB the memset was 86% of the server's instructions for
 * `simple` (callgrind, ~786,000 of 917,000 per request) and ~13 us of
 * CPU. 128 KiB keeps that to a few microseconds while a 16 MiB body still
 * comes in 64 KiB pieces (about 7-13% more CPU for it than 512 KiB). */
#define HTTP_CONNECTION_MEMORY (128 * 1024)
#define HTTP_CONNECTION_LIMIT 8192
#define HTTP_LISTEN_BACKLOG 1024
/* Triton's kMaxChunkedChunks. */
#define HTTP_MAX_CHUNKS 65536

struct http_server {
    struct MHD_Daemon *daemon;
    size_t max_input_size;
    int port;
    const http_surface *surfaces;
    size_t n_surfaces;
    atomic_int active; /* requests between their first call and completion */
    bool accepting;

    http_upgrades upgrades; /* connections taken over by surfaces */
};

typedef enum request_phase {
    PHASE_BODY = 0,  /* reading the body */
    PHASE_SUSPENDED, /* waiting for asynchronous work */
    PHASE_REPLIED,   /* a response was queued */
} request_phase;

typedef struct reply_header {
    char *name;
    char *value;
} reply_header;

typedef struct reply {
    bool set;
    unsigned status;
    const char *content_type;
    /* either a malloc'd body ... */
    char *body;
    size_t body_len;
    /* ... or parts released by a callback */
    http_part *parts;
    size_t n_parts;
    void (*release)(void *ctx);
    void *release_ctx;
    /* ... or a body written piece by piece (http_stream.h; a reference) */
    http_stream *stream;
} reply;

struct http_request {
    http_server *server;
    struct MHD_Connection *conn; /* NULL until the first access call */
    const char *path;            /* borrowed from MHD */
    const char *method_name;
    http_method method;
    request_phase phase;
    uint64_t start_ns;

    http_query query;

    /* framing */
    bool chunked;
    bool has_content_length;
    uint64_t content_length;
    uint64_t wire_bytes; /* body bytes as received */
    uint64_t body_bytes; /* decoded body bytes */
    uint64_t upload_calls;
    http_encoding encoding;
    http_inflater *inflater;
    bool discard;     /* drop the rest of the body */
    bool error_final; /* the recorded error can no longer be replaced */

    /* buffered body (handlers without on_body) */
    bytebuf body;
    bool body_too_large;

    /* the claiming surface (set while its route runs) and its handler */
    const http_surface *surface;
    const http_handler *handler;
    void *handler_ctx;

    /* a sampled trace (owned) */
    osp_trace *trace;

    /* outcome */
    osp_error *error;
    reply reply;
    reply_header *headers;
    size_t n_headers, cap_headers;
    bool headers_oom;
    bool close_connection;

    /* protocol upgrade: offered until upgrade_taken */
    const http_upgrade_handler *upgrade;
    void *upgrade_ctx;
    bool upgrade_taken; /* the socket went to the upgrade thread */

    /* asynchronous completion */
    pthread_mutex_t mu;
    bool async;      /* begin_async was called */
    bool async_done; /* http_request_resume was called */
    bool suspended;  /* MHD_suspend_connection is in effect */
    atomic_int refs; /* the connection + outstanding async work */
};

/* ---- request lifetime ---- */

static void reply_release(reply *r) {
    if (r->stream)
        http__stream_drop(r->stream);
    free(r->body);
    if (r->release)
        r->release(r->release_ctx);
    free(r->parts);
    memset(r, 0, sizeof *r);
}

static void upgrade_offer_drop(http_request *req);

static void request_free(http_request *req) {
    if (req->handler && req->handler->destroy)
        req->handler->destroy(req->handler_ctx);
    upgrade_offer_drop(req);
    if (req->trace) {
        /* The connection is done with the response (or the request ended
         * without one). */
        if (osp_trace_stamped(req->trace, OSP_TRACE_HTTP_SEND_START))
            osp_trace_stamp(req->trace, OSP_TRACE_HTTP_SEND_END, osp_now_ns());
        osp_trace_end(req->trace);
    }
    http_inflater_free(req->inflater);
    bytebuf_free(&req->body);
    osp_error_free(req->error);
    reply_release(&req->reply);
    for (size_t i = 0; i < req->n_headers; i++) {
        free(req->headers[i].name);
        free(req->headers[i].value);
    }
    free(req->headers);
    http_query_free(&req->query);
    if (!req->upgrade_taken) /* an upgraded one stopped counting then */
        atomic_fetch_sub(&req->server->active, 1);
    pthread_mutex_destroy(&req->mu);
    free(req);
}

static void request_unref(http_request *req) {
    if (atomic_fetch_sub(&req->refs, 1) == 1)
        request_free(req);
}

static http_method method_from_name(const char *m) {
    if (strcmp(m, "GET") == 0)
        return HTTP_METHOD_GET;
    if (strcmp(m, "POST") == 0)
        return HTTP_METHOD_POST;
    if (strcmp(m, "PUT") == 0)
        return HTTP_METHOD_PUT;
    if (strcmp(m, "DELETE") == 0)
        return HTTP_METHOD_DELETE;
    if (strcmp(m, "HEAD") == 0)
        return HTTP_METHOD_HEAD;
    return HTTP_METHOD_OTHER;
}

/* MHD's URI log callback: the first sight of a request, with the raw
 * request-target (query included, which MHD does not pass to the access
 * handler). Its result becomes the request's con_cls; on_completed frees
 * it. NULL on OOM (on_access then starts without a query). */
static void *on_uri(void *cls, const char *uri, struct MHD_Connection *conn) {
    (void)conn;
    http_server *server = cls;
    http_request *req = calloc(1, sizeof *req);
    if (!req)
        return NULL;
    if (pthread_mutex_init(&req->mu, NULL) != 0) {
        free(req);
        return NULL;
    }
    req->server = server;
    atomic_init(&req->refs, 1);
    atomic_fetch_add(&server->active, 1);
    bytebuf_init(&req->body);
    if (!http_query_parse(&req->query, uri))
        http_request_fail(req, osp_error_new(OSP_ERROR_UNAVAILABLE,
                                             "out of memory reading the "
                                             "query string"));
    return req;
}

/* The first access-handler call: headers are in. req comes from on_uri or
 * is NULL (allocated here). NULL on OOM. */
static http_request *request_start(http_server *server, http_request *req,
                                   struct MHD_Connection *conn, const char *url,
                                   const char *method) {
    if (!req && !(req = on_uri(server, url, conn)))
        return NULL;
    req->start_ns = osp_now_ns();
    req->conn = conn;
    req->path = url;
    req->method_name = method;
    req->method = method_from_name(method);

    const char *te =
        MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Transfer-Encoding");
    /* libmicrohttpd 0.9.75 lets Transfer-Encoding win over Content-Length
     * (RFC 7230 3.3.3), which is what Triton does too. */
    req->chunked = te != NULL;
    const char *cl =
        MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Length");
    if (cl) {
        char *end;
        errno = 0;
        unsigned long long v = strtoull(cl, &end, 10);
        if (errno == 0 && end != cl) {
            req->has_content_length = true;
            req->content_length = v;
        }
    }
    return req;
}

/* ---- errors and replies ---- */

void http_request_fail(http_request *req, osp_error *err) {
    if (!err)
        return;
    if (req->error || req->error_final) {
        osp_error_free(err);
        return;
    }
    req->error = err;
    req->discard = true;
}

/* A decompression error replaces whatever was recorded before, and ends
 * all further processing of the body. */
static void fail_decompress(http_request *req, osp_error *err) {
    osp_error_free(req->error);
    req->error = err;
    req->discard = true;
    req->error_final = true;
}

void http_reply(http_request *req, unsigned status, const char *content_type,
                char *body, size_t len) {
    reply_release(&req->reply);
    req->reply.set = true;
    req->reply.status = status;
    req->reply.content_type = content_type;
    req->reply.body = body;
    req->reply.body_len = body ? len : 0;
}

http_stream *http_reply_stream(http_request *req, unsigned status,
                               const char *content_type) {
    http_stream *s = http__stream_new();
    if (!s) {
        http_reply_error_status(req, 500, "out of memory");
        return NULL;
    }
    reply_release(&req->reply);
    req->reply.set = true;
    req->reply.status = status;
    req->reply.content_type = content_type;
    req->reply.stream = s;
    return s;
}

void http_reply_error_status(http_request *req, unsigned status,
                             const char *message) {
    bytebuf b;
    bytebuf_init(&b);
    bytebuf_puts(&b, "{\"error\":");
    json_write_cstr(&b, message);
    bytebuf_putc(&b, '}');
    size_t len;
    char *body = bytebuf_take(&b, &len);
    http_reply(req, status, "application/json", body, body ? len : 0);
}

/* Errors of requests no surface claimed, and of surfaces without a
 * renderer: the transport's own errors are INVALID_ARG (framing) and
 * UNAVAILABLE (memory). */
static void default_reply_error(http_request *req, osp_error *err) {
    osp_error_code code = osp_error_get_code(err);
    unsigned status = code == OSP_ERROR_INVALID_ARG   ? 400
                      : code == OSP_ERROR_UNAVAILABLE ? 503
                                                      : 500;
    http_reply_error_status(req, status, osp_error_message(err));
}

void http_reply_error(http_request *req, osp_error *err) {
    if (req->surface && req->surface->reply_error)
        req->surface->reply_error(req, err);
    else
        default_reply_error(req, err);
    osp_error_free(err);
}

void http_reply_parts(http_request *req, unsigned status,
                      const char *content_type, const http_part *parts,
                      size_t n_parts, void (*release)(void *ctx),
                      void *release_ctx) {
    reply_release(&req->reply);
    http_part *copy = calloc(n_parts ? n_parts : 1, sizeof *copy);
    if (!copy) {
        if (release)
            release(release_ctx);
        http_reply_error_status(req, 503, "out of memory");
        return;
    }
    memcpy(copy, parts, n_parts * sizeof *copy);
    req->reply.set = true;
    req->reply.status = status;
    req->reply.content_type = content_type;
    req->reply.parts = copy;
    req->reply.n_parts = n_parts;
    req->reply.release = release;
    req->reply.release_ctx = release_ctx;
}

void http_reply_header(http_request *req, const char *name, const char *value) {
    if (!array_grow((void **)&req->headers, &req->cap_headers,
                    req->n_headers + 1, sizeof *req->headers)) {
        req->headers_oom = true;
        return;
    }
    reply_header *h = &req->headers[req->n_headers];
    h->name = strdup(name);
    h->value = strdup(value);
    if (!h->name || !h->value) {
        free(h->name);
        free(h->value);
        req->headers_oom = true;
        return;
    }
    req->n_headers++;
}

static void release_parts_cb(void *cls) {
    reply *r = cls;
    if (r->release)
        r->release(r->release_ctx);
    free(r->parts);
    free(r);
}

/* Builds the MHD response for a recorded reply; the body or parts move into
 * it. NULL on OOM (everything is then released). */
static struct MHD_Response *create_response(reply *r,
                                            struct MHD_Connection *conn) {
    struct MHD_Response *resp = NULL;
    if (r->stream) {
        if ((resp = http__stream_response(r->stream, conn)))
            r->stream = NULL; /* the response holds it now */
        return resp;
    }
    if (r->parts) {
        /* The parts move to the heap so MHD's free callback can release
         * them whenever it is done sending. */
        reply *owned = malloc(sizeof *owned);
        struct MHD_IoVec *iov =
            calloc(r->n_parts ? r->n_parts : 1, sizeof *iov);
        if (owned && iov) {
            *owned = *r;
            r->parts = NULL;
            r->n_parts = 0;
            r->release = NULL;
            for (size_t i = 0; i < owned->n_parts; i++) {
                iov[i].iov_base = owned->parts[i].base;
                iov[i].iov_len = owned->parts[i].len;
            }
            resp = MHD_create_response_from_iovec(iov, (unsigned)owned->n_parts,
                                                  release_parts_cb, owned);
            if (!resp)
                release_parts_cb(owned);
        } else {
            free(owned);
            reply_release(r);
        }
        free(iov);
        return resp;
    }
    if (r->body_len > 0) {
        resp = MHD_create_response_from_buffer(r->body_len, r->body,
                                               MHD_RESPMEM_MUST_FREE);
        if (resp) {
            r->body = NULL; /* MHD frees it now */
            r->body_len = 0;
        }
        return resp;
    }
    return MHD_create_response_from_buffer(0, (void *)"",
                                           MHD_RESPMEM_PERSISTENT);
}

static void on_upgraded(void *cls, struct MHD_Connection *conn, void *con_cls,
                        const char *extra_in, size_t extra_in_size,
                        MHD_socket sock, struct MHD_UpgradeResponseHandle *urh);

/* Queues the recorded reply (or the recorded error as a reply, or the 101
 * of an upgrade). */
static enum MHD_Result queue_reply(http_request *req) {
    if (req->error) {
        osp_error *err = req->error;
        req->error = NULL;
        http_reply_error(req, err);
        upgrade_offer_drop(req); /* the error wins over an upgrade */
    }
    bool upgrade = req->upgrade && !req->reply.set;
    if (!upgrade && !req->reply.set)
        http_reply_error_status(req, 500, "no response was produced");
    unsigned status =
        upgrade ? MHD_HTTP_SWITCHING_PROTOCOLS : req->reply.status;
    const char *content_type = upgrade ? NULL : req->reply.content_type;
    struct MHD_Response *resp =
        upgrade ? MHD_create_response_for_upgrade(on_upgraded, req)
                : create_response(&req->reply, req->conn);
    reply_release(&req->reply);
    req->phase = PHASE_REPLIED;
    if (!resp || req->headers_oom) {
        if (resp)
            MHD_destroy_response(resp);
        return MHD_NO;
    }
    if (content_type)
        MHD_add_response_header(resp, "Content-Type", content_type);
    for (size_t i = 0; i < req->n_headers; i++)
        MHD_add_response_header(resp, req->headers[i].name,
                                req->headers[i].value);
    if (req->close_connection && !upgrade)
        MHD_add_response_header(resp, "Connection", "close");
    enum MHD_Result rc = MHD_queue_response(req->conn, status, resp);
    MHD_destroy_response(resp);
    return rc;
}

/* ---- body ---- */

osp_error *http_json_size_error(uint64_t n, size_t max) {
    return osp_error_new_reason(
        OSP_ERROR_INVALID_ARG, OSP_REASON_TOO_LARGE,
        "request JSON size of %llu bytes exceeds the maximum "
        "allowed input size of %zu bytes. Use "
        "--http-max-input-size to increase the limit.",
        (unsigned long long)n, max);
}

static osp_error *decompressed_size_error(size_t max) {
    return osp_error_new_reason(
        OSP_ERROR_INVALID_ARG, OSP_REASON_TOO_LARGE,
        "Decompressed data size exceeds the maximum allowed "
        "value of %zu bytes. Use --http-max-input-size to "
        "increase the limit.",
        max);
}

/* Decoded bytes go to the handler or into the buffered body. Handler
 * errors are recorded here; the only error returned (to stop inflating) is
 * the decompressed-size limit. */
static osp_error *sink_decoded(void *ctx, const char *data, size_t len) {
    http_request *req = ctx;
    size_t max = http_request_max_input_size(req);
    req->body_bytes += len;
    if (req->inflater && req->body_bytes > max)
        return decompressed_size_error(max);
    if (req->discard || req->reply.set || !req->handler)
        return NULL;
    if (req->handler->on_body) {
        http_request_fail(req, req->handler->on_body(req, data, len));
        return NULL;
    }
    if (req->body_too_large)
        return NULL;
    if (req->body_bytes > max) {
        req->body_too_large = true;
        bytebuf_free(&req->body);
        return NULL;
    }
    bytebuf_put(&req->body, data, len);
    if (req->body.oom)
        http_request_fail(req, osp_error_new(OSP_ERROR_UNAVAILABLE,
                                             "out of memory reading the "
                                             "request body"));
    return NULL;
}

/* One upload piece from MHD. */
static void feed_body(http_request *req, const char *data, size_t len) {
    req->wire_bytes += len;
    if (req->error_final)
        return;
    if (req->chunked) {
        /* MHD delivers at most one chunk per call, so calls bound the
         * number of non-empty chunks from above; a large chunk read in
         * several pieces is counted more than once, which is why the cap
         * only applies while the pieces are small on average. */
        req->upload_calls++;
        if (req->upload_calls > HTTP_MAX_CHUNKS &&
            req->wire_bytes / req->upload_calls < 4096) {
            /* Replaces any other error; Triton also closes afterwards. */
            osp_error_free(req->error);
            req->error = osp_error_new_reason(
                OSP_ERROR_INVALID_ARG, OSP_REASON_TOO_LARGE,
                "Chunked request body exceeds maximum of %d non-empty "
                "chunks. Send fewer or larger HTTP chunks.",
                HTTP_MAX_CHUNKS);
            req->discard = true;
            req->error_final = true;
            req->close_connection = true;
            return;
        }
    }
    if (req->inflater) {
        /* Inflate even after a handler error, to apply the decompressed
         * size limit, whose error takes precedence. */
        osp_error *err =
            http_inflater_feed(req->inflater, data, len, sink_decoded, req);
        if (err)
            fail_decompress(req, err);
        return;
    }
    sink_decoded(req, data, len);
}

/* ---- the access handler ---- */

static void route(http_request *req) {
    http_server *server = req->server;
    for (size_t i = 0; i < server->n_surfaces; i++) {
        const http_surface *s = &server->surfaces[i];
        req->surface = s;
        if (s->route(req, s->surface_ctx))
            return;
        req->surface = NULL;
    }
    http_reply_error_status(req, 404, "Not Found");
    req->discard = true;
}

/* The asynchronous work is done: the response starts being built. */
static void run_on_resume(http_request *req) {
    if (req->trace)
        osp_trace_stamp(req->trace, OSP_TRACE_HTTP_SEND_START, osp_now_ns());
    if (req->handler->on_resume)
        http_request_fail(req, req->handler->on_resume(req));
}

/* The body is complete: ask the handler for a reply, or suspend. Returns
 * true when the connection was suspended. */
static bool complete_request(http_request *req) {
    if (req->inflater && req->wire_bytes == 0 && !req->error_final)
        fail_decompress(req, osp_error_new(OSP_ERROR_INVALID_ARG,
                                           "nothing to be decompressed"));
    else if (req->inflater && !req->error_final &&
             !http_inflater_done(req->inflater))
        fail_decompress(req, osp_error_new(OSP_ERROR_INVALID_ARG,
                                           "Failed to decompress data: the "
                                           "compressed body is truncated"));
    if (req->error || req->reply.set || !req->handler)
        return false;
    if (req->body_too_large) {
        http_request_fail(
            req, http_json_size_error(req->body_bytes,
                                      http_request_max_input_size(req)));
        return false;
    }
    if (req->trace)
        osp_trace_stamp(req->trace, OSP_TRACE_HTTP_RECV_END, osp_now_ns());
    osp_error *err = req->handler->on_complete(req);
    if (err) {
        http_request_fail(req, err);
        return false;
    }
    if (req->reply.set && !req->async && req->trace)
        osp_trace_stamp(req->trace, OSP_TRACE_HTTP_SEND_START, osp_now_ns());
    if (req->reply.set || !req->async)
        return false;
    pthread_mutex_lock(&req->mu);
    bool done = req->async_done;
    if (!done) {
        req->suspended = true;
        req->phase = PHASE_SUSPENDED;
        MHD_suspend_connection(req->conn);
    }
    pthread_mutex_unlock(&req->mu);
    if (done)
        run_on_resume(req);
    return !done;
}

static enum MHD_Result on_access(void *cls, struct MHD_Connection *conn,
                                 const char *url, const char *method,
                                 const char *version, const char *upload_data,
                                 size_t *upload_data_size, void **con_cls) {
    (void)version;
    http_server *server = cls;
    http_request *req = *con_cls;

    if (!req || !req->conn) {
        /* First call: headers only. Never queue a reply here. */
        req = request_start(server, req, conn, url, method);
        if (!req)
            return MHD_NO;
        *con_cls = req;
        route(req);
        return MHD_YES;
    }
    if (*upload_data_size > 0) {
        feed_body(req, upload_data, *upload_data_size);
        *upload_data_size = 0;
        return MHD_YES;
    }
    switch (req->phase) {
    case PHASE_BODY:
        if (complete_request(req))
            return MHD_YES;
        break;
    case PHASE_SUSPENDED:
        req->phase = PHASE_BODY;
        run_on_resume(req);
        break;
    case PHASE_REPLIED:
        return MHD_YES;
    }
    return queue_reply(req);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
    (void)cls;
    (void)conn;
    http_request *req = *con_cls;
    if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK && req)
        OSP_LOG_VERBOSE("HTTP request %s %s ended early (code %d)",
                        req->method_name, req->path, (int)toe);
    *con_cls = NULL;
    if (req)
        request_unref(req);
}

/* Triton routes on the raw path, so MHD must not URL-decode it. */
static size_t keep_escaped(void *cls, struct MHD_Connection *conn, char *uri) {
    (void)cls;
    (void)conn;
    return strlen(uri);
}

/* ---- asynchronous completion ---- */

void http_request_begin_async(http_request *req) {
    atomic_fetch_add(&req->refs, 1);
    req->async = true;
}

void http_request_resume(http_request *req) {
    pthread_mutex_lock(&req->mu);
    req->async_done = true;
    bool suspended = req->suspended;
    req->suspended = false;
    struct MHD_Connection *conn = req->conn;
    pthread_mutex_unlock(&req->mu);
    /* A suspended connection cannot complete, so conn stays valid until
     * the resume below is processed by its MHD thread. */
    if (suspended)
        MHD_resume_connection(conn);
    request_unref(req);
}

/* ---- accessors ---- */

void *http_request_surface_ctx(const http_request *req) {
    return req->surface ? req->surface->surface_ctx : NULL;
}

uint64_t http_request_start_ns(const http_request *req) {
    return req->start_ns;
}

const char *http_request_raw_query(const http_request *req) {
    return req->query.raw;
}

const char *http_request_query(const http_request *req, const char *key) {
    return http_query_get(&req->query, key);
}

size_t http_request_query_params(const http_request *req,
                                 const http_query_param **out) {
    *out = req->query.params;
    return req->query.n;
}

bool http_request_query_truncated(const http_request *req) {
    return req->query.truncated;
}

void http_request_set_trace(http_request *req, osp_trace *trace) {
    if (!trace)
        return;
    if (req->trace) /* one trace per request; a second one just ends */
        osp_trace_end(req->trace);
    req->trace = trace;
    osp_trace_stamp(trace, OSP_TRACE_HTTP_RECV_START, req->start_ns);
}

osp_trace *http_request_trace(const http_request *req) {
    return req->trace;
}

http_method http_request_method(const http_request *req) {
    return req->method;
}

const char *http_request_method_name(const http_request *req) {
    return req->method_name;
}

const char *http_request_path(const http_request *req) {
    return req->path;
}

const char *http_request_header(const http_request *req, const char *name) {
    return MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, name);
}

typedef struct header_visit {
    bool (*fn)(void *ctx, const char *name, const char *value);
    void *ctx;
} header_visit;

static enum MHD_Result visit_header(void *cls, enum MHD_ValueKind kind,
                                    const char *key, const char *value) {
    (void)kind;
    header_visit *v = cls;
    return v->fn(v->ctx, key, value ? value : "") ? MHD_YES : MHD_NO;
}

void http_request_header_foreach(const http_request *req,
                                 bool (*fn)(void *ctx, const char *name,
                                            const char *value),
                                 void *ctx) {
    header_visit v = {fn, ctx};
    MHD_get_connection_values(req->conn, MHD_HEADER_KIND, visit_header, &v);
}

size_t http_request_max_input_size(const http_request *req) {
    if (req->surface && req->surface->max_input_size)
        return req->surface->max_input_size;
    return req->server->max_input_size;
}

bool http_request_decoded_length(const http_request *req, uint64_t *out) {
    if (!req->has_content_length || req->chunked ||
        req->encoding != HTTP_ENCODING_IDENTITY)
        return false;
    *out = req->content_length;
    return true;
}

uint64_t http_request_body_bytes(const http_request *req) {
    return req->body_bytes;
}

const char *http_request_body(const http_request *req, size_t *len) {
    *len = req->body.len;
    if (!req->body.data)
        return NULL;
    req->body.data[req->body.len] = '\0'; /* bytebuf keeps a spare byte */
    return req->body.data;
}

void http_request_set_handler(http_request *req, const http_handler *handler,
                              void *handler_ctx) {
    req->handler = handler;
    req->handler_ctx = handler_ctx;
    if (handler->decode_body) {
        req->encoding =
            http_content_encoding(http_request_header(req, "Content-Encoding"));
        if (req->encoding == HTTP_ENCODING_UNKNOWN) {
            http_reply_header(req, "Accept-Encoding", "gzip, deflate");
            http_request_fail(req,
                              osp_error_new(OSP_ERROR_UNSUPPORTED,
                                            "Unsupported compression type"));
        } else if (req->encoding != HTTP_ENCODING_IDENTITY) {
            req->inflater = http_inflater_new();
            if (!req->inflater)
                http_request_fail(
                    req, osp_error_new(OSP_ERROR_INTERNAL,
                                       "failed to initialize state for data "
                                       "decompression"));
        }
    } else if (!handler->on_body && req->has_content_length && !req->chunked &&
               req->content_length > http_request_max_input_size(req)) {
        /* Known too large up front: do not buffer any of it. */
        req->body_too_large = true;
    }
}

void *http_request_handler_ctx(const http_request *req) {
    return req->handler_ctx;
}

/* ---- protocol upgrade ---- */

void http_request_upgrade(http_request *req, const char *protocol,
                          const http_upgrade_handler *h, void *ctx) {
    upgrade_offer_drop(req); /* a second offer replaces the first */
    req->upgrade = h;
    req->upgrade_ctx = ctx;
    reply_release(&req->reply);
    http_reply_header(req, "Upgrade", protocol);
}

/* The upgrade did not happen (or is replaced): the surface's ctx is
 * returned through on_close. */
static void upgrade_offer_drop(http_request *req) {
    const http_upgrade_handler *h = req->upgrade;
    if (!h || req->upgrade_taken)
        return;
    req->upgrade = NULL;
    if (h->on_close)
        h->on_close(req->upgrade_ctx);
}

/* MHD, on the connection's thread, after the 101 went out: the socket and
 * the bytes read past the request head go to the upgrade thread. */
static void on_upgraded(void *cls, struct MHD_Connection *conn, void *con_cls,
                        const char *extra_in, size_t extra_in_size,
                        MHD_socket sock,
                        struct MHD_UpgradeResponseHandle *urh) {
    (void)conn;
    (void)con_cls;
    http_request *req = cls;
    if (!http_upgrades_adopt(&req->server->upgrades, req->upgrade,
                             req->upgrade_ctx, sock, urh, extra_in,
                             extra_in_size))
        return; /* the offer stays with the request, which returns ctx */
    req->upgrade_taken = true;
    atomic_fetch_sub(&req->server->active, 1); /* drain does not wait */
}

/* ---- server ---- */

bool http_parse_address(const char *address, int port,
                        struct sockaddr_storage *ss, bool *ipv6) {
    memset(ss, 0, sizeof *ss);
    struct sockaddr_in *in4 = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;
    if (inet_pton(AF_INET, address, &in4->sin_addr) == 1) {
        in4->sin_family = AF_INET;
        in4->sin_port = htons((uint16_t)port);
        *ipv6 = false;
        return true;
    }
    if (inet_pton(AF_INET6, address, &in6->sin6_addr) == 1) {
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons((uint16_t)port);
        *ipv6 = true;
        return true;
    }
    return false;
}

/* Frees a server whose daemon is not running (or already stopped). */
static void server_free_parts(http_server *server) {
    http_upgrades_stop(&server->upgrades);
    http_upgrades_destroy(&server->upgrades);
    free(server);
}

osp_error *http_server_start(const http_server_options *opts,
                             http_server **out) {
    struct sockaddr_storage ss;
    bool ipv6;
    const char *name = opts->name ? opts->name : "HTTP";
    if (opts->port < 0 || opts->port > 65535)
        return osp_error_new(OSP_ERROR_INVALID_ARG, "invalid %s port %d", name,
                             opts->port);
    if (!http_parse_address(opts->address, opts->port, &ss, &ipv6))
        return osp_error_new(OSP_ERROR_INVALID_ARG, "invalid %s address '%s'",
                             name, opts->address);
    http_server *server = calloc(1, sizeof *server);
    if (!server)
        return osp_error_out_of_memory();
    server->max_input_size = opts->max_input_size;
    server->surfaces = opts->surfaces;
    server->n_surfaces = opts->n_surfaces;
    atomic_init(&server->active, 0);
    osp_error *err = http_upgrades_start(&server->upgrades);
    if (err) {
        server_free_parts(server);
        return osp_error_wrap(err, "failed to start the %s service", name);
    }

    /* poll(), not epoll: libmicrohttpd 0.9.75's edge-triggered epoll loop
     * misses a client's close that arrives together with the last body
     * bytes (the connection then sits in CLOSE-WAIT forever, with its
     * request state), and one epoll thread stalls with many keep-alive
     * connections. Level-triggered poll over a thread pool has neither
     * problem; each pool thread polls only its own connections. */
    unsigned int flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL |
                         MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ITC |
                         MHD_ALLOW_UPGRADE;
    if (ipv6)
        flags |= MHD_USE_IPv6;
    if (osp_log_verbose() > 0)
        flags |= MHD_USE_ERROR_LOG;
    /* Always a pool of at least two threads. */
    unsigned int threads =
        opts->thread_count > 2 ? (unsigned)opts->thread_count : 2u;
    unsigned int conn_limit = opts->connection_limit
                                  ? opts->connection_limit
                                  : (unsigned)HTTP_CONNECTION_LIMIT;
    server->daemon = MHD_start_daemon(
        flags, (uint16_t)opts->port, NULL, NULL, on_access, server,
        MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
        MHD_OPTION_THREAD_POOL_SIZE, threads,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)HTTP_CONNECTION_MEMORY,
        MHD_OPTION_CONNECTION_LIMIT, conn_limit, MHD_OPTION_LISTEN_BACKLOG_SIZE,
        (unsigned int)HTTP_LISTEN_BACKLOG, MHD_OPTION_CONNECTION_TIMEOUT,
        opts->connection_timeout_s, MHD_OPTION_NOTIFY_COMPLETED, on_completed,
        server, MHD_OPTION_URI_LOG_CALLBACK, on_uri, server,
        MHD_OPTION_UNESCAPE_CALLBACK, keep_escaped, server, MHD_OPTION_END);
    if (!server->daemon) {
        server_free_parts(server);
        return osp_error_new(OSP_ERROR_UNAVAILABLE,
                             "failed to start the %s service at %s:%d", name,
                             opts->address, opts->port);
    }
    const union MHD_DaemonInfo *info =
        MHD_get_daemon_info(server->daemon, MHD_DAEMON_INFO_BIND_PORT);
    server->port = info ? info->port : opts->port;
    server->accepting = true;
    *out = server;
    return NULL;
}

int http_server_port(const http_server *server) {
    return server->port;
}

void http_server_stop_accepting(http_server *server) {
    if (!server->accepting)
        return;
    server->accepting = false;
    MHD_socket fd = MHD_quiesce_daemon(server->daemon);
    if (fd != MHD_INVALID_SOCKET)
        close(fd);
}

bool http_server_drain(http_server *server, int timeout_ms) {
    struct timespec delay = {0, 10 * 1000 * 1000};
    for (int waited = 0; atomic_load(&server->active) > 0; waited += 10) {
        if (waited >= timeout_ms)
            return false;
        nanosleep(&delay, NULL);
    }
    return true;
}

void http_server_free(http_server *server) {
    if (!server)
        return;
    /* Every upgraded socket goes back to MHD before it stops. */
    http_upgrades_stop(&server->upgrades);
    MHD_stop_daemon(server->daemon);
    server_free_parts(server);
}
