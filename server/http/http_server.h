/*
 * The HTTP front door on libmicrohttpd: one daemon, a thread pool, and per
 * request a small state machine that streams the body (decoding
 * Content-Encoding when the handler asks), enforces the body limits, and
 * hands the request to a protocol surface (KServe v2 now; TF Serving and the
 * queue API later) through a handler table.
 *
 * Threading: every callback of a request runs on the MHD thread that owns
 * its connection, except http_request_resume, which any thread may call.
 * Replies are queued only after the body has been read completely, never in
 * the first access-handler call (libmicrohttpd 0.9.75 would close the
 * connection otherwise), so errors found early are kept and the rest of the
 * body is drained and discarded.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "http_compress.h"
#include "osprey/error.h"
#include "osprey/server.h"
#include "osprey/trace.h"

typedef struct http_server http_server;
typedef struct http_request http_request;

typedef enum http_method {
    HTTP_METHOD_OTHER = 0,
    HTTP_METHOD_GET,
    HTTP_METHOD_POST,
    HTTP_METHOD_PUT,
    HTTP_METHOD_DELETE,
    HTTP_METHOD_HEAD,
} http_method;

/* How a surface processes one request it has claimed. */
typedef struct http_handler {
    /* Decoded body bytes as they arrive (borrowed). NULL: the body is
     * buffered instead, bounded by the max input size, and read with
     * http_request_body(). An error rejects the request; the rest of the
     * body is then discarded. */
    osp_error *(*on_body)(http_request *req, const char *data, size_t len);
    /* The whole body is in and no error is pending. Sets a reply, or starts
     * asynchronous work after http_request_begin_async(). A returned error
     * becomes the reply. */
    osp_error *(*on_complete)(http_request *req);
    /* (optional) The asynchronous work has called http_request_resume();
     * sets the reply. */
    osp_error *(*on_resume)(http_request *req);
    /* (optional) Frees the handler context; called once, last. */
    void (*destroy)(void *handler_ctx);
    /* Decode gzip/deflate request bodies (Triton does so for inference
     * only). Other codings get 501 "Unsupported compression type". */
    bool decode_body;
} http_handler;

/* A protocol surface: claims the requests whose path it serves. */
typedef struct http_surface {
    const char *name;
    /* Called once per request when its headers are in. Returns false when
     * the path is not this surface's. Otherwise it has called
     * http_request_set_handler() or set a reply / error. */
    bool (*route)(http_request *req, void *surface_ctx);
    void *surface_ctx;
} http_surface;

typedef struct http_server_options {
    const char *address; /* IPv4 or IPv6 literal; borrowed during start */
    int port;            /* 0 = pick a free port */
    int thread_count;    /* MHD worker threads; at least 2 are used */
    size_t max_input_size;
    const http_surface *surfaces; /* borrowed for the server's lifetime */
    size_t n_surfaces;
    osp_tracer *tracer; /* borrowed for the server's lifetime; may be NULL */
} http_server_options;

/* Fills *ss with the IPv4 or IPv6 `address` and `port`; sets *ipv6.
 * false when the address is neither. Shared by every daemon Osprey
 * starts (the HTTP service and the metrics service). */
struct sockaddr_storage;
bool http_parse_address(const char *address, int port,
                        struct sockaddr_storage *ss, bool *ipv6);

/* Binds and starts serving. `core` is borrowed for the server's lifetime.
 * Caller owns *out. */
osp_error *http_server_start(const http_server_options *opts, osp_server *core,
                             http_server **out);
/* The port actually bound. */
int http_server_port(const http_server *server);
/* Stops accepting connections (existing ones keep being served). */
void http_server_stop_accepting(http_server *server);
/* Waits until no request is in progress, up to timeout_ms. Returns false on
 * timeout (then http_server_free must not be called: connections may be
 * suspended inside libmicrohttpd). */
bool http_server_drain(http_server *server, int timeout_ms);
/* Stops the daemon and frees. Only after a successful drain (or when no
 * request ever started asynchronous work). */
void http_server_free(http_server *server);

/* ---- request accessors (valid until the request completes) ---- */

osp_server *http_request_core(const http_request *req);
/* The tracer of http_server_options (NULL when none). */
osp_tracer *http_request_tracer(const http_request *req);
http_method http_request_method(const http_request *req);
const char *http_request_method_name(const http_request *req);
/* The path without the query string, not URL-decoded (as Triton routes). */
const char *http_request_path(const http_request *req);
/* A request header (case-insensitive name) or NULL. */
const char *http_request_header(const http_request *req, const char *name);
size_t http_request_max_input_size(const http_request *req);
/* Content-Length when the header is present and the body is neither
 * chunked nor compressed, i.e. when it is the size of the decoded body. */
bool http_request_decoded_length(const http_request *req, uint64_t *out);
/* Decoded body bytes received so far (the total once complete). */
uint64_t http_request_body_bytes(const http_request *req);
/* The buffered body (handlers without on_body), NUL-terminated; NULL with
 * *len 0 when the body was empty. */
const char *http_request_body(const http_request *req, size_t *len);

void http_request_set_handler(http_request *req, const http_handler *handler,
                              void *handler_ctx);
void *http_request_handler_ctx(const http_request *req);

/* Records an error reply (ownership of err moves); the rest of the body is
 * discarded. The first recorded error wins, except that decompression
 * errors replace earlier ones, as Triton decompresses before anything
 * else. */
void http_request_fail(http_request *req, osp_error *err);

/* ---- replies ---- */

/* Status and body (ownership of body moves; malloc'd, may be NULL with
 * len 0). content_type may be NULL (no header). */
void http_reply(http_request *req, unsigned status, const char *content_type,
                char *body, size_t len);
/* {"error":"<message>"} with the status of the error code; frees err. */
void http_reply_error(http_request *req, osp_error *err);
/* Triton's 400 for a JSON body of n bytes over the --http-max-input-size
 * limit `max`. */
osp_error *http_json_size_error(uint64_t n, size_t max);
/* {"error":"<message>"} with an explicit status. */
void http_reply_error_status(http_request *req, unsigned status,
                             const char *message);
/* A body made of parts sent without copying; release(release_ctx) runs
 * once when the response is done with them (also when queuing fails). */
void http_reply_parts(http_request *req, unsigned status,
                      const char *content_type, const http_part *parts,
                      size_t n_parts, void (*release)(void *ctx),
                      void *release_ctx);
/* Adds a response header (both strings copied). */
void http_reply_header(http_request *req, const char *name, const char *value);

/* ---- asynchronous completion ---- */

/* Called from on_complete before starting work that will finish on another
 * thread; the connection is suspended when on_complete returns without a
 * reply. Keeps the request alive until http_request_resume(). */
void http_request_begin_async(http_request *req);
/* From any thread, exactly once after begin_async: on_resume then runs on
 * the connection's thread. Safe even before on_complete has returned. */
void http_request_resume(http_request *req);
