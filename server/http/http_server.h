/*
 * The HTTP front door on libmicrohttpd: one daemon, a thread pool, and per
 * request a small state machine that streams the body (decoding
 * Content-Encoding when the handler asks), enforces the body limits, decodes
 * the query string, stamps the HTTP steps of a sampled trace, and hands the
 * request to a protocol surface (KServe v2, metrics; TF Serving and the
 * queue API later) through a handler table. Each surface renders its own
 * errors. Upgraded connections (WebSocket) are handed to the surface and
 * served by one poll thread the server owns.
 *
 * Threading: every callback of a request runs on the MHD thread that owns
 * its connection, except http_request_resume, which any thread may call.
 * Replies are queued only after the body has been read completely, never in
 * the first access-handler call (libmicrohttpd 0.9.75 would close the
 * connection otherwise), so errors found early are kept and the rest of the
 * body is drained and discarded.
 *
 * Upgraded connections: after http_request_upgrade() and the 101 reply, the
 * socket belongs to the server's upgrade thread. Every http_upgrade_handler
 * callback (on_open, on_data, on_close) runs on that one thread, never on an
 * MHD worker, and no transport lock is held during them. http_upgraded_send
 * and http_upgraded_close may be called from any thread (inside the
 * callbacks too) until on_close has returned; on_close is the last callback
 * and the http_upgraded handle is freed when it returns, so a surface that
 * sends from other threads serialises those calls with its on_close (for
 * example under its own lock). The transport never blocks on an upgraded
 * socket: writes are non-blocking, and what the peer does not take yet waits
 * in a bounded output queue owned by the transport. http_server_free closes
 * every upgraded socket (on_close called for each) and joins the thread
 * before stopping the daemon.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "http_compress.h"
#include "osprey/error.h"
#include "osprey/trace.h"

typedef struct http_server http_server;
typedef struct http_request http_request;
typedef struct http_upgraded http_upgraded;

typedef enum http_method {
    HTTP_METHOD_OTHER = 0,
    HTTP_METHOD_GET,
    HTTP_METHOD_POST,
    HTTP_METHOD_PUT,
    HTTP_METHOD_DELETE,
    HTTP_METHOD_HEAD,
} http_method;

/* Query parameters beyond this many are dropped (see
 * http_request_query_truncated). */
#define HTTP_MAX_QUERY_PARAMS 256
/* Default bound of an upgraded connection's output queue. */
#define HTTP_UPGRADED_MAX_QUEUED (4u * 1024 * 1024)

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
     * http_request_set_handler(), http_request_upgrade() or set a reply /
     * error. http_request_surface_ctx() already returns surface_ctx during
     * the call. */
    bool (*route)(http_request *req, void *surface_ctx);
    /* Borrowed for the server's lifetime; handed to route and returned by
     * http_request_surface_ctx() for every request this surface claims. */
    void *surface_ctx;
    /* (optional) Renders an error of a request this surface claimed as its
     * reply (with http_reply() or http_reply_error_status()). err is
     * borrowed; the transport frees it afterwards. NULL: {"error":
     * "<message>"} with 400 for INVALID_ARG, 503 for UNAVAILABLE and 500
     * otherwise, which is also how errors of requests no surface claimed
     * are rendered. */
    void (*reply_error)(http_request *req, osp_error *err);
    /* Largest buffered or decompressed body of this surface's requests; 0 =
     * the server's max_input_size. */
    size_t max_input_size;
} http_surface;

typedef struct http_server_options {
    /* "HTTP" or "metrics": names the service in error messages (NULL =
     * "HTTP"). Borrowed during start. */
    const char *name;
    const char *address; /* IPv4 or IPv6 literal; borrowed during start */
    int port;            /* 0 = pick a free port */
    int thread_count;    /* MHD worker threads; at least 2 are used */
    size_t max_input_size;
    /* 0 = 8192 connections. */
    unsigned connection_limit;
    /* Idle seconds before a connection is closed; 0 = never. */
    unsigned connection_timeout_s;
    const http_surface *surfaces; /* borrowed for the server's lifetime */
    size_t n_surfaces;
} http_server_options;

/* Fills *ss with the IPv4 or IPv6 `address` and `port`; sets *ipv6.
 * false when the address is neither. */
struct sockaddr_storage;
bool http_parse_address(const char *address, int port,
                        struct sockaddr_storage *ss, bool *ipv6);

