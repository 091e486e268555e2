/*
 * WebSocket (RFC 6455) server sessions on libwslay: the handshake's
 * Sec-WebSocket-Accept value, and a session that parses what the peer sends
 * (answering every ping with a pong, ignoring data frames, closing on a
 * protocol error or an oversized message) and frames what the server sends
 * (binary messages, and a close frame only at shutdown). No transport: the
 * owner feeds the bytes it read and takes the bytes to write through a
 * callback (the queue surface wires it to http_upgraded_send).
 *
 * Threads: a session is not thread-safe; its owner serialises every call
 * (the queue watch holds its own lock around them). Callbacks run inside
 * the call that triggered them.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "osprey/error.h"

typedef struct ws_session ws_session;

typedef struct ws_session_callbacks {
    /* Bytes for the peer (borrowed for the call). false: they could not be
     * queued; the session is broken from then on. */
    bool (*send)(void *ctx, const void *data, size_t len);
    /* (optional) The peer sent a ping (its pong is already queued). */
    void (*on_ping)(void *ctx);
} ws_session_callbacks;

/* The length of Sec-WebSocket-Accept's value plus its NUL. */
#define WS_ACCEPT_KEY_SIZE 29

/* Sec-WebSocket-Accept for the request's Sec-WebSocket-Key (borrowed):
 * base64(SHA-1(key + the RFC's GUID)). false when the key is not the base64
 * of 16 bytes (24 characters), as RFC 6455 §4.2.1 requires. */
bool ws_accept_key(const char *key, char out[WS_ACCEPT_KEY_SIZE]);

/* A server session. cb is borrowed for the session's life, ctx is passed
 * to it; messages from the peer longer than max_message bytes close the
 * session with status 1009. Caller owns *out. */
osp_error *ws_session_new(const ws_session_callbacks *cb, void *ctx,
                          size_t max_message, ws_session **out);
void ws_session_free(ws_session *s);

/* Parses len bytes the peer sent (borrowed), answering pings and queuing
 * a close reply to a close frame. Returns false when the session is over
 * (the peer closed, broke the protocol, sent too much, or a send failed):
 * the owner closes the connection once the queued bytes are written. */
bool ws_session_feed(ws_session *s, const void *data, size_t len);

/* Frames data[0..len) (borrowed) as one binary message and hands it to
 * cb->send. false when the session is over or the send failed. */
bool ws_session_send_binary(ws_session *s, const void *data, size_t len);

/* Sends a close frame with `code` (1001 "going away" at shutdown); nothing
 * is sent after it. */
void ws_session_send_close(ws_session *s, unsigned code);

/* Whether the session still reads and writes. */
bool ws_session_alive(const ws_session *s);
