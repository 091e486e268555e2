/*
 * What the gRPC frontend's files share (grpc_server.c implements it): the
 * server object, one call and its lifetime, completion-queue tags, and
 * the reply helpers. Every operation batch is started with
 * kgrpc_call_start_batch, which holds a reference on the call until the
 * batch's tag has run on a completion-queue thread; a call is freed when
 * its last reference goes.
 */
#pragma once

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <protobuf-c/protobuf-c.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "grpc_convert.h"
#include "grpc_server.h"
#include "grpc_wire.h"
#include "kserve_restrict.h"

typedef struct kgrpc_call kgrpc_call;

/* A completion-queue tag: `done` runs on a queue thread when the batch
 * completes (ok false: it failed, e.g. the call was cancelled). `call`
 * NULL for the tags of pending call requests. */
typedef struct kgrpc_tag {
    void (*done)(struct kgrpc_tag *tag, bool ok);
    kgrpc_call *call;
} kgrpc_tag;

/* One RPC of the method table. */
typedef struct kgrpc_method {
    const char *path; /* "/inference.GRPCInferenceService/ModelInfer" */
    kserve_api api;   /* its restricted-API group */
    bool streaming;   /* no initial message: the handler reads */
    /* Starts handling a call whose restriction passed. Must eventually
     * finish the call (kgrpc_call_finish or a reply helper). */
    void (*start)(kgrpc_call *call);
    /* Asks for RECV_CLOSE_ON_SERVER as the call starts, so that the
     * handler hears at once when the client cancels (on_cancelled):
     * streams, and ModelInfer, whose request may wait in a queue. */
    bool watches_close;
} kgrpc_method;

struct kgrpc_call {
    kgrpc_server *server;
    const kgrpc_method *method;
    grpc_call *call;
    grpc_metadata_array metadata;
    grpc_byte_buffer *payload; /* unary methods: the request (owned) */
    atomic_int refs;
    atomic_bool cancelled; /* the client went away (RECV_CLOSE_ON_SERVER) */
    int close_cancelled;   /* written by gRPC */
    /* Methods that watch the close ask for RECV_CLOSE_ON_SERVER as they
     * start (close_tag); other unary calls in their final batch, which
     * saves a completion-queue event per call. */
    bool close_started;
    kgrpc_tag close_tag;
    kgrpc_tag finish_tag;
    grpc_slice status_details;
    grpc_byte_buffer *finish_message; /* sent by the final batch */
    bool initial_metadata_sent;
    uint64_t armed_ns;   /* when the server asked for a call (Triton's
                            GRPC_WAITREAD_START) */
    uint64_t matched_ns; /* when it arrived with its request */
    /* (optional) the handler's state, freed with the call */
    void *handler;
    void (*handler_free)(void *handler);
    /* (optional) runs once the final batch completes (before free) */
    void (*on_finished)(kgrpc_call *call, bool ok);
    /* (optional) streams: the server stops accepting calls */
    void (*on_quiesce)(kgrpc_call *call);
    /* (optional) watching methods: the client cancelled the call or went away
     * (RECV_CLOSE_ON_SERVER). Set and read under server->mu; a handler
     * that sets it late checks `cancelled` itself. */
    void (*on_cancelled)(kgrpc_call *call);
    kgrpc_call *prev, *next; /* the server's active calls */
};

/* The server object (opaque to main.c). */
struct kgrpc_server {
    kgrpc_options opts; /* borrowed pointers as documented there */
    grpc_server *server;
    grpc_completion_queue *cq;
    int port;
    pthread_t *threads;
    int n_threads;
    pthread_mutex_t mu;
    pthread_cond_t idle; /* signalled when active_calls drops to 0 */
    size_t active_calls;
    kgrpc_call *calls; /* active list */
    bool accepting;
    bool shutdown_started;
    kgrpc_tag shutdown_tag;
    bool shutdown_done;
    void **registered; /* per method: grpc_server_register_method handle */
    struct kgrpc_slot *slots;
    size_t n_slots;
    /* grpc_infer.c's pool of idle inference contexts */
    void *infer_pool;
    size_t infer_pool_len;
};

/* ---- method handlers (grpc_admin.c, grpc_settings.c, grpc_shm.c,
 *      grpc_infer.c, grpc_stream.c) ---- */

