/*
 * The queue surface's routes and HTTP handlers (see queue_api.h); the
 * WebSocket watch is in queue_watch.c.
 *
 * Each request gets a queue_call as its handler context. Mutations and
 * gets go to the store asynchronously (http_request_begin_async, then the
 * store's callback records the outcome in the call and resumes the
 * request); on_resume renders it. A get that waits (long poll) is also
 * listed in the surface as a pending_get, so that shutdown can answer it
 * at once instead of waiting for the store: the first of the two to come
 * resumes the request, under the surface's lock, and the pending_get
 * itself always belongs to the store's callback.
 */
#include "queue_api.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "json_util.h"
#include "osprey/log.h"
#include "queue_api_internal.h"
#include "queue_codec.h"

/* A long poll is answered a little before the SDK's 5 s read timeout
 * (PAI-EAS reference §1.4), whatever _timeout_ asks. */
#define QUEUE_LONG_POLL_MAX_NS (4500ull * 1000 * 1000)
/* Body bytes kept for requests that are not puts (a negative commit's
 * form); more is an error. */
#define QUEUE_MAX_FORM_BYTES 8192

typedef enum queue_op {
    OP_PUT,
    OP_GET,
    OP_ATTRS,
    OP_SEARCH,
    OP_COUNT,
    OP_EOS,
    OP_COMMIT,
    OP_NEGATIVE,
    OP_DELETE,
    OP_TRUNCATE,
} queue_op;

typedef struct queue_call {
    queue_api *api;
    osp_queue *queue;
    queue_op op;
    bool protobuf; /* Accept: application/vnd.google.protobuf */
    bytebuf body;  /* the request body, up to limit bytes */
    size_t limit;
    /* what the store answered */
    osp_error *err;
    uint64_t index;
    char *request_id;
    osp_queue_item **items;
    size_t n_items;
} queue_call;

typedef struct pending_get {
    queue_api *api;
    http_request *req; /* NULL once answered */
    struct pending_get *prev, *next;
} pending_get;

/* ---- replies ---- */

static void reply_text(http_request *req, unsigned status, const char *text) {
    size_t len = strlen(text);
    char *body = len ? malloc(len) : NULL;
    if (body)
        memcpy(body, text, len);
    http_reply(req, status, "text/plain; charset=utf-8", body, body ? len : 0);
}

static unsigned error_status(const osp_error *err) {
    switch (osp_error_get_reason(err)) {
    case OSP_REASON_TOO_LARGE:
        return 413;
    case OSP_REASON_QUEUE_FULL:
        return 429;
    case OSP_REASON_STORAGE_FULL:
        return 507;
    default:
        break;
    }
    switch (osp_error_get_code(err)) {
    case OSP_ERROR_NOT_FOUND:
        return 404;
    case OSP_ERROR_INVALID_ARG:
        return 400;
    case OSP_ERROR_UNAVAILABLE:
        return 503;
    case OSP_ERROR_UNSUPPORTED:
        return 501;
    default:
        return 500;
    }
}

void queue_api_reply_error(http_request *req, osp_error *err) {
    unsigned status = error_status(err);
    char text[1024];
    if (status == 413)
        snprintf(text, sizeof text, "payload too large: %s",
                 osp_error_message(err));
    else if (status == 429)
        snprintf(text, sizeof text, "queue is full: %s",
                 osp_error_message(err));
    else if (status == 507)
        snprintf(text, sizeof text, "insufficient storage: %s",
                 osp_error_message(err));
    else
        snprintf(text, sizeof text, "%s", osp_error_message(err));
    reply_text(req, status, text);
}

/* ---- query helpers ---- */

