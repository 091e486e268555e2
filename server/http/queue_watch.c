/*
 * The WebSocket watch (PAI-EAS §2): a queue consumer whose items are
 * pushed as binary frames of one DataFrameProto each, over a connection
 * the transport upgraded (http_request_upgrade) and framed with wslay
 * (websocket.h).
 *
 * The consumer opens during routing, so that a store error is an HTTP
 * status rather than a closed socket; frames delivered before the 101 has
 * gone out wait in `early` and are sent first. The peer's pings are
 * answered and mark the consumer alive; its data frames are ignored; EOF,
 * RST, a close frame, a protocol error or an oversized frame end the watch
 * without a close from our side (except the close reply wslay owes a
 * close frame). Ending the watch closes the consumer: its uncommitted
 * items wait out the store's grace period for the same gid.uid, as a
 * consumer that dropped. Only shutdown sends a close frame on a live
 * watch.
 *
 * Locking: w->mu serialises the wslay session, the connection handle and
 * `early` between the store's deliveries (store threads), the upgrade
 * thread and shutdown; no store or transport callback runs with it held
 * except http_upgraded_send, which does not call back. api->mu (the list
 * of watches) is never taken with w->mu held.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_util.h"
#include "osprey/log.h"
#include "queue_api_internal.h"
#include "queue_codec.h"
#include "websocket.h"

/* Largest message a watching client may send (it only sends pings). */
#define WATCH_MAX_CLIENT_MESSAGE 65536
/* Bytes a watch may have waiting for the peer before it counts as stuck
 * and is dropped. */
#define WATCH_MAX_QUEUED (32u * 1024 * 1024)

typedef struct queue_watch {
    queue_api *api;
    struct queue_watch *prev, *next; /* in api->watches */
    osp_queue *queue;
    char id[2 * QUEUE_MAX_ID_BYTES + 2]; /* "<gid>.<uid>" */
    bool index_only;

    pthread_mutex_t mu; /* the fields below */
    ws_session *ws;
    http_upgraded *conn; /* set by on_open, NULL after on_close */
    bytebuf early;       /* output before on_open */
    bool ended;          /* on_close ran: no more sends */
    osp_queue_consumer *consumer;
} queue_watch;

/* ---- output ---- */

/* wslay's output: to the connection, or kept until it is open. Called
 * with w->mu held. */
static bool watch_send(void *ctx, const void *data, size_t len) {
    queue_watch *w = ctx;
    if (w->ended)
        return false;
    if (w->conn == NULL) {
        if (w->early.len + len > WATCH_MAX_QUEUED)
            return false;
        bytebuf_put(&w->early, data, len);
        return !w->early.oom;
    }
    osp_error *err = http_upgraded_send(w->conn, data, len);
    if (err) {
        osp_error_free(err);
        return false;
    }
    return true;
}

/* Called with w->mu held (inside ws_session_feed). */
static void watch_on_ping(void *ctx) {
    queue_watch *w = ctx;
    if (w->consumer)
        osp_queue_consumer_touch(w->consumer);
}

static const ws_session_callbacks watch_ws_callbacks = {
    .send = watch_send,
    .on_ping = watch_on_ping,
};

/* The store pushes one item (ownership moves here). */
static void watch_deliver(void *ctx, osp_queue_item *item) {
    queue_watch *w = ctx;
    uint8_t *frame = NULL;
    size_t len = 0;
    osp_error *err = queue_encode_frame(item, w->index_only, &frame, &len);
    osp_queue_item_free(item);
    pthread_mutex_lock(&w->mu);
    bool ok = !err && !w->ended && ws_session_send_binary(w->ws, frame, len);
    http_upgraded *conn = ok ? NULL : w->conn;
    pthread_mutex_unlock(&w->mu);
    free(frame);
    if (err)
        osp_error_free(err);
    /* A frame that cannot go out (a stuck or gone peer): the watch ends
     * and the item comes back with the consumer's other ones. */
    if (conn)
        http_upgraded_close(conn);
}

/* ---- the upgraded connection ---- */

static void watch_on_open(void *ctx, http_upgraded *conn) {
    queue_watch *w = ctx;
    pthread_mutex_lock(&w->mu);
    w->conn = conn;
    bool ok = true;
    if (w->early.len > 0) {
        osp_error *err = http_upgraded_send(conn, w->early.data, w->early.len);
        ok = err == NULL;
        osp_error_free(err);
    }
    bytebuf_free(&w->early);
    pthread_mutex_unlock(&w->mu);
    if (!ok)
        http_upgraded_close(conn);
}

