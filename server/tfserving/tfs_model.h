/*
 * An Osprey model as TensorFlow Serving sees it: its signatures and version
 * labels, and the status and metadata replies of the /v1 API (../shared
 * protocol reference §2). A model declares them in its config.pbtxt
 * (parameter "tf_serving", a JSON document; see docs/tfserving.md); a model
 * that declares nothing has one `serving_default` predict signature built
 * from its config's inputs and outputs.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "osprey/datatype.h"
#include "osprey/error.h"
#include "osprey/model_config.h"
#include "osprey/server.h"
#include "osprey/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

struct bytebuf;

typedef enum tfs_method {
    TFS_METHOD_PREDICT = 0, /* "tensorflow/serving/predict" */
    TFS_METHOD_CLASSIFY,    /* "tensorflow/serving/classify" */
    TFS_METHOD_REGRESS,     /* "tensorflow/serving/regress" */
} tfs_method;

/* The method_name a signature of that method shows. */
const char *tfs_method_name(tfs_method method);

/* One entry of a signature's inputs or outputs map. */
typedef struct tfs_tensor_info {
    char *key;          /* the map key: "x", "inputs", "scores", "outputs" */
    char *tensor;       /* the Osprey input or output it is; NULL for the
                           serialized tf.Example input of classify/regress */
    char *name;         /* TF tensor name shown by metadata: "x:0" */
    osp_datatype dtype; /* shown as DT_*; BYTES (DT_STRING) for tf.Example */
    bool has_shape;     /* metadata prints tensor_shape */
    bool unknown_rank;  /* ... as {"dim": [], "unknown_rank": true} */
    osp_shape shape;    /* when has_shape && !unknown_rank; -1 = any */
} tfs_tensor_info;

/* classify/regress: a tf.Example feature that fills an Osprey input, as a
 * FixedLenFeature([1], float32) (with an optional default). */
typedef struct tfs_feature_spec {
    char *feature; /* feature name in the examples: "x" */
    char *input;   /* Osprey input it fills: "x" */
    bool has_default;
    float default_value;
} tfs_feature_spec;

typedef struct tfs_signature {
    char *name;
    tfs_method method;
    tfs_tensor_info *inputs; /* sorted by key */
    size_t n_inputs;
    tfs_tensor_info *outputs; /* sorted by key */
    size_t n_outputs;
    tfs_feature_spec *features; /* classify/regress */
    size_t n_features;
    /* predict: each input is fed as one flat [count] tensor and every
     * output takes the first input's request shape (an elementwise model
     * accepts any feed shape, as TensorFlow does). */
    bool elementwise;
} tfs_signature;

typedef struct tfs_version_label {
    char *label;
    int64_t version;
} tfs_version_label;

typedef struct tfs_model_view {
    tfs_signature *signatures; /* sorted by name */
    size_t n_signatures;
    tfs_version_label *labels;
    size_t n_labels;
} tfs_model_view;

/* The view of a model config (borrowed): the "tf_serving" parameter's
 * signatures and labels, validated against the config (every tensor and
 * input named must exist; INVALID_ARG naming the problem otherwise), or the
 * default serving_default. Caller owns *out. */
osp_error *tfs_model_view_new(const osp_model_config *config,
                              tfs_model_view **out);
void tfs_model_view_free(tfs_model_view *view);
/* Borrowed, or NULL. */
const tfs_signature *tfs_model_view_signature(const tfs_model_view *view,
                                              const char *name);
/* false when the model has no such label. */
bool tfs_model_view_label(const tfs_model_view *view, const char *label,
                          int64_t *version);

/* GET /v1/models/NAME[/versions/N] (§2.1): appends the
 * GetModelStatusResponse of every version of `name` (descending; only
 * `version` when has_version) from the core's repository index (READY ->
 * AVAILABLE, LOADING, UNLOADING, UNAVAILABLE -> END with its reason).
 * NOT_FOUND "Could not find any versions of model <name>" / "Could not
 * find version <N> of model <name>". */
osp_error *tfs_write_model_status(osp_server *server, const char *name,
                                  bool has_version, int64_t version,
                                  struct bytebuf *out);

/* GET .../metadata (§2.2): the hand-concatenated GetModelMetadataResponse
 * of model `name` at `version` with the view's signatures. */
void tfs_write_model_metadata(const char *name, int64_t version,
                              const tfs_model_view *view, struct bytebuf *out);

#ifdef __cplusplus
}
#endif