osp_error *queue_query_tags(http_request *req, osp_queue_tag *tags, size_t *n,
                            const char **request_id) {
    const http_query_param *p;
    size_t np = http_request_query_params(req, &p);
    *n = 0;
    for (size_t i = 0; i < np; i++) {
        if (queue_key_is_reserved(p[i].key))
            continue;
        if (p[i].key_len == 0 || p[i].key_len != strlen(p[i].key) ||
            p[i].value_len != strlen(p[i].value))
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "a tag needs a non-empty key, and neither "
                                 "key nor value may hold a NUL byte");
        if (p[i].key_len > QUEUE_MAX_TAG_KEY_BYTES ||
            p[i].value_len > QUEUE_MAX_TAG_VALUE_BYTES)
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "a tag key has at most %d bytes and a value "
                                 "at most %d",
                                 QUEUE_MAX_TAG_KEY_BYTES,
                                 QUEUE_MAX_TAG_VALUE_BYTES);
        if (request_id && strcmp(p[i].key, "requestId") == 0) {
            if (*request_id == NULL)
                *request_id = p[i].value;
            continue;
        }
        bool repeated = false;
        for (size_t t = 0; t < *n && !repeated; t++)
            repeated = strcmp(tags[t].key, p[i].key) == 0;
        if (repeated) /* the first one counts */
            continue;
        if (*n == QUEUE_MAX_TAGS)
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "at most %d tags per request", QUEUE_MAX_TAGS);
        tags[(*n)++] = (osp_queue_tag){p[i].key, p[i].value};
    }
    return NULL;
}

/* The boolean reserved key `key`: false when absent. */
static osp_error *query_flag(http_request *req, const char *key, bool *out) {
    const char *v = http_request_query(req, key);
    *out = false;
    return v ? queue_parse_bool(key, v, out) : NULL;
}

static osp_error *query_uint(http_request *req, const char *key, uint64_t max,
                             uint64_t dflt, uint64_t *out) {
    const char *v = http_request_query(req, key);
    *out = dflt;
    return v ? queue_parse_uint(key, v, max, out) : NULL;
}

/* The consumer identity of a commit (headers the SDKs send on every
 * request; "eas" is the SDKs' default group). */
static osp_error *consumer_ids(http_request *req, const char **gid,
                               const char **uid) {
    *gid = http_request_header(req, QUEUE_GID_HEADER);
    *uid = http_request_header(req, QUEUE_UID_HEADER);
    if (*gid == NULL || **gid == '\0')
        *gid = "eas";
    if (*uid == NULL || **uid == '\0')
        *uid = "anonymous";
    if (strlen(*gid) > QUEUE_MAX_ID_BYTES || strlen(*uid) > QUEUE_MAX_ID_BYTES)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "the uid and gid headers hold at most %d bytes",
                             QUEUE_MAX_ID_BYTES);
    return NULL;
}

/* ---- asynchronous completions ---- */

static void done_cb(void *ctx, osp_error *err) {
    http_request *req = ctx;
    queue_call *call = http_request_handler_ctx(req);
    call->err = err;
    http_request_resume(req);
}

static void put_cb(void *ctx, osp_error *err, uint64_t index,
                   const char *request_id) {
    http_request *req = ctx;
    queue_call *call = http_request_handler_ctx(req);
    call->err = err;
    call->index = index;
    if (!err && request_id)
        call->request_id = strdup(request_id);
    http_request_resume(req);
}

static void get_cb(void *ctx, osp_error *err, osp_queue_item **items,
                   size_t n) {
    pending_get *pg = ctx;
    queue_api *api = pg->api;
    pthread_mutex_lock(&api->mu);
    http_request *req = pg->req;
    if (req) {
        pg->req = NULL;
        if (pg->prev)
            pg->prev->next = pg->next;
        else
            api->gets = pg->next;
        if (pg->next)
            pg->next->prev = pg->prev;
        queue_call *call = http_request_handler_ctx(req);
        call->err = err;
        call->items = items;
        call->n_items = n;
    }
    pthread_mutex_unlock(&api->mu);
    free(pg);
    if (req) {
        http_request_resume(req);
    } else { /* shutdown already answered the request */
        osp_error_free(err);
        osp_queue_items_free(items, n);
    }
}

/* ---- operations (on_complete) ---- */

