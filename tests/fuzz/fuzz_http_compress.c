/*
 * libFuzzer target for HTTP content codings (server/http/http_compress.c).
 * Byte 0 picks the mode (mod 3), the rest is its input:
 *   0: an Accept-Encoding / Content-Encoding header value;
 *   1: a compressed request body, inflated as it streams in: byte 1 sets
 *      the wire piece size, and the sink refuses more than MAX_BODY
 *      decompressed bytes, as http_server.c's sink_decoded does;
 *   2: a plain body, compressed with http_compress (byte 1: gzip or
 *      deflate, and where to split it in parts) and inflated again: the
 *      bytes must come back the same.
 * Build: see README.md.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "http_compress.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_BODY ((size_t)1 << 20)

typedef struct body_sink {
    size_t total;
    char *copy; /* when not NULL: the bytes go here, up to cap */
    size_t cap;
} body_sink;

static osp_error *sink_bytes(void *vctx, const char *data, size_t len) {
    body_sink *s = vctx;
    if (len == 0)
        abort(); /* the inflater never passes empty pieces */
    /* Read every byte handed over, so ASan checks the range. */
    volatile char last = data[len - 1];
    (void)last;
    if (s->copy && s->total + len <= s->cap)
        memcpy(s->copy + s->total, data, len);
    s->total += len;
    if (s->total > MAX_BODY)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "decompressed body exceeds the limit");
    return NULL;
}

static void fuzz_header(const uint8_t *data, size_t size) {
    char *value = malloc(size + 1); /* a header value is a C string */
    if (!value)
        return;
    memcpy(value, data, size);
    value[size] = '\0';
    http_encoding accept = http_accept_encoding(value);
    if (accept != HTTP_ENCODING_IDENTITY && accept != HTTP_ENCODING_GZIP &&
        accept != HTTP_ENCODING_DEFLATE)
        abort(); /* never UNKNOWN */
    http_encoding content = http_content_encoding(value);
    if (content < HTTP_ENCODING_IDENTITY || content > HTTP_ENCODING_UNKNOWN)
        abort();
    if (!http_encoding_name(accept) || !http_encoding_name(content))
        abort();
    free(value);
}

/* Feeds in[0..n) to a new inflater in pieces of `piece` bytes; returns the
 * error, if any. */
static osp_error *inflate_in_pieces(const uint8_t *in, size_t n, size_t piece,
                                    body_sink *sink) {
    http_inflater *z = http_inflater_new();
    if (!z)
        return NULL;
    osp_error *err = NULL;
    for (size_t off = 0; off < n && !err; off += piece) {
        size_t len = n - off < piece ? n - off : piece;
        /* An exact-size copy of each wire piece, so ASan catches
         * overreads. */
        uint8_t *copy = malloc(len);
        if (!copy)
            break;
        memcpy(copy, in + off, len);
        err = http_inflater_feed(z, copy, len, sink_bytes, sink);
        free(copy);
    }
    http_inflater_free(z);
    return err;
}

static void fuzz_inflate(const uint8_t *data, size_t size) {
    if (size < 1)
        return;
    size_t piece = data[0] ? data[0] : SIZE_MAX;
    body_sink sink = {0};
    osp_error *err = inflate_in_pieces(data + 1, size - 1, piece, &sink);
    if (err) {
        if (osp_error_get_code(err) != OSP_ERROR_INVALID_ARG)
            abort();
        osp_error_free(err);
    } else if (sink.total > MAX_BODY) {
        abort(); /* the sink's error must come back */
    }
}

static void fuzz_round_trip(const uint8_t *data, size_t size) {
    if (size < 1)
        return;
    http_encoding enc =
        data[0] & 1 ? HTTP_ENCODING_GZIP : HTTP_ENCODING_DEFLATE;
    const uint8_t *body = data + 1;
    size_t n = size - 1;
    size_t split = n ? (size_t)(data[0] >> 1) % (n + 1) : 0;
    http_part parts[3] = {{body, split}, {"", 0}, {body + split, n - split}};
    char *out = NULL;
    size_t out_len = 0;
    osp_error *err = http_compress(enc, parts, 3, &out, &out_len);
    if (err) {
        osp_error_free(err); /* OOM only */
        return;
    }
    body_sink sink = {0, malloc(n ? n : 1), n};
    if (!sink.copy) {
        free(out);
        return;
    }
    size_t piece = (size_t)data[0] % 7 + 1;
    err = inflate_in_pieces((const uint8_t *)out, out_len, piece, &sink);
    if (err || sink.total != n || (n && memcmp(sink.copy, body, n) != 0))
        abort();
    free(sink.copy);
    free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1)
        return 0;
    switch (data[0] % 3) {
    case 0:
        fuzz_header(data + 1, size - 1);
        break;
    case 1:
        fuzz_inflate(data + 1, size - 1);
        break;
    default:
        fuzz_round_trip(data + 1, size - 1);
        break;
    }
    return 0;
}
