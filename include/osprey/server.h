/*
 * The server object frontends talk to: a model repository, the models'
 * lifecycle, and asynchronous inference. Thread-safe: every function may be
 * called from any frontend thread.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "osprey/device_options.h"
#include "osprey/error.h"
#include "osprey/infer.h"
#include "osprey/memory.h"
#include "osprey/model_config.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct osp_server osp_server;
typedef struct osp_model osp_model;

typedef enum osp_model_control_mode {
    OSP_MODEL_CONTROL_NONE = 0, /* load everything at start, no load API */
    OSP_MODEL_CONTROL_EXPLICIT,
    OSP_MODEL_CONTROL_POLL, /* load everything, then follow the repository */
} osp_model_control_mode;

typedef enum osp_model_state {
    OSP_MODEL_STATE_UNKNOWN = 0, /* in the repository, never loaded */
    OSP_MODEL_STATE_READY,
    OSP_MODEL_STATE_UNAVAILABLE,
    OSP_MODEL_STATE_LOADING,
    OSP_MODEL_STATE_UNLOADING,
} osp_model_state;

/* "READY", "UNAVAILABLE", "LOADING", "UNLOADING"; "" for UNKNOWN. */
const char *osp_model_state_name(osp_model_state state);

struct osp_backend;

/* One --backend-config setting (Triton's backend command-line config). */
typedef struct osp_backend_setting {
    const char *backend; /* "" (or NULL): every backend */
    const char *key;
    const char *value;
} osp_backend_setting;

/* A model repository that is not a local folder (an s3:// bucket): the
 * server asks it for model names, for a local folder holding a model's
 * files (backends read plain files), and for a fingerprint of each model
 * (poll mode reloads a model whose fingerprint changed). Every slot is
 * called from any thread, several at once. */
typedef struct osp_repository_source {
    void *self;
    /* Sorted names of the repository's models. Caller frees each name and
     * the array with free(). */
    osp_error *(*list)(void *self, char ***names, size_t *n);
    /* Changes when the model's files change; 0 when the model is gone.
     * May answer from the last list(). */
    uint64_t (*fingerprint)(void *self, const char *name);
    /* A local folder holding the model's current files, complete (never a
     * half-written one). NOT_FOUND when the repository has no such model.
     * Caller frees *dir; the folder stays until the next model_dir of the
     * same model has returned twice more, or the source is closed. */
    osp_error *(*model_dir)(void *self, const char *name, char **dir);
} osp_repository_source;

/* Triton's redis cache settings (--cache-config=redis,KEY=VALUE); times
 * in milliseconds, 0 meaning no limit as in Triton. Strings borrowed. */
typedef struct osp_redis_cache_options {
    const char *host; /* required */
    int port;         /* required, 1..65535 */
    const char *user; /* NULL or "default": AUTH with the password alone */
    const char *password; /* NULL: no AUTH; never logged */
    int db;               /* SELECT db when not 0 */
    uint64_t connect_timeout_ms; /* per connect */
    uint64_t socket_timeout_ms;  /* per command */
    int pool_size;               /* connections, >= 1 */
    uint64_t wait_timeout_ms;    /* for a free connection of the pool */
} osp_redis_cache_options;

typedef struct osp_server_options {
    /* A local folder; borrowed during osp_server_new. With a
     * repository_source, only named in messages. */
    const char *model_repository;
    /* Where models come from instead of the local folder (NULL: the
     * folder). Borrowed for the server's lifetime. */
    const osp_repository_source *repository_source;
    /* Several repositories instead (Triton's repeated --model-repository;
     * n_model_repositories 0: the two fields above): repository i is
     * repository_sources[i] when that array and entry are not NULL, else
     * the local folder model_repositories[i]. A model must be in one of
     * them only, else it does not load (as Triton). Borrowed: the paths
     * during osp_server_new, the sources for the server's lifetime. */
    const char *const *model_repositories;
    const osp_repository_source *const *repository_sources;
    size_t n_model_repositories;
    /* The backends models may name (`backend:` in config.pbtxt), looked up
     * by name. Borrowed for the server's lifetime (static tables). */
    const struct osp_backend *const *backends;
    size_t n_backends;
    osp_model_control_mode control_mode;
    const char *const *load_models; /* explicit mode: names, or "*" */
    size_t n_load_models;
    bool strict_gpu; /* KIND_GPU without a GPU fails */
    /* Live sequences per version of a sequence_batching model
     * (--max-sequences; default 4096): a new sequence beyond them is
     * refused with UNAVAILABLE. */
    size_t max_sequences;
    /* Triton's auto-complete (default true; --disable-auto-complete-config,
     * --strict-model-config=true turn it off): a model folder may have no
     * config.pbtxt, a load request's partial config (no backend, no
     * platform) is completed from the model's config.pbtxt, and backends
     * complete configs without inputs or outputs (osp_backend.auto_complete).
     * Off, config.pbtxt is required. */
    bool auto_complete_config;
    /* Where a load request's `file:` contents are written, each load in a
     * private folder of its own (never into a repository, a bucket above
     * all); NULL: $TMPDIR or /tmp. Borrowed during osp_server_new. */
    const char *load_override_dir;
    /* Poll mode: seconds between repository scans (new, changed and
     * removed model folders are loaded, reloaded and unloaded). */
    int repository_poll_secs;
    /* Threads that load the models of a repository scan (start-up, "*",
     * each poll) at once (--model-load-thread-count; default 4, as
     * Triton's). 0 or 1: one at a time. Each model's states and log lines
     * are the same whatever the count. */
    int model_load_threads;
    /* Settings a model's backend sees in its config's backend_config
     * (osp_model_config_backend_setting): those naming its backend and the
     * global ones; a later one of the same backend and key wins, and a
     * backend's own wins over a global one. As Triton, every backend also
     * gets default-max-batch-size=4 unless it is set. Copied by
     * osp_server_new. */
    const osp_backend_setting *backend_settings;
    size_t n_backend_settings;
    osp_device_options devices; /* device providers included */
    /* Bytes of the response cache (Triton's --cache-config=local,size=N);
     * 0: no local cache. Models opt in with response_cache { enable: true }. */
    size_t response_cache_bytes;
    /* The response cache in a Redis server instead (Triton's
     * --cache-config=redis,...), shared by every replica that names the
     * same Redis; NULL: none. Not together with response_cache_bytes.
     * Borrowed during osp_server_new (copied). */
    const struct osp_redis_cache_options *redis_cache;
} osp_server_options;