static osp_error *start_put(http_request *req, queue_call *call) {
    osp_queue_tag tags[QUEUE_MAX_TAGS];
    size_t n_tags;
    osp_error *err = queue_query_tags(req, tags, &n_tags, NULL);
    if (err)
        return err;
    uint64_t priority = 0;
    const char *header = http_request_header(req, QUEUE_PRIORITY_HEADER);
    if (http_request_query(req, "_priority_"))
        err = query_uint(req, "_priority_", 1000, 0, &priority);
    else if (header)
        err = queue_parse_uint(QUEUE_PRIORITY_HEADER, header, 1000, &priority);
    if (err)
        return err;
    if (call->body.len > call->api->max_payload_bytes)
        return osp_error_new_reason(OSP_ERROR_INVALID_ARG, OSP_REASON_TOO_LARGE,
                                    "%zu bytes, at most %" PRIu64,
                                    call->body.len,
                                    call->api->max_payload_bytes);
    osp_queue_put_args args = {.data = call->body.data,
                               .size = call->body.len,
                               .tags = tags,
                               .n_tags = n_tags,
                               .priority = (int)priority};
    http_request_begin_async(req);
    osp_queue_put(call->queue, &args, put_cb, req);
    return NULL;
}

static osp_error *start_get(http_request *req, queue_call *call) {
    queue_api *api = call->api;
    osp_queue_tag filters[QUEUE_MAX_TAGS];
    size_t n_filters;
    const char *request_id = NULL;
    uint64_t index, length, timeout_ns = 0;
    bool auto_delete, raw;
    osp_error *err = queue_query_tags(req, filters, &n_filters, &request_id);
    if (!err)
        err = query_uint(req, "_index_", UINT64_MAX, 0, &index);
    if (!err)
        err = query_uint(req, "_length_", QUEUE_MAX_GET_LENGTH, 1, &length);
    if (!err && length == 0)
        err = osp_error_new(OSP_ERROR_INVALID_ARG,
                            "_length_ must be from 1 to %d",
                            QUEUE_MAX_GET_LENGTH);
    if (!err && http_request_query(req, "_timeout_"))
        err = queue_parse_timeout(http_request_query(req, "_timeout_"),
                                  &timeout_ns);
    if (!err)
        err = query_flag(req, "_auto_delete_", &auto_delete);
    if (!err)
        err = query_flag(req, "_raw_", &raw); /* accepted, not used */
    if (err)
        return err;
    if (timeout_ns > QUEUE_LONG_POLL_MAX_NS)
        timeout_ns = QUEUE_LONG_POLL_MAX_NS;
    pending_get *pg = calloc(1, sizeof *pg);
    if (pg == NULL)
        return osp_error_out_of_memory();
    pg->api = api;
    pg->req = req;
    pthread_mutex_lock(&api->mu);
    if (api->closing)
        timeout_ns = 0;
    pg->next = api->gets;
    if (api->gets)
        api->gets->prev = pg;
    api->gets = pg;
    pthread_mutex_unlock(&api->mu);
    osp_queue_get_args args = {.index = index,
                               .length = (size_t)length,
                               .request_id = request_id,
                               .filters = filters,
                               .n_filters = n_filters,
                               .auto_delete = auto_delete,
                               .timeout_ns = timeout_ns};
    http_request_begin_async(req);
    osp_queue_get(call->queue, &args, get_cb, pg);
    return NULL;
}

/* The store's attributes plus the ones that describe this surface when
 * the store left them out. */
