/*
 * WebSocket sessions on libwslay's event API (see websocket.h). wslay pulls
 * input through a receive callback and pushes output through a send
 * callback; the session lends it the bytes of one ws_session_feed call and
 * passes output straight to the owner's send callback, so wslay's own
 * queue holds at most the frames of one call.
 */
#include "websocket.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <wslay/wslay.h>

struct ws_session {
    wslay_event_context_ptr ctx;
    const ws_session_callbacks *cb;
    void *cb_ctx;
    /* the bytes of the ws_session_feed call in progress */
    const uint8_t *in;
    size_t in_len;
    bool broken; /* a send failed or wslay reported an error */
};

/* ---- the handshake ---- */

/* SHA-1 (FIPS 180-4), only for the handshake's accept key. */
static uint32_t rol32(uint32_t v, unsigned n) {
    return (v << n) | (v >> (32 - n));
}

static void sha1_block(uint32_t h[5], const uint8_t p[64]) {
    uint32_t w[80];
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
               (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
    for (int i = 16; i < 80; i++)
        w[i] = rol32(w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16], 1);
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4];
    for (int i = 0; i < 80; i++) {
        uint32_t f, k;
        if (i < 20) {
            f = (b & c) | (~b & d);
            k = 0x5A827999;
        } else if (i < 40) {
            f = b ^ c ^ d;
            k = 0x6ED9EBA1;
        } else if (i < 60) {
            f = (b & c) | (b & d) | (c & d);
            k = 0x8F1BBCDC;
        } else {
            f = b ^ c ^ d;
            k = 0xCA62C1D6;
        }
        uint32_t t = rol32(a, 5) + f + e + k + w[i];
        e = d;
        d = c;
        c = rol32(b, 30);
        b = a;
        a = t;
    }
    h[0] += a;
    h[1] += b;
    h[2] += c;
    h[3] += d;
    h[4] += e;
}

/* SHA-1 of msg[0..len) for len < 120 (two blocks at most). */
static void sha1_short(const uint8_t *msg, size_t len, uint8_t out[20]) {
    uint32_t h[5] = {0x67452301, 0xEFCDAB89, 0x98BADCFE, 0x10325476,
                     0xC3D2E1F0};
    uint8_t buf[128] = {0};
    memcpy(buf, msg, len);
    buf[len] = 0x80;
    size_t total = len + 9 <= 64 ? 64 : 128;
    uint64_t bits = (uint64_t)len * 8;
    for (int i = 0; i < 8; i++)
        buf[total - 1 - i] = (uint8_t)(bits >> (8 * i));
    for (size_t off = 0; off < total; off += 64)
        sha1_block(h, buf + off);
    for (int i = 0; i < 5; i++) {
        out[4 * i] = (uint8_t)(h[i] >> 24);
        out[4 * i + 1] = (uint8_t)(h[i] >> 16);
        out[4 * i + 2] = (uint8_t)(h[i] >> 8);
        out[4 * i + 3] = (uint8_t)h[i];
    }
}

static const char b64_alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static bool is_b64_char(char c) {
    return c != '\0' && strchr(b64_alphabet, c) != NULL;
}

bool ws_accept_key(const char *key, char out[WS_ACCEPT_KEY_SIZE]) {
    static const char guid[] = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
    /* 16 random bytes in base64: 22 characters and "==". */
    if (key == NULL || strlen(key) != 24 || key[22] != '=' || key[23] != '=')
        return false;
    for (int i = 0; i < 22; i++)
        if (!is_b64_char(key[i]))
            return false;
    uint8_t msg[24 + sizeof guid - 1];
    memcpy(msg, key, 24);
    memcpy(msg + 24, guid, sizeof guid - 1);
    uint8_t digest[20];
    sha1_short(msg, sizeof msg, digest);
    /* 20 bytes: six full groups of three, then two bytes and one '='. */
    char *w = out;
    for (int i = 0; i < 20; i += 3) {
        uint32_t v = (uint32_t)digest[i] << 16;
        if (i + 1 < 20)
            v |= (uint32_t)digest[i + 1] << 8;
        if (i + 2 < 20)
            v |= digest[i + 2];
        *w++ = b64_alphabet[(v >> 18) & 63];
        *w++ = b64_alphabet[(v >> 12) & 63];
        *w++ = i + 1 < 20 ? b64_alphabet[(v >> 6) & 63] : '=';
        *w++ = i + 2 < 20 ? b64_alphabet[v & 63] : '=';
    }
    *w = '\0';
    return true;
}

