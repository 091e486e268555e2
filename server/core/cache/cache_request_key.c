/*
 * The response-cache key's content (cache_request_key.h) and its SHA-256
 * form; the hex rendering of keys shared by every implementation.
 */
#include "cache_request_key.h"

#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>

#include "osprey/datatype.h"

void cache_key_hex(const cache_key *key, char buf[65]) {
    static const char digits[] = "0123456789abcdef";
    size_t n = key->len <= 32 ? key->len : 32;
    for (size_t i = 0; i < n; i++) {
        buf[2 * i] = digits[key->bytes[i] >> 4];
        buf[2 * i + 1] = digits[key->bytes[i] & 15];
    }
    buf[2 * n] = '\0';
}

static void walk_string(const cache_key_sink *sink, const char *s) {
    sink->field(sink->ctx, s ? s : "", s ? strlen(s) : 0);
}

/* Inputs in name order (Triton hashes its map of inputs): an insertion
 * sort of indices; without memory for them, the request's order. */
void cache_key_walk(const char *model, int64_t version,
                    const osp_infer_request *req, const cache_key_sink *sink) {
    walk_string(sink, model);
    sink->number(sink->ctx, (uint64_t)version);
    size_t n = req->n_inputs;
    size_t *order = malloc((n + 1) * sizeof(*order));
    for (size_t i = 0; order && i < n; i++) {
        size_t j = i;
        while (j > 0 && strcmp(req->inputs[order[j - 1]].name,
                               req->inputs[i].name) > 0) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = i;
    }
    sink->number(sink->ctx, (uint64_t)n);
    for (size_t k = 0; k < n; k++) {
        const osp_infer_input *in = &req->inputs[order ? order[k] : k];
        walk_string(sink, in->name);
        walk_string(sink, osp_datatype_wire_name(in->dtype));
        sink->number(sink->ctx, (uint64_t)in->shape.rank);
        for (int d = 0; d < in->shape.rank; d++)
            sink->number(sink->ctx, (uint64_t)in->shape.dims[d]);
        sink->number(sink->ctx, in->data ? 1 : 0);
        if (in->data)
            sink->field(sink->ctx, in->data->data, in->data->size);
    }
    free(order);
    sink->number(sink->ctx, (uint64_t)req->n_outputs);
    for (size_t k = 0; k < req->n_outputs; k++) {
        walk_string(sink, req->outputs[k]);
        sink->number(sink->ctx, req->output_class_counts
                                    ? (uint64_t)req->output_class_counts[k]
                                    : 0);
    }
}

/* ---- SHA-256 ------------------------------------------------------------- */

typedef struct sha_sink {
    EVP_MD_CTX *md;
    int ok;
} sha_sink;

static void sha_number(void *ctx, uint64_t v) {
    sha_sink *s = ctx;
    unsigned char le[8];
    for (int i = 0; i < 8; i++)
        le[i] = (unsigned char)(v >> (8 * i));
    s->ok &= EVP_DigestUpdate(s->md, le, sizeof le);
}

static void sha_field(void *ctx, const void *data, size_t n) {
    sha_sink *s = ctx;
    sha_number(ctx, (uint64_t)n);
    if (n)
        s->ok &= EVP_DigestUpdate(s->md, data, n);
}

/* Names this layout: a change to the walk or its encoding changes the tag,
 * so that old and new replicas never read each other's keys. */
static const char KEY_DOMAIN[] = "osprey response cache key v1";

cache_key cache_key_sha256(const char *model, int64_t version,
                           const osp_infer_request *req) {
    cache_key key = {.len = 0};
    sha_sink s = {EVP_MD_CTX_new(), 1};
    if (!s.md)
        return key;
    s.ok = EVP_DigestInit_ex(s.md, EVP_sha256(), NULL);
    sha_field(&s, KEY_DOMAIN, sizeof KEY_DOMAIN - 1);
    cache_key_sink sink = {sha_field, sha_number, &s};
    cache_key_walk(model, version, req, &sink);
    unsigned int len = 0;
    if (s.ok && EVP_DigestFinal_ex(s.md, key.bytes, &len) && len == 32)
        key.len = 32;
    EVP_MD_CTX_free(s.md);
    return key;
}
