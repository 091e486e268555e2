/*
 * The KServe v2 inference codec without a transport: the JSON request
 * header (with Triton's binary tensor data extension) to an
 * osp_infer_request, and an osp_infer_response to a JSON header plus the
 * binary output parts. Used by the HTTP surface (server/http/kserve_infer.c,
 * which streams the body), and meant for a gRPC surface and for a queue
 * worker that holds a whole request body (kserve_decode_request_body).
 *
 * Decoding is in two steps so that a streaming transport copies each byte
 * once: kserve_decode_header builds the request and plans one blob per
 * input with parameters.binary_data_size, whose destination is the input's
 * final buffer (from osp_server_alloc_input_buffer); kserve_decoded_feed
 * then copies the bytes after the header into those buffers, and
 * kserve_decoded_finish reports the outcome in Triton's order: a problem in
 * the header is reported only after the blobs of the inputs before it were
 * checked, as Triton reads those first.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kserve_shm.h"
#include "osprey/error.h"
#include "osprey/infer.h"
#include "osprey/server.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- request ---- */

/* One binary input: `size` bytes of the body after the header go to dst. */
typedef struct kserve_blob {
    char *name;      /* owned copy of the input name */
    uint64_t size;   /* parameters.binary_data_size */
    uint64_t filled; /* bytes received so far */
    char *dst;       /* the input buffer (owned by the request); NULL when
                        the bytes are only counted */
} kserve_blob;

/* An output named in the request and how it is sent: binary, JSON, or
 * written into a shared memory region. */
typedef struct kserve_output_choice {
    char *name; /* owned */
    bool binary;
    /* (optional) the region the output goes to: a use held until the
     * choices are destroyed, and shm_byte_size bytes of it at shm_addr */
    kserve_shm_region *shm;
    void *shm_addr;
    uint64_t shm_byte_size;
} kserve_output_choice;

/* How the response sends each output; read by kserve_encode_response. */
typedef struct kserve_output_choices {
    bool default_binary; /* parameters.binary_data_output (raw: true) */
    kserve_output_choice *items;
    size_t n;
} kserve_output_choices;

/* What the transport tells the decoder about the body. */
typedef struct kserve_decode_limits {
    /* Largest JSON input (decoded byte size) accepted; the HTTP surface's
     * --http-max-input-size. */
    size_t max_input;
    /* When true, blobs must fit in body_bytes - header_bytes: a blob past
     * that is only counted (dst NULL) and its size check fails at the end.
     * False for bodies of unknown length (chunked identity), which Triton
     * does not limit. */
    bool body_limited;
    uint64_t body_bytes;   /* the (decoded) body, header included */
    uint64_t header_bytes; /* the JSON header's part of it */
} kserve_decode_limits;

/* A request being decoded. Initialise with kserve_decoded_init, release
 * with kserve_decoded_destroy (which frees whatever was not taken). */
typedef struct kserve_decoded {
    const char *model; /* borrowed (must outlive d), for messages */
    int64_t version;
    /* Where shared_memory_region parameters are looked up; set by the
     * transport before decoding (borrowed; NULL: shared memory is not
     * supported). Inputs are copied out of their regions while decoding;
     * as in Triton, the request keeps using its regions until it is done:
     * input regions are held here (released by kserve_decoded_destroy),
     * output regions in `outputs`. */
    kserve_shm_registry *shm;
    kserve_shm_region **shm_inputs; /* uses held */
    size_t n_shm_inputs;

    /* The request (owned; NULL after a header error, or once taken with
     * kserve_decoded_take_request). */
    osp_infer_request *request;
    kserve_output_choices outputs;

    /* binary inputs in input order */
    kserve_blob *blobs;
    size_t n_blobs;
    size_t cur_blob;      /* the one being filled */
    uint64_t extra_bytes; /* body bytes after the last blob */
    uint64_t reserved;    /* body bytes the blobs so far need */

    /* A header error (owned), reported by kserve_decoded_finish after the
     * first error_blobs blobs were checked, and after the extra-bytes check
     * too when error_after_inputs (the error is in "outputs"). */
    osp_error *error;
    size_t error_blobs;
    bool error_after_inputs;
} kserve_decoded;

/* Sets req's id from the "id" member of a request body's JSON root
 * (borrowed), if any; Triton's "Unable to parse 'id'" when it is not a
 * string. */
struct json_object;
osp_error *kserve_request_id_from_json(osp_infer_request *req,
                                       struct json_object *root);

/* A request or response parameter's value as JSON (string, integer,
 * bool or double), appended to b. */
struct bytebuf;
void kserve_write_parameter_value(struct bytebuf *b, const osp_parameter *p);

void kserve_decoded_init(kserve_decoded *d);
void kserve_decoded_destroy(kserve_decoded *d);

