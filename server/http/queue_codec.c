/*
 * Queue reply bodies (see queue_codec.h). The protobuf messages are built
 * on the stack and in one scratch array per call, pointing at the items'
 * own strings and bytes, so packing copies each byte once.
 */
#include "queue_codec.h"

#include <stdlib.h>
#include <string.h>

#include "json_util.h"
#include "queueservice.pb-c.h"

/* The strings protobuf-c reads are never written through these casts. */
#define MUTABLE(s) ((char *)(uintptr_t)(s))

/* Fills f (and its tag entries, n_tags of them at entries/ptrs) from item. */
static void frame_fill(Streaming__DataFrameProto *f,
                       Streaming__DataFrameProto__TagsEntry *entries,
                       Streaming__DataFrameProto__TagsEntry **ptrs,
                       const osp_queue_item *item, bool index_only) {
    streaming__data_frame_proto__init(f);
    f->index = item->index;
    for (size_t i = 0; i < item->n_tags; i++) {
        streaming__data_frame_proto__tags_entry__init(&entries[i]);
        entries[i].key = MUTABLE(item->tags[i].key);
        entries[i].value = MUTABLE(item->tags[i].value);
        ptrs[i] = &entries[i];
    }
    f->n_tags = item->n_tags;
    f->tags = item->n_tags ? ptrs : NULL;
    if (!index_only && item->size > 0) {
        f->data.data = (uint8_t *)(uintptr_t)item->data;
        f->data.len = item->size;
    }
}

/* Packs msg into a new buffer. */
static osp_error *pack(const ProtobufCMessage *msg, uint8_t **out,
                       size_t *len) {
    size_t size = protobuf_c_message_get_packed_size(msg);
    *out = NULL;
    *len = 0;
    if (size == 0)
        return NULL;
    uint8_t *buf = malloc(size);
    if (buf == NULL)
        return osp_error_out_of_memory();
    *len = protobuf_c_message_pack(msg, buf);
    *out = buf;
    return NULL;
}

osp_error *queue_encode_frame(const osp_queue_item *item, bool index_only,
                              uint8_t **out, size_t *len) {
    size_t n = item->n_tags ? item->n_tags : 1;
    Streaming__DataFrameProto__TagsEntry *entries = malloc(n * sizeof *entries);
    Streaming__DataFrameProto__TagsEntry **ptrs = malloc(n * sizeof *ptrs);
    osp_error *err = NULL;
    if (entries == NULL || ptrs == NULL) {
        err = osp_error_out_of_memory();
        goto out;
    }
    Streaming__DataFrameProto f;
    frame_fill(&f, entries, ptrs, item, index_only);
    err = pack(&f.base, out, len);
out:
    free(entries);
    free(ptrs);
    return err;
}

osp_error *queue_encode_list_proto(osp_queue_item *const *items, size_t n,
                                   uint8_t **out, size_t *len) {
    size_t n_tags = 0;
    for (size_t i = 0; i < n; i++)
        n_tags += items[i]->n_tags;
    Streaming__DataFrameProto *frames = calloc(n ? n : 1, sizeof *frames);
    Streaming__DataFrameProto **frame_ptrs =
        calloc(n ? n : 1, sizeof *frame_ptrs);
    Streaming__DataFrameProto__TagsEntry *entries =
        calloc(n_tags ? n_tags : 1, sizeof *entries);
    Streaming__DataFrameProto__TagsEntry **tag_ptrs =
        calloc(n_tags ? n_tags : 1, sizeof *tag_ptrs);
    osp_error *err = NULL;
    if (!frames || !frame_ptrs || !entries || !tag_ptrs) {
        err = osp_error_out_of_memory();
        goto out;
    }
    size_t t = 0;
    for (size_t i = 0; i < n; i++) {
        frame_fill(&frames[i], entries + t, tag_ptrs + t, items[i], false);
        t += items[i]->n_tags;
        frame_ptrs[i] = &frames[i];
    }
    Streaming__DataFrameListProto list = STREAMING__DATA_FRAME_LIST_PROTO__INIT;
    list.n_index = n;
    list.index = n ? frame_ptrs : NULL;
    err = pack(&list.base, out, len);
out:
    free(frames);
    free(frame_ptrs);
    free(entries);
    free(tag_ptrs);
    return err;
}

