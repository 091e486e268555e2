/*
 * TensorFlow Serving's REST JSON (util/json_tensor.cc under rapidjson
 * v1.1.0), without a transport: request bodies parsed into tensors and
 * tf.Example-like features, and tensors and results written back, with TF
 * Serving's exact messages and bytes (../shared protocol reference §3-§6
 * and the [J]/[V] vectors of §7). Used by the TF Serving HTTP surface
 * (server/http/tfserving*.c).
 *
 * Every error is INVALID_ARG (HTTP 400) unless said otherwise;
 * UNSUPPORTED means TF's UNIMPLEMENTED (HTTP 501).
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "osprey/datatype.h"
#include "osprey/error.h"
#include "osprey/memory.h"
#include "osprey/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

struct bytebuf;

/* ---- the parsed body ---- */

/* A parsed request body: a JSON document with rapidjson's number classes,
 * built without recursion on the input depth and freed the same way; all
 * of its memory is released by tfs_body_free. */
typedef struct tfs_body tfs_body;

/* Parses a request body (borrowed; need not be NUL-terminated) as TF
 * Serving does: the empty-body check, the parse (NaN/Infinity accepted,
 * trailing data after the top-level value ignored, no depth limit), the
 * top level must be an object, "signature_name" must be a string when
 * present. Messages exactly as §3.1. On success *signature_name points
 * into the body ("serving_default" when absent or empty; borrowed, valid
 * until tfs_body_free). Caller owns *out. */
osp_error *tfs_body_parse(const char *text, size_t len, tfs_body **out,
                          const char **signature_name);
void tfs_body_free(tfs_body *body);

/* ---- predict ---- */

/* One input of the signature being fed: its key in the request and its
 * type. Osprey datatypes stand for TF's (FP32 DT_FLOAT, FP64 DT_DOUBLE,
 * INT8/16/32/64, UINT8/16/32/64, BOOL, BYTES DT_STRING, FP16 DT_HALF,
 * BF16 DT_BFLOAT16). */
typedef struct tfs_input_spec {
    const char *key; /* the signature's input key ("x") */
    osp_datatype dtype;
} tfs_input_spec;

typedef enum tfs_format {
    TFS_FORMAT_ROW = 0,  /* "instances" -> "predictions" */
    TFS_FORMAT_COLUMNAR, /* "inputs" -> "outputs" */
} tfs_format;

/* A dense tensor. BYTES data is in Triton's layout: each element a 4-byte
 * little-endian length followed by its bytes. */
typedef struct tfs_tensor {
    const char *key; /* borrowed from the spec (input) or the caller */
    osp_datatype dtype;
    osp_shape shape;
    osp_buffer *data; /* owned; host memory */
} tfs_tensor;

/* The inputs of a predict body for a signature whose inputs are
 * specs[0..n) (n >= 1; specs sorted by key, as TF's map is: the "values"
 * mode of §3.5 feeds specs[0]). Checks in §3.2 step 3 and §3.3-3.6 order,
 * with exact messages. `max_bytes` bounds the bytes of all tensors
 * together (a larger body is refused with OSP_REASON_TOO_LARGE). On
 * success *tensors is an array of n tensors in spec order (caller frees
 * with tfs_tensors_free) and *format says which key was used. */
osp_error *tfs_predict_inputs(const tfs_body *body, const tfs_input_spec *specs,
                              size_t n, size_t max_bytes, tfs_format *format,
                              tfs_tensor **tensors);
void tfs_tensors_free(tfs_tensor *tensors, size_t n);

/* One output to write: name (the signature's output key), type, shape and
 * bytes (borrowed; BYTES in the layout above). */
typedef struct tfs_output {
    const char *name;
    osp_datatype dtype;
    osp_shape shape;
    const void *data;
    size_t byte_size;
} tfs_output;

/* Writes the predict reply body for outputs[0..n) in `format` exactly as
 * §4 (rapidjson PrettyWriter bytes, WriteDecimal numbers, NaN/Infinity
 * tokens, "_bytes" outputs as {"b64": ...}); errors as §4. Appends to out. */
osp_error *tfs_write_predict(tfs_format format, const tfs_output *outputs,
                             size_t n, struct bytebuf *out);

/* ---- classify and regress ---- */

typedef enum tfs_feature_kind {
    TFS_FEATURE_EMPTY = 0, /* [] */
    TFS_FEATURE_BYTES,
    TFS_FEATURE_FLOAT,
    TFS_FEATURE_INT64,
} tfs_feature_kind;

/* One feature of an example: a list of one kind (bytes values are not
 * NUL-terminated; lens gives their sizes). All owned by the examples. */
typedef struct tfs_feature {
    const char *name;
    tfs_feature_kind kind;
    size_t n;
    const float *floats;
    const int64_t *ints;
    const char *const *bytes;
    const size_t *lens;
} tfs_feature;

typedef struct tfs_example {
    const tfs_feature *features;
    size_t n_features;
} tfs_example;

/* The examples of a classify or regress body (§5): "context" checked
 * first, then "examples", with exact messages. Each example already has
 * the context's features merged in (the example's own win on the same
 * name). Caller frees *out with tfs_examples_free. */
typedef struct tfs_examples tfs_examples;
osp_error *tfs_parse_examples(const tfs_body *body, tfs_examples **out);
size_t tfs_examples_count(const tfs_examples *ex);
/* The i-th example (borrowed, valid until tfs_examples_free). */
const tfs_example *tfs_examples_at(const tfs_examples *ex, size_t i);
/* The feature named name of an example, or NULL. */
const tfs_feature *tfs_example_feature(const tfs_example *ex, const char *name);
void tfs_examples_free(tfs_examples *ex);

/* {"results": [[[label, score], ...], ...]} for n examples of k classes
 * each: labels (NULL: "" for every class) and scores (NULL: 0.0) are
 * n*k row-major. Exact bytes as §5. */
osp_error *tfs_write_classify(size_t n, size_t k, const char *const *labels,
                              const float *scores, struct bytebuf *out);
/* {"results": [v, ...]} for n values; n == 0 is §5's "empty" error. */
osp_error *tfs_write_regress(const float *values, size_t n,
                             struct bytebuf *out);

/* ---- errors ---- */

/* The error body of §1.4: {\n    "error": "<message>"\n} with
 * rapidjson's escaping. Appends to out. */
void tfs_write_error(const char *message, struct bytebuf *out);

/* TF's DataTypeString of an Osprey datatype as messages use it ("float",
 * "int32", "string", "half", ...), and the DT_ enum name metadata uses
 * ("DT_FLOAT", ...). */
const char *tfs_dtype_string(osp_datatype dt);
const char *tfs_dtype_enum_name(osp_datatype dt);
/* The datatype of a DT_* name; OSP_TYPE_INVALID when unknown. */
osp_datatype tfs_dtype_from_enum_name(const char *name);

#ifdef __cplusplus
}
#endif
