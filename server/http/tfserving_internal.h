/*
 * What the two files of the /v1 surface share (tfserving.c routes and
 * answers status and metadata; tfserving_infer.c runs inference).
 */
#pragma once

#include "tfs_model.h"
#include "tfserving.h"

struct bytebuf;

typedef enum tfserving_action {
    TFSERVING_STATUS = 0,
    TFSERVING_METADATA,
    TFSERVING_PREDICT,
    TFSERVING_CLASSIFY,
    TFSERVING_REGRESS,
} tfserving_action;

/* What the URL names, decoded. */
typedef struct tfserving_target {
    char *name; /* owned */
    bool has_version;
    int64_t version;
    char *label; /* owned; NULL when none */
    tfserving_action action;
} tfserving_target;

/* The model version a request names (latest, a version, or a label), with
 * a reference held (*model, release with osp_model_unref) and its TF
 * Serving view (*view, caller frees). TF Serving's lookup errors: 404
 * "Servable not found for request: Latest(<m>)" / "Specific(<m>, <v>)",
 * 400 "Unrecognized servable version label: <l>". */
osp_error *tfserving_servable(osp_server *server, const tfserving_target *t,
                              osp_model **model, tfs_model_view **view);

/* Replies 200 application/json with the body in b (taken over; NULL on
 * OOM is an error reply), with the CORS headers when enabled. */
void tfserving_reply_json(http_request *req, struct bytebuf *b);

/* Where tfserving_infer.c keeps its per-request state; freed with
 * tfserving_infer_free when the request ends. */
void **tfserving_infer_slot(http_request *req);

/* POST :predict / :classify / :regress once the body is in (its text is
 * borrowed). Sets a reply, or starts the inference (asynchronous). */
osp_error *tfserving_infer_start(http_request *req, tfserving_target *t,
                                 const char *body, size_t len);
/* The asynchronous inference finished: writes the reply. */
osp_error *tfserving_infer_finish(http_request *req);
/* Frees what tfserving_infer_start left in the request's handler state. */
void tfserving_infer_free(void *infer_state);