void osp_server_options_init(osp_server_options *opts);

/* Initialises devices, scans the repository and loads models per the
 * control mode. A model that fails to load is UNAVAILABLE with a reason;
 * it does not fail the server. Errors only for a missing or unreadable
 * repository. Caller owns *out. */
osp_error *osp_server_new(const osp_server_options *opts, osp_server **out);
/* Stops accepting work, finishes or fails everything queued (callbacks all
 * run), unloads every model and frees. */
void osp_server_free(osp_server *server);

/* Marks the server as exiting: not ready, new inferences refused. */
void osp_server_begin_shutdown(osp_server *server);
bool osp_server_is_live(const osp_server *server);
/* Live, not shutting down, and every model that was asked for is READY. */
bool osp_server_is_ready(const osp_server *server);

/* ---- models ------------------------------------------------------------- */

/* A ready model version with a reference held (version -1 = latest ready).
 * Errors follow Triton: NOT_FOUND "Request for unknown model: '<m>' is not
 * found" / "... version <v> is not found" / "... has no available versions",
 * UNAVAILABLE "... version <v> is not at ready state". Release with
 * osp_model_unref. */
osp_error *osp_server_model_get(osp_server *server, const char *name,
                                int64_t version, osp_model **out);
void osp_model_unref(osp_model *model);

/* Borrowed, valid while the reference is held. Its instance groups are
 * the placed ones: kind resolved (KIND_AUTO, and KIND_GPU without a GPU,
 * become what was used), count, gpus and a name filled in. */
const osp_model_config *osp_model_get_config(const osp_model *model);
int64_t osp_model_get_version(const osp_model *model);
/* Ready versions of the model this version belongs to, ascending. Caller
 * frees *versions with free(). */
osp_error *osp_model_ready_versions(osp_server *server, const char *name,
                                    int64_t **versions, size_t *n);
/* Where the instances live: writes a short description such as
 * "2 x CPU" or "1 x GPU 0 (NVIDIA H100)" into buf. */
void osp_model_describe_placement(const osp_model *model, char *buf,
                                  size_t cap);

typedef struct osp_repository_entry {
    char *name;
    int64_t version; /* -1 when the model has never been loaded */
    osp_model_state state;
    char *reason; /* "" when none */
    /* UNAVAILABLE because it was unloaded (reason "unloaded"), not because
     * it failed: TF Serving shows END with an OK status then. */
    bool unloaded;
} osp_repository_entry;

/* Every model in the repository (name order, versions ascending), or only
 * READY ones. Caller frees with osp_repository_index_free. */
osp_error *osp_server_repository_index(osp_server *server, bool ready_only,
                                       osp_repository_entry **entries,
                                       size_t *n);
void osp_repository_index_free(osp_repository_entry *entries, size_t n);

/* Explicit mode only (else UNAVAILABLE "explicit model load / unload is not
 * allowed if polling is enabled"). Load re-reads config.pbtxt and reloads
 * the model; load failures are returned (and the model left UNAVAILABLE
 * with the reason). Both block until done. */
osp_error *osp_server_load_model(osp_server *server, const char *name);

/* One file of a load override: `path` relative to the model's folder
 * ("1/model.safetensors"), `data` borrowed. */
