/*
 * What a queue client sends the server, arbitrary bytes each: WebSocket
 * frames into a watch's session (server/http/websocket.c on libwslay:
 * pings, data, close, oversized and malformed frames, fed in two pieces
 * split at the first byte's value), the protobuf messages of the queue
 * (proto/queueservice.proto through protoc-c, re-encoded with
 * queue_codec.c when they decode), and the query values of the queue API
 * (queue_params.c: durations, index lists, negative-commit forms).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "queue_codec.h"
#include "queue_params.h"
#include "queueservice.pb-c.h"
#include "websocket.h"

static size_t sent_bytes;

static bool count_send(void *ctx, const void *data, size_t len) {
    (void)ctx;
    (void)data;
    sent_bytes += len;
    return sent_bytes < (1u << 20);
}

static const ws_session_callbacks callbacks = {.send = count_send};

static void fuzz_websocket(const uint8_t *data, size_t size) {
    ws_session *s = NULL;
    osp_error *err = ws_session_new(&callbacks, NULL, 4096, &s);
    if (err) {
        osp_error_free(err);
        return;
    }
    size_t split = size ? data[0] % (size + 1) : 0;
    sent_bytes = 0;
    if (ws_session_feed(s, data, split))
        ws_session_feed(s, data + split, size - split);
    ws_session_send_binary(s, data, size < 64 ? size : 64);
    ws_session_send_close(s, 1001);
    ws_session_free(s);
}

static void fuzz_protobuf(const uint8_t *data, size_t size) {
    Streaming__DataFrameListProto *list =
        streaming__data_frame_list_proto__unpack(NULL, size, data);
    if (list) {
        for (size_t i = 0; i < list->n_index && i < 8; i++) {
            Streaming__DataFrameProto *f = list->index[i];
            osp_queue_tag tags[16];
            size_t n = 0;
            for (size_t t = 0; t < f->n_tags && n < 16; t++)
                tags[n++] = (osp_queue_tag){f->tags[t]->key, f->tags[t]->value};
            osp_queue_item item = {.index = f->index,
                                   .tags = tags,
                                   .n_tags = n,
                                   .data = f->data.data,
                                   .size = f->data.len};
            uint8_t *out = NULL;
            size_t len = 0;
            osp_error *err = queue_encode_frame(&item, i % 2, &out, &len);
            osp_error_free(err);
            free(out);
            char *json = NULL;
            osp_queue_item *items[1] = {&item};
            err = queue_encode_list_json(items, 1, &json, &len);
            osp_error_free(err);
            free(json);
        }
        streaming__data_frame_list_proto__free_unpacked(list, NULL);
    }
    Streaming__AttributesProto *attrs =
        streaming__attributes_proto__unpack(NULL, size, data);
    if (attrs)
        streaming__attributes_proto__free_unpacked(attrs, NULL);
}

static void fuzz_params(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (!text)
        return;
    memcpy(text, data, size);
    text[size] = '\0';
    uint64_t ns, v;
    int64_t start;
    bool b;
    osp_error_free(queue_parse_timeout(text, &ns));
    osp_error_free(queue_parse_uint("_index_", text, UINT64_MAX, &v));
    osp_error_free(queue_parse_start_index(text, &start));
    osp_error_free(queue_parse_bool("_raw_", text, &b));
    uint64_t *list = NULL;
    size_t n = 0;
    osp_error *err = queue_parse_indexes(text, &list, &n);
    if (!err)
        free(list);
    osp_error_free(err);
    char *code = NULL, *reason = NULL;
    err = queue_parse_negative_form(text, size, &code, &reason);
    osp_error_free(err);
    free(code);
    free(reason);
    queue_negative_code_valid(text);
    char accept[WS_ACCEPT_KEY_SIZE];
    ws_accept_key(text, accept);
    free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_websocket(data, size);
    fuzz_protobuf(data, size);
    fuzz_params(data, size);
    return 0;
}