/* Binds and starts serving (and starts the upgrade thread). Caller owns
 * *out. */
osp_error *http_server_start(const http_server_options *opts,
                             http_server **out);
/* The port actually bound. */
int http_server_port(const http_server *server);
/* Stops accepting connections (existing ones keep being served). */
void http_server_stop_accepting(http_server *server);
/* Waits until no request is in progress, up to timeout_ms. Upgraded
 * connections do not count as requests in progress. Returns false on
 * timeout (then http_server_free must not be called: connections may be
 * suspended inside libmicrohttpd). */
bool http_server_drain(http_server *server, int timeout_ms);
/* Closes every upgraded connection (on_close runs for each), joins the
 * upgrade thread, stops the daemon and frees. Only after a successful
 * drain (or when no request ever started asynchronous work). */
void http_server_free(http_server *server);

/* ---- request accessors (valid until the request completes) ---- */

/* The surface_ctx of the surface that claimed the request (also during its
 * route call); NULL before that or when none did. */
void *http_request_surface_ctx(const http_request *req);
http_method http_request_method(const http_request *req);
const char *http_request_method_name(const http_request *req);
/* The path without the query string, not URL-decoded (as Triton routes). */
const char *http_request_path(const http_request *req);
/* A request header (case-insensitive name) or NULL. */
const char *http_request_header(const http_request *req, const char *name);
/* Calls fn for every request header in the order received (name and value
 * borrowed for the call) until fn returns false. */
void http_request_header_foreach(const http_request *req,
                                 bool (*fn)(void *ctx, const char *name,
                                            const char *value),
                                 void *ctx);
/* CLOCK_MONOTONIC nanoseconds when the request's headers were in. */
uint64_t http_request_start_ns(const http_request *req);

/* ---- query string ----
 * Parsed once when the request starts, as application/x-www-form-urlencoded:
 * parameters split at '&', key and value at the first '=', then '+' becomes
 * a space and %XX escapes are decoded in both; a '%' not followed by two hex
 * digits stays as it is. Empty pieces ("a&&b") are skipped. */

typedef struct http_query_param {
    const char *key;   /* decoded, NUL-terminated */
    size_t key_len;    /* bytes before the terminator (may hold a %00) */
    const char *value; /* decoded, NUL-terminated; "" for "key" or "key=" */
    size_t value_len;
    bool has_value; /* an '=' was present */
} http_query_param;

/* The query string as received, without the '?', not decoded; NULL when
 * the URL has no '?'. */
const char *http_request_raw_query(const http_request *req);
/* The decoded value of the first parameter named key (compared after
 * decoding, case-sensitive), or NULL. */
const char *http_request_query(const http_request *req, const char *key);
/* All decoded parameters in order, repeated keys included: sets *out
 * (borrowed, valid as the request) and returns the count. */
size_t http_request_query_params(const http_request *req,
                                 const http_query_param **out);
/* true when the query had more than HTTP_MAX_QUERY_PARAMS parameters (only
 * the first ones are kept); a surface that needs them all refuses. */
bool http_request_query_truncated(const http_request *req);

/* Decodes %XX escapes of s[0..len) in place (and '+' as a space when
 * plus_as_space, for form-encoded text; false for path segments) and
 * returns the new length, at which a NUL is written: s must have room for
 * len + 1 bytes. A '%' not followed by two hex digits is kept as it is. */
size_t http_percent_decode(char *s, size_t len, bool plus_as_space);

/* ---- body ---- */

/* The body limit of this request: its surface's max_input_size, else the
 * server's. */
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
 * else. The claiming surface's reply_error renders it. */
void http_request_fail(http_request *req, osp_error *err);

/* ---- tracing ----
 * http_request_set_trace() hands a sampled trace to the transport
 * (ownership moves; NULL is a no-op), normally from the surface's route.
 * The surface may lend it to the core (osp_infer_request.trace) meanwhile.
 * The transport then stamps, once, for every surface:
 *   HTTP_RECV_START  at set_trace, with http_request_start_ns();
 *   HTTP_RECV_END    when the body is complete, just before on_complete
 *                    (not when the request failed before that);
 *   HTTP_SEND_START  just before on_resume runs (the response starts being
 *                    built), or, for a request that never went
 *                    asynchronous, when on_complete returned with a reply
 *                    set; not for a reply rendered from an error recorded
 *                    before on_resume;
 *   HTTP_SEND_END    when the connection is done with the request, if
 *                    HTTP_SEND_START was stamped;
 * and then calls osp_trace_end(). */