/* ---- wslay callbacks ---- */

static ssize_t on_recv(wslay_event_context_ptr ctx, uint8_t *buf, size_t len,
                       int flags, void *user) {
    (void)flags;
    ws_session *s = user;
    if (s->in_len == 0) {
        wslay_event_set_error(ctx, WSLAY_ERR_WOULDBLOCK);
        return -1;
    }
    size_t n = len < s->in_len ? len : s->in_len;
    memcpy(buf, s->in, n);
    s->in += n;
    s->in_len -= n;
    return (ssize_t)n;
}

static ssize_t on_send(wslay_event_context_ptr ctx, const uint8_t *data,
                       size_t len, int flags, void *user) {
    (void)flags;
    ws_session *s = user;
    if (s->broken || !s->cb->send(s->cb_ctx, data, len)) {
        s->broken = true;
        wslay_event_set_error(ctx, WSLAY_ERR_CALLBACK_FAILURE);
        return -1;
    }
    return (ssize_t)len;
}

/* Data frames from the peer mean nothing to a watch: dropped. wslay has
 * already queued the pong of a ping. */
static void on_message(wslay_event_context_ptr ctx,
                       const struct wslay_event_on_msg_recv_arg *arg,
                       void *user) {
    (void)ctx;
    ws_session *s = user;
    if (arg->opcode == WSLAY_PING && s->cb->on_ping)
        s->cb->on_ping(s->cb_ctx);
}

static const struct wslay_event_callbacks session_callbacks = {
    .recv_callback = on_recv,
    .send_callback = on_send,
    .on_msg_recv_callback = on_message,
};

/* ---- sessions ---- */

osp_error *ws_session_new(const ws_session_callbacks *cb, void *ctx,
                          size_t max_message, ws_session **out) {
    ws_session *s = calloc(1, sizeof *s);
    if (s == NULL)
        return osp_error_out_of_memory();
    s->cb = cb;
    s->cb_ctx = ctx;
    if (wslay_event_context_server_init(&s->ctx, &session_callbacks, s) != 0) {
        free(s);
        return osp_error_out_of_memory();
    }
    wslay_event_config_set_max_recv_msg_length(s->ctx, max_message);
    *out = s;
    return NULL;
}

void ws_session_free(ws_session *s) {
    if (s == NULL)
        return;
    wslay_event_context_free(s->ctx);
    free(s);
}

/* Writes what wslay has queued; false when the session broke. */
static bool flush(ws_session *s) {
    if (!s->broken && wslay_event_want_write(s->ctx) &&
        wslay_event_send(s->ctx) != 0)
        s->broken = true;
    return !s->broken;
}

bool ws_session_feed(ws_session *s, const void *data, size_t len) {
    if (s->broken)
        return false;
    s->in = data;
    s->in_len = len;
    if (wslay_event_recv(s->ctx) != 0)
        s->broken = true;
    s->in = NULL;
    s->in_len = 0;
    flush(s);
    /* A close frame (the peer's, or ours after a protocol error or an
     * oversized message) ends reading. */
    return !s->broken && wslay_event_want_read(s->ctx);
}

bool ws_session_send_binary(ws_session *s, const void *data, size_t len) {
    if (s->broken || wslay_event_get_close_sent(s->ctx))
        return false;
    struct wslay_event_msg msg = {
        .opcode = WSLAY_BINARY_FRAME, .msg = data, .msg_length = len};
    if (wslay_event_queue_msg(s->ctx, &msg) != 0)
        return false;
    return flush(s);
}

void ws_session_send_close(ws_session *s, unsigned code) {
    if (s->broken || wslay_event_get_close_sent(s->ctx))
        return;
    if (wslay_event_queue_close(s->ctx, (uint16_t)code, NULL, 0) == 0)
        flush(s);
}

bool ws_session_alive(const ws_session *s) {
    return !s->broken && wslay_event_want_read(s->ctx);
}