/* Decodes the JSON header text[0..len) (borrowed; text[len] must be NUL, as
 * json_parse needs) for model `model` (borrowed; must outlive d) and
 * `version` (-1 = latest) into d (initialised, not yet decoded). Input
 * buffers come from `core` (borrowed); `limits` (borrowed) bound them.
 * Errors are not returned: they land in d->error for kserve_decoded_finish,
 * the request and its buffers are freed and the blobs planned so far are
 * only counted. */
void kserve_decode_header(kserve_decoded *d, osp_server *core,
                          const char *model, int64_t version, const char *text,
                          size_t len, const kserve_decode_limits *limits);

/* Copies body bytes that follow the header (data[0..len), borrowed) into
 * the blobs in order; bytes past the last blob are counted. */
void kserve_decoded_feed(kserve_decoded *d, const char *data, size_t len);

/* At the end of the body: NULL when the request is complete, otherwise the
 * error to report (caller owns), in Triton's order: a missing blob
 * ("unexpected size for input '<i>', expecting <n> additional bytes for
 * model '<m>'"), bytes after the blobs ("unexpected additional input data
 * for model '<m>'"), then the header error. */
osp_error *kserve_decoded_finish(kserve_decoded *d);

/* Moves the request out of d (caller owns it; NULL if there is none). */
osp_infer_request *kserve_decoded_take_request(kserve_decoded *d);

/* A whole request body in memory (a queue item): the JSON header is its
 * first header_len bytes (body_len for JSON only), binary inputs follow.
 * Decodes the header (copied once to NUL-terminate it), copies the blobs
 * into their input buffers and finishes, with the same messages as a
 * streamed request. On success the caller owns *request (ownership moves)
 * and `outputs` (an uninitialised struct; release with
 * kserve_output_choices_destroy) says how to encode the response. `body`,
 * `model` and `core` are borrowed. max_input bounds JSON inputs; limiting
 * the header's own size, and raw bodies (no JSON header: one
 * osp_infer_request_set_raw_input), are the caller's. */
osp_error *kserve_decode_request_body(osp_server *core, const char *model,
                                      int64_t version, const char *body,
                                      size_t body_len, size_t header_len,
                                      size_t max_input,
                                      osp_infer_request **request,
                                      kserve_output_choices *outputs);

void kserve_output_choices_destroy(kserve_output_choices *c);

/* ---- response ---- */

/* One piece of the response body (layout-compatible with struct iovec's
 * meaning: base/len, borrowed from the encoded response's payload). */
typedef struct kserve_part {
    const void *base;
    size_t len;
} kserve_part;

/* An encoded response: parts[0] is the JSON header (header_len bytes),
 * followed by each binary output in output order, pointing into the
 * response's output buffers without a copy. `payload` owns all of it and
 * is released with kserve_encoded_payload_free (after the transport is
 * done with the bytes); parts itself is freed with kserve_encoded_destroy.
 */
typedef struct kserve_encoded {
    kserve_part *parts;
    size_t n_parts;
    size_t header_len;
    /* Any binary part: the transport sends application/octet-stream and
     * Inference-Header-Content-Length: header_len. */
    bool binary;
    void *payload;
} kserve_encoded;

/* Encodes a successful response r (borrowed; its binary outputs' buffers
 * are taken out of it into the payload). An output with a shared memory
 * choice is copied into its region and listed with only its name,
 * datatype and shape, as Triton does; a region smaller than the output is
 * Triton's INTERNAL "shared memory size specified with the request for
 * output '<o>' (<n> bytes) should be at least <m> bytes to hold the
 * results". `model` (borrowed) is the name
 * when r has none; `choices` (borrowed) picks binary or JSON per output.
 * An output with no choice gets choices->default_binary. On success *out is
 * filled (caller owns it); on error nothing is left to free. r->error must
 * be NULL: error responses are the transport's business. */
osp_error *kserve_encode_response(osp_infer_response *r, const char *model,
                                  const kserve_output_choices *choices,
                                  kserve_encoded *out);

/* Frees what kserve_encoded.payload owns (JSON text, output buffers).
 * NULL is a no-op. Shaped as a transport's release callback. */
void kserve_encoded_payload_free(void *payload);

/* Frees e->parts and the payload if still there (set e->payload NULL after
 * handing it to a transport). */
void kserve_encoded_destroy(kserve_encoded *e);

/* Logs, verbose as Triton does, an inference request the frontend answers
 * with err before the core ran it: "[request id: <id>] Infer failed:
 * <message>" (request_id NULL or "" reads <id_unknown>). */
void kserve_log_infer_failed(const char *request_id, const osp_error *err);

#ifdef __cplusplus
}
#endif