void queue_base64_append(bytebuf *jb, const void *data, size_t len) {
    static const char alphabet[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const unsigned char *p = data;
    if (!bytebuf_reserve(jb, (len + 2) / 3 * 4))
        return;
    for (size_t i = 0; i < len; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16;
        if (i + 1 < len)
            v |= (uint32_t)p[i + 1] << 8;
        if (i + 2 < len)
            v |= p[i + 2];
        char quad[4] = {alphabet[(v >> 18) & 63], alphabet[(v >> 12) & 63],
                        i + 1 < len ? alphabet[(v >> 6) & 63] : '=',
                        i + 2 < len ? alphabet[v & 63] : '='};
        bytebuf_put(jb, quad, 4);
    }
}

/* Moves the text out of jb. */
static osp_error *take(bytebuf *jb, char **out, size_t *len) {
    *out = bytebuf_take(jb, len);
    return *out ? NULL : osp_error_out_of_memory();
}

osp_error *queue_encode_list_json(osp_queue_item *const *items, size_t n,
                                  char **out, size_t *len) {
    bytebuf jb;
    bytebuf_init(&jb);
    bytebuf_putc(&jb, '[');
    for (size_t i = 0; i < n; i++) {
        const osp_queue_item *item = items[i];
        if (i > 0)
            bytebuf_putc(&jb, ',');
        bytebuf_puts(&jb, "{\"index\":");
        json_write_uint(&jb, item->index);
        bytebuf_puts(&jb, ",\"tags\":{");
        for (size_t t = 0; t < item->n_tags; t++) {
            if (t > 0)
                bytebuf_putc(&jb, ',');
            json_write_cstr(&jb, item->tags[t].key);
            bytebuf_putc(&jb, ':');
            json_write_cstr(&jb, item->tags[t].value);
        }
        bytebuf_puts(&jb, "},\"data\":\"");
        queue_base64_append(&jb, item->data, item->size);
        bytebuf_puts(&jb, "\",\"message\":\"\"}");
    }
    bytebuf_putc(&jb, ']');
    return take(&jb, out, len);
}

osp_error *queue_encode_attributes_proto(const osp_queue_attribute *attrs,
                                         size_t n, uint8_t **out, size_t *len) {
    Streaming__AttributesProto__AttributesEntry *entries =
        calloc(n ? n : 1, sizeof *entries);
    Streaming__AttributesProto__AttributesEntry **ptrs =
        calloc(n ? n : 1, sizeof *ptrs);
    osp_error *err = NULL;
    if (entries == NULL || ptrs == NULL) {
        err = osp_error_out_of_memory();
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        streaming__attributes_proto__attributes_entry__init(&entries[i]);
        entries[i].key = attrs[i].key;
        entries[i].value = attrs[i].value;
        ptrs[i] = &entries[i];
    }
    Streaming__AttributesProto msg = STREAMING__ATTRIBUTES_PROTO__INIT;
    msg.n_attributes = n;
    msg.attributes = n ? ptrs : NULL;
    err = pack(&msg.base, out, len);
out:
    free(entries);
    free(ptrs);
    return err;
}

osp_error *queue_encode_attributes_json(const osp_queue_attribute *attrs,
                                        size_t n, char **out, size_t *len) {
    bytebuf jb;
    bytebuf_init(&jb);
    bytebuf_putc(&jb, '{');
    for (size_t i = 0; i < n; i++) {
        if (i > 0)
            bytebuf_putc(&jb, ',');
        json_write_cstr(&jb, attrs[i].key);
        bytebuf_putc(&jb, ':');
        json_write_cstr(&jb, attrs[i].value);
    }
    bytebuf_putc(&jb, '}');
    return take(&jb, out, len);
}