static osp_error *reply_attributes(http_request *req, queue_call *call) {
    osp_queue_attribute *attrs = NULL;
    size_t n = 0;
    osp_error *err = osp_queue_attributes(call->queue, &attrs, &n);
    if (err)
        return err;
    char max_payload[32];
    snprintf(max_payload, sizeof max_payload, "%" PRIu64,
             call->api->max_payload_bytes);
    const struct {
        const char *key, *value;
    } extra[] = {
        {"meta.header.user", QUEUE_UID_HEADER},
        {"meta.header.group", QUEUE_GID_HEADER},
        {"meta.header.priority", QUEUE_PRIORITY_HEADER},
        {"meta.maxPayloadBytes", max_payload},
        {"stream.maxPayloadBytes", max_payload},
    };
    size_t n_extra = sizeof extra / sizeof extra[0];
    osp_queue_attribute *all = calloc(n + n_extra, sizeof *all);
    if (all == NULL) {
        osp_queue_attributes_free(attrs, n);
        return osp_error_out_of_memory();
    }
    memcpy(all, attrs, n * sizeof *attrs);
    size_t total = n;
    for (size_t e = 0; e < n_extra; e++) {
        bool present = false;
        for (size_t i = 0; i < n && !present; i++)
            present = strcmp(attrs[i].key, extra[e].key) == 0;
        if (!present)
            all[total++] = (osp_queue_attribute){(char *)extra[e].key,
                                                 (char *)extra[e].value};
    }
    char *body = NULL;
    size_t len = 0;
    if (call->protobuf) {
        uint8_t *pb = NULL;
        err = queue_encode_attributes_proto(all, total, &pb, &len);
        body = (char *)pb;
    } else {
        err = queue_encode_attributes_json(all, total, &body, &len);
    }
    free(all);
    osp_queue_attributes_free(attrs, n);
    if (err)
        return err;
    http_reply(req, 200,
               call->protobuf ? QUEUE_PROTOBUF_TYPE : "application/json", body,
               len);
    return NULL;
}

static osp_error *reply_search(http_request *req, queue_call *call) {
    uint64_t index;
    osp_error *err = query_uint(req, "_index_", UINT64_MAX, 0, &index);
    if (!err && index == 0)
        err = osp_error_new(OSP_ERROR_INVALID_ARG,
                            "_search_ needs _index_ above 0");
    if (err)
        return err;
    osp_queue_search_result r;
    memset(&r, 0, sizeof r);
    if ((err = osp_queue_search(call->queue, index, &r)))
        return err;
    bytebuf b;
    bytebuf_init(&b);
    if (!r.found) {
        bytebuf_puts(&b, "{}");
    } else {
        bytebuf_puts(&b, "{\"ConsumerId\":");
        json_write_cstr(&b, r.is_pending ? r.consumer_id : "");
        bytebuf_puts(&b, ",\"IsPending\":");
        json_write_bool(&b, r.is_pending);
        bytebuf_puts(&b, ",\"WaitCount\":");
        json_write_uint(&b, r.is_pending ? 0 : r.wait_count);
        bytebuf_putc(&b, '}');
    }
    size_t len;
    char *body = bytebuf_take(&b, &len);
    if (body == NULL)
        return osp_error_out_of_memory();
    http_reply(req, 200, "application/json", body, len);
    return NULL;
}

static osp_error *reply_count(http_request *req, queue_call *call) {
    osp_queue_tag filters[QUEUE_MAX_TAGS];
    size_t n_filters;
    uint64_t priority = 0, count = 0;
    bool by_priority = http_request_query(req, "_priority_") != NULL;
    osp_error *err = queue_query_tags(req, filters, &n_filters, NULL);
    if (!err && by_priority)
        err = query_uint(req, "_priority_", 1000, 0, &priority);
    if (!err)
        err = osp_queue_count(call->queue, by_priority ? (int)priority : -1,
                              filters, n_filters, &count);
    if (err)
        return err;
    char text[32];
    snprintf(text, sizeof text, "%" PRIu64, count);
    reply_text(req, 200, text);
    return NULL;
}

static osp_error *start_indexes(http_request *req, queue_call *call) {
    uint64_t *indexes = NULL;
    size_t n = 0;
    osp_error *err =
        queue_parse_indexes(http_request_query(req, "_indexes_"), &indexes, &n);
    if (err)
        return err;
    const char *gid = NULL, *uid = NULL;
    char *code = NULL, *reason = NULL;
    if (call->op != OP_DELETE)
        err = consumer_ids(req, &gid, &uid);
    if (!err && call->op == OP_NEGATIVE)
        err = queue_parse_negative_form(call->body.data ? call->body.data : "",
                                        call->body.len, &code, &reason);
    if (err) {
        free(indexes);
        return err;
    }
    http_request_begin_async(req);
    if (call->op == OP_DELETE)
        osp_queue_delete(call->queue, indexes, n, done_cb, req);
    else if (call->op == OP_COMMIT)
        osp_queue_commit(call->queue, gid, uid, indexes, n, done_cb, req);
    else
        osp_queue_reject(call->queue, gid, uid, indexes, n, code, reason,
                         done_cb, req);
    free(indexes);
    free(code);
    free(reason);
    return NULL;
}