void http_request_set_trace(http_request *req, osp_trace *trace);
/* The trace handed over (borrowed), or NULL. */
osp_trace *http_request_trace(const http_request *req);

/* ---- replies ---- */

/* Status and body (ownership of body moves; malloc'd, may be NULL with
 * len 0). content_type may be NULL (no header). */
void http_reply(http_request *req, unsigned status, const char *content_type,
                char *body, size_t len);
/* Renders err with the request's surface (see http_surface.reply_error);
 * frees err. */
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
/* A reply whose body the handler writes piece by piece, from any thread
 * (server-sent events): the status and content type now, then each
 * http_stream_write's bytes as soon as the connection can take them,
 * chunked, until http_stream_end. Record it where a reply may be recorded
 * (on_complete, on_resume). The caller holds the stream until
 * http_stream_end, which may come long after the request's handler is
 * destroyed. NULL on OOM (a 500 goes out instead). */
typedef struct http_stream http_stream;
http_stream *http_reply_stream(http_request *req, unsigned status,
                               const char *content_type);
/* Appends bytes (borrowed) to the body; false when the client has gone
 * (or reads too slowly): the bytes are dropped. */
bool http_stream_write(http_stream *s, const void *data, size_t len);
/* Ends the body and drops the caller's hold on the stream. */
void http_stream_end(http_stream *s);

/* Adds a response header (both strings copied); any number, sent in the
 * order added. */
void http_reply_header(http_request *req, const char *name, const char *value);

/* ---- asynchronous completion ---- */

/* Called from on_complete before starting work that will finish on another
 * thread; the connection is suspended when on_complete returns without a
 * reply. Keeps the request alive until http_request_resume(). */
void http_request_begin_async(http_request *req);
/* From any thread, exactly once after begin_async: on_resume then runs on
 * the connection's thread. Safe even before on_complete has returned. */
void http_request_resume(http_request *req);

/* ---- protocol upgrade (WebSocket) ---- */

/* A surface's side of an upgraded connection. Every callback runs on the
 * server's upgrade thread (see the threading contract at the top). */
typedef struct http_upgrade_handler {
    /* (optional) The socket is the transport's now; conn is the handle
     * for http_upgraded_send/close, valid until on_close returns. Called
     * first. */
    void (*on_open)(void *ctx, http_upgraded *conn);
    /* Bytes from the peer (borrowed for the call), starting with any that
     * arrived together with the request head. */
    void (*on_data)(void *ctx, http_upgraded *conn, const char *data,
                    size_t len);
    /* Called exactly once, last: the peer closed, a read or write failed,
     * http_upgraded_close() finished, or the server stops. Also called
     * (without on_open, on the connection's MHD thread) when the upgrade
     * never happened (the request failed or the connection was lost before
     * the 101 went out). ctx is the surface's to free. */
    void (*on_close)(void *ctx);
    /* Bound of the output queue in bytes; 0 = HTTP_UPGRADED_MAX_QUEUED. */
    size_t max_queued;
} http_upgrade_handler;

/* Answers the request with 101 Switching Protocols and "Upgrade: protocol"
 * (plus "Connection: Upgrade" and any http_reply_header()s), then hands
 * the socket to h. Call from route, on_complete or on_resume; the reply is
 * sent once the request body (normally none) is in. h is borrowed for the
 * connection's lifetime; ctx is the surface's, passed to every callback.
 * An error recorded for the request wins (then on_close(ctx) runs without
 * an upgrade). */
void http_request_upgrade(http_request *req, const char *protocol,
                          const http_upgrade_handler *h, void *ctx);
/* Queues len bytes (copied) for the peer, non-blocking, from any thread.
 * UNAVAILABLE when the output queue would exceed its bound or the
 * connection is closing or closed (nothing is queued then). */
osp_error *http_upgraded_send(http_upgraded *conn, const void *data,
                              size_t len);
/* Closes once the queued output is sent (or after 5 seconds, or at once
 * when the peer is gone); on_close follows on the upgrade thread. Any
 * thread; idempotent. Data arriving meanwhile is still delivered. */
void http_upgraded_close(http_upgraded *conn);
