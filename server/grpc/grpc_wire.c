/*
 * Protobuf wire helpers of the gRPC frontend (see grpc_wire.h).
 */
#include "grpc_wire.h"

#include <stdlib.h>
#include <string.h>

/* A reading position in a segmented message. */
typedef struct cursor {
    const kgrpc_message *m;
    size_t seg;    /* current segment */
    size_t at;     /* offset in it */
    size_t offset; /* absolute offset */
} cursor;

static bool cursor_byte(cursor *c, uint8_t *out) {
    while (c->seg < c->m->n_segments && c->at >= c->m->segments[c->seg].len) {
        c->seg++;
        c->at = 0;
    }
    if (c->seg >= c->m->n_segments)
        return false;
    *out = c->m->segments[c->seg].data[c->at++];
    c->offset++;
    return true;
}

static bool cursor_varint(cursor *c, uint64_t *out) {
    uint64_t v = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        uint8_t b;
        if (!cursor_byte(c, &b))
            return false;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *out = v;
            return true;
        }
    }
    return false; /* more than 10 bytes */
}

/* Moves the cursor forward n bytes; false past the end. */
static bool cursor_skip(cursor *c, uint64_t n) {
    if (n > c->m->total - c->offset)
        return false;
    while (n > 0) {
        size_t left = c->m->segments[c->seg].len - c->at;
        if (left == 0) {
            c->seg++;
            c->at = 0;
            continue;
        }
        size_t step = n < left ? (size_t)n : left;
        c->at += step;
        c->offset += step;
        n -= step;
    }
    return true;
}

void kgrpc_message_copy(const kgrpc_message *m, kgrpc_span span, void *dst) {
    uint8_t *out = dst;
    size_t base = 0;
    for (size_t i = 0; i < m->n_segments && span.len > 0; i++) {
        const kgrpc_segment *s = &m->segments[i];
        if (span.offset < base + s->len) {
            size_t from = span.offset - base;
            size_t n = s->len - from < span.len ? s->len - from : span.len;
            memcpy(out, s->data + from, n);
            out += n;
            span.offset += n;
            span.len -= n;
        }
        base += s->len;
    }
}

bool kgrpc_split_infer_request(const kgrpc_message *m, uint8_t **rest,
                               size_t *rest_len, kgrpc_span **raw,
                               size_t *n_raw, bool *oom) {
    cursor c = {.m = m};
    uint8_t *out = NULL;
    size_t out_len = 0;
    kgrpc_span *spans = NULL;
    size_t n_spans = 0, cap_spans = 0;
    *oom = false;
    /* The rest is never longer than the message. */
    if (m->total && !(out = malloc(m->total))) {
        *oom = true;
        return false;
    }
    while (c.offset < m->total) {
        size_t field_start = c.offset;
        uint64_t key, len = 0;
        if (!cursor_varint(&c, &key) || (key >> 3) == 0 ||
            (key >> 3) > 0x1fffffff)
            goto bad;
        switch (key & 7) {
        case 0: { /* varint */
            uint64_t ignored;
            if (!cursor_varint(&c, &ignored))
                goto bad;
            break;
        }
        case 1:
            if (!cursor_skip(&c, 8))
                goto bad;
            break;
        case 5:
            if (!cursor_skip(&c, 4))
                goto bad;
            break;
        case 2: {
            if (!cursor_varint(&c, &len) || len > m->total - c.offset)
                goto bad;
            if ((key >> 3) == KGRPC_INFER_REQUEST_RAW_FIELD) {
                if (n_spans == cap_spans) {
                    size_t cap = cap_spans ? cap_spans * 2 : 8;
                    kgrpc_span *grown = realloc(spans, cap * sizeof *grown);
                    if (!grown) {
                        *oom = true;
                        goto bad;
                    }
                    spans = grown;
                    cap_spans = cap;
                }
                spans[n_spans++] = (kgrpc_span){c.offset, (size_t)len};
                cursor_skip(&c, len);
                continue; /* not copied into the rest */
            }
            cursor_skip(&c, len);
            break;
        }
        default: /* groups (3, 4) and 6, 7 */
            goto bad;
        }
        kgrpc_message_copy(m, (kgrpc_span){field_start, c.offset - field_start},
                           out + out_len);
        out_len += c.offset - field_start;
    }
    *rest = out;
    *rest_len = out_len;
    *raw = spans;
    *n_raw = n_spans;
    return true;
bad:
    free(out);
    free(spans);
    return false;
}

size_t kgrpc_varint_size(uint64_t v) {
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static size_t put_varint(uint8_t *buf, uint64_t v) {
    size_t n = 0;
    while (v >= 0x80) {
        buf[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    buf[n++] = (uint8_t)v;
    return n;
}

size_t kgrpc_put_length_prefix(uint8_t *buf, uint32_t field, uint64_t len) {
    size_t n = put_varint(buf, ((uint64_t)field << 3) | 2);
    return n + put_varint(buf + n, len);
}