static osp_error *start_truncate(http_request *req, queue_call *call) {
    uint64_t before;
    const char *v = http_request_query(req, "_index_");
    if (v == NULL)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "_trunc_ needs _index_ (items below it are "
                             "deleted)");
    osp_error *err = queue_parse_uint("_index_", v, UINT64_MAX, &before);
    if (err)
        return err;
    http_request_begin_async(req);
    osp_queue_truncate(call->queue, before, done_cb, req);
    return NULL;
}

static osp_error *start_eos(http_request *req, queue_call *call) {
    bool force;
    osp_error *err = query_flag(req, "_force_", &force);
    if (err)
        return err;
    http_request_begin_async(req);
    osp_queue_end(call->queue, force, done_cb, req);
    return NULL;
}

/* ---- the handler ---- */

static osp_error *on_body(http_request *req, const char *data, size_t len) {
    queue_call *call = http_request_handler_ctx(req);
    if (call->limit == 0) /* the operation takes no body */
        return NULL;
    if (len > call->limit - call->body.len) {
        if (call->op == OP_PUT)
            return osp_error_new_reason(
                OSP_ERROR_INVALID_ARG, OSP_REASON_TOO_LARGE,
                "the body is over %zu bytes", call->limit);
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "the body is over %zu bytes", call->limit);
    }
    bytebuf_put(&call->body, data, len);
    return call->body.oom ? osp_error_out_of_memory() : NULL;
}

static osp_error *on_complete(http_request *req) {
    queue_call *call = http_request_handler_ctx(req);
    switch (call->op) {
    case OP_PUT:
        return start_put(req, call);
    case OP_GET:
        return start_get(req, call);
    case OP_ATTRS:
        return reply_attributes(req, call);
    case OP_SEARCH:
        return reply_search(req, call);
    case OP_COUNT:
        return reply_count(req, call);
    case OP_EOS:
        return start_eos(req, call);
    case OP_COMMIT:
    case OP_NEGATIVE:
    case OP_DELETE:
        return start_indexes(req, call);
    case OP_TRUNCATE:
        return start_truncate(req, call);
    }
    return osp_error_new(OSP_ERROR_INTERNAL, "unknown queue operation");
}

static osp_error *reply_items(http_request *req, queue_call *call) {
    char *body = NULL;
    size_t len = 0;
    osp_error *err;
    if (call->protobuf) {
        uint8_t *pb = NULL;
        err = queue_encode_list_proto(call->items, call->n_items, &pb, &len);
        body = (char *)pb;
    } else {
        err = queue_encode_list_json(call->items, call->n_items, &body, &len);
    }
    if (err)
        return err;
    http_reply(req, 200,
               call->protobuf ? QUEUE_PROTOBUF_TYPE : "application/json", body,
               len);
    return NULL;
}

static osp_error *on_resume(http_request *req) {
    queue_call *call = http_request_handler_ctx(req);
    if (call->err) {
        osp_error *err = call->err;
        call->err = NULL;
        return err;
    }
    if (call->op == OP_GET)
        return reply_items(req, call);
    if (call->op == OP_PUT) {
        /* The item is stored: this reply is a 200 whatever happens. */
        char text[32];
        snprintf(text, sizeof text, "%" PRIu64, call->index);
        reply_text(req, 200, text);
        http_reply_header(req, QUEUE_REQUEST_ID_HEADER,
                          call->request_id ? call->request_id : "");
        return NULL;
    }
    reply_text(req, 200, "OK");
    return NULL;
}

