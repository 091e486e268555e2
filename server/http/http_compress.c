#include "http_compress.h"

#include <stdlib.h>
#include <string.h>
#include <zlib.h>

http_encoding http_content_encoding(const char *value) {
    if (!value || value[0] == '\0' || strcmp(value, "identity") == 0)
        return HTTP_ENCODING_IDENTITY;
    if (strcmp(value, "gzip") == 0)
        return HTTP_ENCODING_GZIP;
    if (strcmp(value, "deflate") == 0)
        return HTTP_ENCODING_DEFLATE;
    return HTTP_ENCODING_UNKNOWN;
}

/* Triton's CompressionTypeUsed: split on ',', skip leading spaces, split an
 * optional ";q=" weight (strtod; unparsable weights skip the entry), keep
 * the first strictly heavier of identity/deflate/gzip. */
http_encoding http_accept_encoding(const char *value) {
    http_encoding best = HTTP_ENCODING_IDENTITY;
    double best_weight = 0;
    if (!value)
        return best;
    const char *p = value;
    for (;;) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        const char *s = p;
        while (s < p + n && *s == ' ')
            s++;
        const char *q = NULL;
        for (const char *t = s; t + 3 <= p + n; t++) {
            if (memcmp(t, ";q=", 3) == 0) {
                q = t;
                break;
            }
        }
        const char *type_end = q ? q : p + n;
        double weight = 1;
        bool skip = s >= p + n;
        if (!skip && q) {
            char buf[64];
            size_t wl = (size_t)(p + n - (q + 3));
            if (wl >= sizeof buf)
                wl = sizeof buf - 1;
            memcpy(buf, q + 3, wl);
            buf[wl] = '\0';
            char *stop;
            weight = strtod(buf, &stop);
            if (stop == buf)
                skip = true;
        }
        if (!skip) {
            size_t tl = (size_t)(type_end - s);
            http_encoding enc = HTTP_ENCODING_UNKNOWN;
            if (tl == 8 && memcmp(s, "identity", 8) == 0)
                enc = HTTP_ENCODING_IDENTITY;
            else if (tl == 7 && memcmp(s, "deflate", 7) == 0)
                enc = HTTP_ENCODING_DEFLATE;
            else if (tl == 4 && memcmp(s, "gzip", 4) == 0)
                enc = HTTP_ENCODING_GZIP;
            if (enc != HTTP_ENCODING_UNKNOWN && weight > best_weight) {
                best = enc;
                best_weight = weight;
            }
        }
        if (!end)
            break;
        p = end + 1;
    }
    return best;
}

const char *http_encoding_name(http_encoding enc) {
    switch (enc) {
    case HTTP_ENCODING_GZIP:
        return "gzip";
    case HTTP_ENCODING_DEFLATE:
        return "deflate";
    case HTTP_ENCODING_IDENTITY:
        return "identity";
    default:
        return "";
    }
}

/* ---- streaming inflate ---- */

#define INFLATE_CHUNK (256 * 1024)

struct http_inflater {
    z_stream zs;
    bool done; /* end of the compressed stream was reached */
    unsigned char out[INFLATE_CHUNK];
};

bool http_inflater_done(const http_inflater *z) {
    return z->done;
}

http_inflater *http_inflater_new(void) {
    http_inflater *z = calloc(1, sizeof *z);
    if (!z)
        return NULL;
    /* 15 + 32: zlib or gzip header, detected automatically */
    if (inflateInit2(&z->zs, 15 + 32) != Z_OK) {
        free(z);
        return NULL;
    }
    return z;
}

void http_inflater_free(http_inflater *z) {
    if (!z)
        return;
    inflateEnd(&z->zs);
    free(z);
}

osp_error *http_inflater_feed(http_inflater *z, const void *in, size_t n,
                              http_sink_fn sink, void *ctx) {
    const unsigned char *p = in;
    while (n > 0 && !z->done) {
        uInt piece = n > (1u << 30) ? (1u << 30) : (uInt)n;
        z->zs.next_in = (unsigned char *)p;
        z->zs.avail_in = piece;
        do {
            z->zs.next_out = z->out;
            z->zs.avail_out = INFLATE_CHUNK;
            int rc = inflate(&z->zs, Z_NO_FLUSH);
            if (rc != Z_OK && rc != Z_STREAM_END && rc != Z_BUF_ERROR)
                return osp_error_new(OSP_ERROR_INVALID_ARG,
                                     "failed to decompress the request body: "
                                     "%s",
                                     z->zs.msg ? z->zs.msg : "corrupt data");
            size_t have = INFLATE_CHUNK - z->zs.avail_out;
            if (have > 0) {
                osp_error *err = sink(ctx, (const char *)z->out, have);
                if (err)
                    return err;
            }
            if (rc == Z_STREAM_END) {
                z->done = true;
                break;
            }
            if (rc == Z_BUF_ERROR)
                break;
        } while (z->zs.avail_in > 0 || z->zs.avail_out == 0);
        p += piece;
        n -= piece;
    }
    return NULL;
}

/* ---- compress ---- */

osp_error *http_compress(http_encoding enc, const http_part *parts,
                         size_t n_parts, char **out, size_t *out_len) {
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    int window = enc == HTTP_ENCODING_GZIP ? 15 + 16 : 15;
    if (deflateInit2(&zs, Z_DEFAULT_COMPRESSION, Z_DEFLATED, window, 8,
                     Z_DEFAULT_STRATEGY) != Z_OK)
        return osp_error_new(OSP_ERROR_INTERNAL,
                             "failed to initialize state for %s data "
                             "compression",
                             http_encoding_name(enc));
    osp_error *err = NULL;
    size_t total = 0;
    for (size_t i = 0; i < n_parts; i++)
        total += parts[i].len;
    /* deflateBound takes uLong; bodies here are far below that. */
    size_t cap = (size_t)deflateBound(&zs, (uLong)total) + 64;
    char *buf = malloc(cap);
    if (!buf) {
        err = osp_error_new(OSP_ERROR_UNAVAILABLE,
                            "out of memory compressing the response");
        goto out;
    }
    zs.next_out = (unsigned char *)buf;
    zs.avail_out = (uInt)cap;
    for (size_t i = 0; i <= n_parts; i++) {
        bool last = i == n_parts;
        zs.next_in = last ? NULL : (unsigned char *)parts[i].base;
        zs.avail_in = last ? 0 : (uInt)parts[i].len;
        int rc = deflate(&zs, last ? Z_FINISH : Z_NO_FLUSH);
        if ((last && rc != Z_STREAM_END) ||
            (!last && rc != Z_OK && rc != Z_BUF_ERROR) || zs.avail_in != 0) {
            err = osp_error_new(OSP_ERROR_INTERNAL,
                                "encountered inconsistent stream state during "
                                "compression");
            goto out;
        }
    }
    *out = buf;
    *out_len = cap - zs.avail_out;
    buf = NULL;
out:
    free(buf);
    deflateEnd(&zs);
    return err;
}