static void watch_on_data(void *ctx, http_upgraded *conn, const char *data,
                          size_t len) {
    queue_watch *w = ctx;
    pthread_mutex_lock(&w->mu);
    bool alive = ws_session_feed(w->ws, data, len);
    pthread_mutex_unlock(&w->mu);
    if (!alive)
        http_upgraded_close(conn);
}

static void watch_free(queue_watch *w) {
    ws_session_free(w->ws);
    bytebuf_free(&w->early);
    pthread_mutex_destroy(&w->mu);
    free(w);
}

/* The last callback: the peer left, the watch broke, or shutdown. */
static void watch_on_close(void *ctx) {
    queue_watch *w = ctx;
    pthread_mutex_lock(&w->mu);
    w->ended = true;
    w->conn = NULL;
    osp_queue_consumer *consumer = w->consumer;
    w->consumer = NULL;
    pthread_mutex_unlock(&w->mu);
    /* Without w->mu: a delivery in progress finishes first. */
    if (consumer)
        osp_queue_consumer_close(consumer);
    queue_api *api = w->api;
    pthread_mutex_lock(&api->mu);
    if (w->prev)
        w->prev->next = w->next;
    else if (api->watches == w)
        api->watches = w->next;
    if (w->next)
        w->next->prev = w->prev;
    pthread_mutex_unlock(&api->mu);
    watch_free(w);
}

static const http_upgrade_handler watch_upgrade_handler = {
    .on_open = watch_on_open,
    .on_data = watch_on_data,
    .on_close = watch_on_close,
    .max_queued = WATCH_MAX_QUEUED,
};

/* ---- the handshake ---- */

/* The consumer's arguments from the query and headers. Strings borrowed
 * from the request. */
static osp_error *watch_args(http_request *req, osp_queue_consumer_args *a,
                             osp_queue_tag *filters, bool *index_only,
                             char *uid_buf, size_t uid_cap) {
    memset(a, 0, sizeof *a);
    const char *v = http_request_query(req, "_index_");
    osp_error *err = v ? queue_parse_start_index(v, &a->start_index) : NULL;
    uint64_t window = 1;
    if (!err && (v = http_request_query(req, "_window_")))
        err = queue_parse_uint("_window_", v, QUEUE_MAX_WINDOW, &window);
    if (!err && window == 0)
        err = osp_error_new(OSP_ERROR_INVALID_ARG,
                            "_window_ must be from 1 to %d", QUEUE_MAX_WINDOW);
    a->window = (unsigned)window;
    if (!err && (v = http_request_query(req, "_auto_commit_")))
        err = queue_parse_bool("_auto_commit_", v, &a->auto_commit);
    *index_only = false;
    if (!err && (v = http_request_query(req, "_index_only_")))
        err = queue_parse_bool("_index_only_", v, index_only);
    if (!err)
        err = queue_query_tags(req, filters, &a->n_filters, NULL);
    if (err)
        return err;
    a->filters = filters;
    a->gid = http_request_header(req, QUEUE_GID_HEADER);
    a->uid = http_request_header(req, QUEUE_UID_HEADER);
    if (a->gid == NULL || a->gid[0] == '\0')
        a->gid = "eas";
    if (a->uid == NULL || a->uid[0] == '\0') {
        /* A consumer of its own (the SDKs always send a uid). */
        static atomic_ulong anonymous;
        snprintf(uid_buf, uid_cap, "anonymous-%lu",
                 atomic_fetch_add(&anonymous, 1) + 1);
        a->uid = uid_buf;
    }
    if (strlen(a->gid) > QUEUE_MAX_ID_BYTES ||
        strlen(a->uid) > QUEUE_MAX_ID_BYTES)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "the uid and gid headers hold at most %d bytes",
                             QUEUE_MAX_ID_BYTES);
    return NULL;
}

/* A client that reconnects with the same gid.uid (the SDK's Watcher does
 * after any error) takes over from its previous watch, whose socket may
 * not have reported the drop yet: that consumer closes first, so the new
 * one gets its uncommitted items again. */