static void call_destroy(void *p) {
    queue_call *call = p;
    osp_error_free(call->err);
    osp_queue_items_free(call->items, call->n_items);
    free(call->request_id);
    bytebuf_free(&call->body);
    free(call);
}

static const http_handler queue_handler = {
    .on_body = on_body,
    .on_complete = on_complete,
    .on_resume = on_resume,
    .destroy = call_destroy,
};

/* ---- routing ---- */

/* true when the Authorization header is the token, compared in constant
 * time. */
static bool token_ok(const queue_api *api, http_request *req) {
    if (api->token == NULL)
        return true;
    const char *got = http_request_header(req, "Authorization");
    if (got == NULL)
        return false;
    size_t n = strlen(api->token), m = strlen(got);
    unsigned char diff = n != m;
    for (size_t i = 0; i < m; i++)
        diff |= (unsigned char)got[i] ^ (unsigned char)api->token[i % n];
    return diff == 0;
}

/* The operation of a request that is not a watch, by (method, reserved
 * keys) in the reference's order. */
static osp_error *pick_op(http_request *req, queue_op *op) {
    bool flag;
    osp_error *err = NULL;
#define FLAG(key) ((err = query_flag(req, key, &flag)) == NULL && flag)
    switch (http_request_method(req)) {
    case HTTP_METHOD_GET:
        if (FLAG("_attrs_"))
            *op = OP_ATTRS;
        else if (!err && FLAG("_search_"))
            *op = OP_SEARCH;
        else if (!err && FLAG("_count_"))
            *op = OP_COUNT;
        else if (!err && FLAG("_watch_"))
            return osp_error_new(OSP_ERROR_UNSUPPORTED,
                                 "_watch_ needs a WebSocket upgrade (the "
                                 "legacy HTTP stream is not supported)");
        else
            *op = OP_GET;
        break;
    case HTTP_METHOD_POST:
        *op = FLAG("_eos_") ? OP_EOS : OP_PUT;
        break;
    case HTTP_METHOD_PUT:
        if (FLAG("_negative_"))
            *op = OP_NEGATIVE;
        else if (!err && http_request_query(req, "_indexes_"))
            *op = OP_COMMIT;
        else if (!err)
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "PUT commits: it needs _indexes_");
        break;
    case HTTP_METHOD_DELETE:
        if (FLAG("_trunc_"))
            *op = OP_TRUNCATE;
        else if (!err && http_request_query(req, "_indexes_"))
            *op = OP_DELETE;
        else if (!err)
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "DELETE needs _indexes_, or _trunc_ with "
                                 "_index_");
        break;
    default:
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "the queue API takes GET, POST, PUT and "
                             "DELETE");
    }
#undef FLAG
    if (!err && *op == OP_NEGATIVE && !http_request_query(req, "_indexes_"))
        err = osp_error_new(OSP_ERROR_INVALID_ARG,
                            "a negative commit needs _indexes_");
    return err;
}

static bool is_watch_upgrade(http_request *req) {
    const char *upgrade = http_request_header(req, "Upgrade");
    return upgrade && strcasecmp(upgrade, "websocket") == 0;
}

/* The service name and queue side of the path, or false when the path is
 * not the queue API's. */
static bool service_of_path(queue_api *api, const char *path, char *name,
                            size_t cap, bool *sink) {
    static const char prefix[] = "/api/predict/";
    size_t len;
    *sink = false;
    if (strncmp(path, prefix, sizeof prefix - 1) == 0) {
        const char *rest = path + sizeof prefix - 1;
        len = strlen(rest);
        if (len >= cap) {
            name[0] = '\0';
            return true; /* too long: an unknown service */
        }
        memcpy(name, rest, len + 1);
        len = http_percent_decode(name, len, false);
        if (len >= 5 && strcmp(name + len - 5, "/sink") == 0) {
            *sink = true;
            name[len - 5] = '\0';
        }
        if (strlen(name) != len - (*sink ? 5 : 0) || strchr(name, '/'))
            name[0] = '\0'; /* a NUL or another '/': unknown */
        return true;
    }
    if (strcmp(path, "/") == 0 || strcmp(path, "/sink") == 0) {
        *sink = path[1] != '\0';
        return queue_services_lone(api->services, name, cap);
    }
    return false;
}