typedef struct osp_model_file {
    const char *path;
    const void *data;
    size_t size;
} osp_model_file;

/* What a load request supplies instead of the repository's copy (Triton's
 * load parameters "config" and "file:<path>"): a config in protobuf text
 * (NULL: the folder's config.pbtxt) and files, which need a config and
 * stand in for the whole model folder. Backends read their files while
 * loading, so the files live in a temporary folder only that long. */
typedef struct osp_load_override {
    const char *config_pbtxt;
    const osp_model_file *files;
    size_t n_files;
} osp_load_override;

/* osp_server_load_model with an override (NULL: none). An override that
 * cannot be used (unreadable config, bad file path) fails with
 * osp_load_override_error. */
osp_error *osp_server_load_model_override(osp_server *server, const char *name,
                                          const osp_load_override *override);

/* Triton's answer to an unusable override of model `name`: INTERNAL
 * "failed to load '<name>', failed to poll from model repository". The
 * reason (freed here) is logged, not returned. Also for frontends that
 * reject an override before it reaches the server. */
osp_error *osp_load_override_error(const char *name, osp_error *reason);
osp_error *osp_server_unload_model(osp_server *server, const char *name);

/* ---- inference -------------------------------------------------------------
 */

/* Host memory for an input tensor's bytes, from the pinned pool of the
 * device the models run on when there is one. Caller owns *out (it usually
 * moves into a request). Size limits are the frontend's job. */
osp_error *osp_server_alloc_input_buffer(osp_server *server, size_t size,
                                         osp_buffer **out);

/* Called once per request, on a server thread, with the response
 * (ownership moves to the callee). Must not block for long. */
typedef void (*osp_infer_complete_fn)(osp_infer_response *response, void *user);

/* Validates and queues `req`; ownership of req always moves to the server.
 * Returns an error (and never calls `complete`) when the request is
 * rejected before queuing: unknown model, bad inputs (Triton's messages,
 * prefixed "[request id: <id>] "), full queue (UNAVAILABLE "Exceeds maximum
 * queue size"), shutting down. Otherwise `complete` is called exactly once,
 * possibly before this returns. */
osp_error *osp_server_infer_async(osp_server *server, osp_infer_request *req,
                                  osp_infer_complete_fn complete, void *user);

/* ---- decoupled (streaming) inference --------------------------------------
 * A model with model_transaction_policy { decoupled: true } answers a
 * request with 0..n responses and then a final flag (Triton's
 * TRITONSERVER_RESPONSE_COMPLETE_FINAL), possibly on an empty response.
 * osp_server_infer_async refuses such models; streaming frontends use
 * osp_server_infer_stream_async, which serves every model. */

/* A client's "I am gone" flag, shared by a frontend and the requests it
 * sent (reference counted, thread-safe). */
typedef struct osp_cancel_token osp_cancel_token;

/* A new token holding one reference (the caller's); NULL on OOM. */
osp_cancel_token *osp_cancel_token_new(void);
osp_cancel_token *osp_cancel_token_ref(osp_cancel_token *token);
void osp_cancel_token_unref(osp_cancel_token *token);
/* Marks the client gone: models see it (a python model's is_cancelled())
 * and the core drops every later non-final response of the requests that
 * hold the token. */
void osp_cancel_token_cancel(osp_cancel_token *token);
bool osp_cancel_token_is_cancelled(const osp_cancel_token *token);

/* osp_server_infer_async for a client that may go away first (gRPC
 * ModelInfer): `cancel` (borrowed, may be NULL) is held by the request
 * until it is answered; once it is cancelled the model sees it (a python
 * model's is_cancelled()) and a request still queued is answered
 * CANCELLED without running. */
osp_error *osp_server_infer_async_cancellable(osp_server *server,
                                              osp_infer_request *req,
                                              osp_cancel_token *cancel,
                                              osp_infer_complete_fn complete,
                                              void *user);

/* Called for each response of a request, on a server thread, in the order
 * they were sent: 0..n times with final false (response non-NULL, ownership
 * moves), then exactly once with final true, where response is the last
 * one, or NULL when the model sent only the flag (Triton's empty final
 * response) or the token was cancelled. After the final call the core never
 * touches `user` again, whatever the client did: that is where a frontend
 * frees what the request needed. Must not block for long. */
typedef void (*osp_infer_response_fn)(osp_infer_response *response,
                                      bool final, void *user);

/* osp_server_infer_async for any model, decoupled or not: a model that is
 * not decoupled answers once, with final true. `cancel` (borrowed, may be
 * NULL): the request keeps a reference until its final response. Returns
 * an error (and never calls `respond`) as osp_server_infer_async does. */
osp_error *osp_server_infer_stream_async(osp_server *server,
                                         osp_infer_request *req,
                                         osp_cancel_token *cancel,
                                         osp_infer_response_fn respond,
                                         void *user);

#ifdef __cplusplus
}
#endif