static void take_over(queue_api *api, queue_watch *self) {
    osp_queue_consumer *old[16];
    size_t n = 0;
    pthread_mutex_lock(&api->mu);
    for (queue_watch *w = api->watches; w && n < 16; w = w->next) {
        if (w == self || w->queue != self->queue ||
            strcmp(w->id, self->id) != 0)
            continue;
        pthread_mutex_lock(&w->mu);
        http_upgraded *conn = w->conn;
        if (w->consumer)
            old[n++] = w->consumer;
        w->consumer = NULL;
        w->ended = true;
        pthread_mutex_unlock(&w->mu);
        /* on_close waits for api->mu before conn is freed */
        if (conn)
            http_upgraded_close(conn);
    }
    pthread_mutex_unlock(&api->mu);
    for (size_t i = 0; i < n; i++)
        osp_queue_consumer_close(old[i]);
}

void queue_watch_start(http_request *req, queue_api *api, osp_queue *queue) {
    char accept[WS_ACCEPT_KEY_SIZE];
    const char *version = http_request_header(req, "Sec-WebSocket-Version");
    if (version == NULL || strcmp(version, "13") != 0) {
        http_reply_header(req, "Sec-WebSocket-Version", "13");
        http_request_fail(req, osp_error_new(OSP_ERROR_INVALID_ARG,
                                             "a watch needs WebSocket "
                                             "version 13"));
        return;
    }
    if (!ws_accept_key(http_request_header(req, "Sec-WebSocket-Key"), accept)) {
        http_request_fail(req, osp_error_new(OSP_ERROR_INVALID_ARG,
                                             "a watch needs a valid "
                                             "Sec-WebSocket-Key"));
        return;
    }
    osp_queue_consumer_args args;
    osp_queue_tag filters[QUEUE_MAX_TAGS];
    char uid[64];
    bool index_only;
    osp_error *err =
        watch_args(req, &args, filters, &index_only, uid, sizeof uid);
    if (err) {
        http_request_fail(req, err);
        return;
    }
    queue_watch *w = calloc(1, sizeof *w);
    if (w == NULL) {
        http_request_fail(req, osp_error_out_of_memory());
        return;
    }
    w->api = api;
    w->queue = queue;
    snprintf(w->id, sizeof w->id, "%s.%s", args.gid, args.uid);
    w->index_only = index_only;
    pthread_mutex_init(&w->mu, NULL);
    bytebuf_init(&w->early);
    if ((err = ws_session_new(&watch_ws_callbacks, w, WATCH_MAX_CLIENT_MESSAGE,
                              &w->ws))) {
        watch_free(w);
        http_request_fail(req, err);
        return;
    }
    pthread_mutex_lock(&api->mu);
    bool closing = api->closing;
    if (!closing) {
        w->next = api->watches;
        if (api->watches)
            api->watches->prev = w;
        api->watches = w;
    }
    pthread_mutex_unlock(&api->mu);
    if (closing) {
        watch_free(w);
        http_request_fail(req, osp_error_new_reason(OSP_ERROR_UNAVAILABLE,
                                                    OSP_REASON_SHUTTING_DOWN,
                                                    "the server is shutting "
                                                    "down"));
        return;
    }
    take_over(api, w);
    args.deliver = watch_deliver;
    args.ctx = w;
    /* Deliveries may start inside this call; they wait in `early`. */
    osp_queue_consumer *consumer = NULL;
    err = osp_queue_consumer_open(queue, &args, &consumer);
    pthread_mutex_lock(&w->mu);
    w->consumer = consumer;
    pthread_mutex_unlock(&w->mu);
    if (err) { /* on_close (run by the transport) unlinks and frees */
        http_request_upgrade(req, "websocket", &watch_upgrade_handler, w);
        http_request_fail(req, err);
        return;
    }
    http_reply_header(req, "Sec-WebSocket-Accept", accept);
    http_request_upgrade(req, "websocket", &watch_upgrade_handler, w);
}

void queue_watch_close_all(queue_api *api) {
    pthread_mutex_lock(&api->mu);
    for (queue_watch *w = api->watches; w; w = w->next) {
        pthread_mutex_lock(&w->mu);
        http_upgraded *conn = w->conn;
        if (!w->ended)
            ws_session_send_close(w->ws, 1001);
        pthread_mutex_unlock(&w->mu);
        if (conn)
            http_upgraded_close(conn);
    }
    pthread_mutex_unlock(&api->mu);
}