bool queue_api_route(http_request *req, void *surface_ctx) {
    queue_api *api = surface_ctx;
    char name[300];
    bool sink;
    if (!service_of_path(api, http_request_path(req), name, sizeof name, &sink))
        return false;
    if (!token_ok(api, req)) {
        reply_text(req, 401,
                   "unauthorized: the Authorization header does not hold "
                   "the queue token");
        return true;
    }
    osp_error *err = NULL;
    if (http_request_query_truncated(req))
        err = osp_error_new(OSP_ERROR_INVALID_ARG,
                            "more than %d query parameters",
                            HTTP_MAX_QUERY_PARAMS);
    const http_query_param *p;
    size_t np = http_request_query_params(req, &p);
    for (size_t i = 0; i < np && !err; i++)
        if (queue_key_is_reserved(p[i].key) && !queue_key_is_known(p[i].key))
            err = osp_error_new(OSP_ERROR_INVALID_ARG,
                                "unknown reserved query key '%.64s'", p[i].key);
    osp_queue *queue = NULL;
    if (!err)
        err = name[0]
                  ? queue_services_find(api->services, name, sink, &queue)
                  : osp_error_new(OSP_ERROR_NOT_FOUND, "unknown queue service");
    bool watch = false;
    if (!err && is_watch_upgrade(req) &&
        (err = query_flag(req, "_watch_", &watch)) == NULL && watch) {
        queue_watch_start(req, api, queue);
        return true;
    }
    queue_op op = OP_GET;
    if (!err)
        err = pick_op(req, &op);
    if (err) {
        http_request_fail(req, err);
        return true;
    }
    queue_call *call = calloc(1, sizeof *call);
    if (call == NULL) {
        http_request_fail(req, osp_error_out_of_memory());
        return true;
    }
    call->api = api;
    call->queue = queue;
    call->op = op;
    call->limit = op == OP_PUT        ? (size_t)api->max_payload_bytes
                  : op == OP_NEGATIVE ? QUEUE_MAX_FORM_BYTES
                                      : 0;
    const char *accept = http_request_header(req, "Accept");
    call->protobuf = accept && strstr(accept, QUEUE_PROTOBUF_TYPE) != NULL;
    http_request_set_handler(req, &queue_handler, call);
    return true;
}

/* ---- the surface ---- */

osp_error *queue_api_new(const queue_api_options *o, queue_api **out) {
    queue_api *api = calloc(1, sizeof *api);
    if (api == NULL)
        return osp_error_out_of_memory();
    api->services = o->services;
    api->max_payload_bytes = o->max_payload_bytes;
    if (o->token && o->token[0] && (api->token = strdup(o->token)) == NULL) {
        free(api);
        return osp_error_out_of_memory();
    }
    pthread_mutex_init(&api->mu, NULL);
    *out = api;
    return NULL;
}

void queue_api_quiesce(queue_api *api) {
    pthread_mutex_lock(&api->mu);
    api->closing = true;
    pending_get *list = api->gets;
    api->gets = NULL;
    /* Answered now with nothing; the store's callback frees the rest. */
    size_t n = 0;
    for (pending_get *pg = list; pg; pg = pg->next)
        n++;
    http_request **reqs = calloc(n ? n : 1, sizeof *reqs);
    size_t k = 0;
    for (pending_get *pg = list, *next; pg; pg = next) {
        next = pg->next;
        if (reqs)
            reqs[k++] = pg->req;
        pg->req = NULL;
        pg->prev = pg->next = NULL;
    }
    pthread_mutex_unlock(&api->mu);
    for (size_t i = 0; i < k; i++)
        http_request_resume(reqs[i]);
    free(reqs);
    queue_watch_close_all(api);
}

void queue_api_free(queue_api *api) {
    if (api == NULL)
        return;
    pthread_mutex_destroy(&api->mu);
    free(api->token);
    free(api);
}