void kgrpc_server_live(kgrpc_call *call);
void kgrpc_server_ready(kgrpc_call *call);
void kgrpc_model_ready(kgrpc_call *call);
void kgrpc_server_metadata(kgrpc_call *call);
void kgrpc_model_metadata(kgrpc_call *call);
void kgrpc_model_config(kgrpc_call *call);
void kgrpc_model_statistics(kgrpc_call *call);
void kgrpc_repository_index(kgrpc_call *call);
void kgrpc_repository_load(kgrpc_call *call);
void kgrpc_repository_unload(kgrpc_call *call);
void kgrpc_health_check(kgrpc_call *call);
void kgrpc_trace_setting(kgrpc_call *call);
void kgrpc_log_settings(kgrpc_call *call);
void kgrpc_system_shm_status(kgrpc_call *call);
void kgrpc_system_shm_register(kgrpc_call *call);
void kgrpc_system_shm_unregister(kgrpc_call *call);
void kgrpc_cuda_shm_status(kgrpc_call *call);
void kgrpc_cuda_shm_register(kgrpc_call *call);
void kgrpc_cuda_shm_unregister(kgrpc_call *call);
void kgrpc_model_infer(kgrpc_call *call);
void kgrpc_model_stream_infer(kgrpc_call *call);
/* Frees grpc_infer.c's pooled contexts (at server free). */
void kgrpc_infer_pool_free(kgrpc_server *s);

/* ---- calls ---- */

void kgrpc_call_ref(kgrpc_call *call);
void kgrpc_call_unref(kgrpc_call *call);

/* Starts `ops` with `tag` (tag->call is set to call and a reference is
 * held until tag->done has run). Returns false (and drops the reference)
 * when gRPC refuses the batch. */
bool kgrpc_call_start_batch(kgrpc_call *call, const grpc_op *ops, size_t n,
                            kgrpc_tag *tag);

/* Ends the call: initial metadata (if not sent yet; with the inference
 * compression level when `compress`), then `message` (ownership moves; may
 * be NULL) and the status (`details` copied; NULL for ""). */
void kgrpc_call_finish(kgrpc_call *call, grpc_byte_buffer *message,
                       grpc_status_code code, const char *details,
                       bool compress);
/* Packs `msg` (borrowed) and finishes with OK. */
void kgrpc_call_reply(kgrpc_call *call, const ProtobufCMessage *msg);
/* Finishes with err's status and message (err borrowed). */
void kgrpc_call_reply_error(kgrpc_call *call, const osp_error *err);

/* Triton's gRPC status of an error code (GrpcStatusUtil::CodeToStatus). */
grpc_status_code kgrpc_status_of(osp_error_code code);

/* Unpacks the call's request (a unary method's payload) as `desc`, within
 * a memory budget. NULL after replying INTERNAL "Unable to parse request"
 * (or an error for an oversized decode). Free the result with
 * protobuf_c_message_free_unpacked(msg, NULL). */
ProtobufCMessage *kgrpc_call_unpack(kgrpc_call *call,
                                    const ProtobufCMessageDescriptor *desc);

/* A received message viewed as segments without copying it. */
typedef struct kgrpc_received {
    grpc_byte_buffer_reader reader;
    bool reader_ok;
    kgrpc_segment *segments;
    kgrpc_message message;
} kgrpc_received;

/* Views `bb` (borrowed; must outlive r). False on OOM or a buffer gRPC
 * cannot read. Release with kgrpc_received_destroy in every case. */
bool kgrpc_received_init(kgrpc_received *r, grpc_byte_buffer *bb);
void kgrpc_received_destroy(kgrpc_received *r);

/* A byte buffer over the parts of an encoded message: buffer parts are
 * sent without a copy (their ownership moves into the slices), heap parts
 * are copied. NULL on OOM (e keeps what was not moved). */
grpc_byte_buffer *kgrpc_byte_buffer_from_parts(kgrpc_encoded *e);
/* A byte buffer holding a copy of data[0..len). */
grpc_byte_buffer *kgrpc_byte_buffer_copy(const void *data, size_t len);

/* Fills op as the call's initial metadata, carrying the inference
 * response compression level when `compress`. */
void kgrpc__initial_metadata_op(const kgrpc_call *call, grpc_op *op,
                                bool compress);

/* The value of metadata `key` (lower case) of the call, or NULL; *len set.
 * Borrowed for the call's lifetime. */
const char *kgrpc_call_metadata(const kgrpc_call *call, const char *key,
                                size_t *len);
/* Adds the call's metadata that --grpc-header-forward-pattern matches to
 * req as string parameters, as Triton's ModelInfer and ModelStreamInfer
 * do. */
osp_error *kgrpc_call_forward_metadata(const kgrpc_call *call,
                                       osp_infer_request *req);
