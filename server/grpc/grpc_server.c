/*
 * The gRPC transport (see grpc_server.h): one gRPC core server with one
 * completion queue served by --grpc-infer-thread-count threads. Every
 * method of the table is registered; each keeps one call request armed
 * (re-armed as soon as a call arrives), and one generic request catches
 * methods nobody registered, which get UNIMPLEMENTED. A call's unary
 * request arrives with it (GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER), so
 * a handler starts with its message in hand; streams read their own.
 *
 * No thread ever waits for a model: inference hands the request to the
 * core and returns to the queue; the core's completion callback starts the
 * reply batch from whatever thread it runs on (gRPC batches may be started
 * from any thread).
 *
 * Shutdown: stop accepting (grpc_server_shutdown_and_notify; streams are
 * told to end once their requests are answered), drain with a deadline,
 * then cancel what is left.
 */
#include "grpc_server.h"

#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cond_deadline.h"
#include "grpc_internal.h"
#include "grpc_tsan.h"
#include "osprey/clock.h"
#include "osprey/log.h"

#define INFERENCE_SERVICE "/inference.GRPCInferenceService/"

/* The RPCs and their restricted-API groups (Triton's RestrictedCategory
 * of each handler). */
static const kgrpc_method methods[] = {
    {INFERENCE_SERVICE "ServerLive", KSERVE_API_HEALTH, false,
     kgrpc_server_live, false},
    {INFERENCE_SERVICE "ServerReady", KSERVE_API_HEALTH, false,
     kgrpc_server_ready, false},
    {INFERENCE_SERVICE "ModelReady", KSERVE_API_HEALTH, false,
     kgrpc_model_ready, false},
    {INFERENCE_SERVICE "ServerMetadata", KSERVE_API_METADATA, false,
     kgrpc_server_metadata, false},
    {INFERENCE_SERVICE "ModelMetadata", KSERVE_API_METADATA, false,
     kgrpc_model_metadata, false},
    {INFERENCE_SERVICE "ModelInfer", KSERVE_API_INFERENCE, false,
     kgrpc_model_infer, true},
    {INFERENCE_SERVICE "ModelStreamInfer", KSERVE_API_INFERENCE, true,
     kgrpc_model_stream_infer, true},
    {INFERENCE_SERVICE "ModelConfig", KSERVE_API_MODEL_CONFIG, false,
     kgrpc_model_config, false},
    {INFERENCE_SERVICE "ModelStatistics", KSERVE_API_STATISTICS, false,
     kgrpc_model_statistics, false},
    {INFERENCE_SERVICE "RepositoryIndex", KSERVE_API_MODEL_REPOSITORY, false,
     kgrpc_repository_index, false},
    {INFERENCE_SERVICE "RepositoryModelLoad", KSERVE_API_MODEL_REPOSITORY,
     false, kgrpc_repository_load, false},
    {INFERENCE_SERVICE "RepositoryModelUnload", KSERVE_API_MODEL_REPOSITORY,
     false, kgrpc_repository_unload, false},
    {INFERENCE_SERVICE "SystemSharedMemoryStatus", KSERVE_API_SHARED_MEMORY,
     false, kgrpc_system_shm_status, false},
    {INFERENCE_SERVICE "SystemSharedMemoryRegister", KSERVE_API_SHARED_MEMORY,
     false, kgrpc_system_shm_register, false},
    {INFERENCE_SERVICE "SystemSharedMemoryUnregister", KSERVE_API_SHARED_MEMORY,
     false, kgrpc_system_shm_unregister, false},
    {INFERENCE_SERVICE "CudaSharedMemoryStatus", KSERVE_API_SHARED_MEMORY,
     false, kgrpc_cuda_shm_status, false},
    {INFERENCE_SERVICE "CudaSharedMemoryRegister", KSERVE_API_SHARED_MEMORY,
     false, kgrpc_cuda_shm_register, false},
    {INFERENCE_SERVICE "CudaSharedMemoryUnregister", KSERVE_API_SHARED_MEMORY,
     false, kgrpc_cuda_shm_unregister, false},
    {INFERENCE_SERVICE "TraceSetting", KSERVE_API_TRACE, false,
     kgrpc_trace_setting, false},
    {INFERENCE_SERVICE "LogSettings", KSERVE_API_LOGGING, false,
     kgrpc_log_settings, false},
    {"/grpc.health.v1.Health/Check", KSERVE_API_HEALTH, false,
     kgrpc_health_check, false},
};

#define N_METHODS (sizeof methods / sizeof methods[0])
/* The slot of unregistered methods comes after the methods' slots. */
#define GENERIC_SLOT N_METHODS

/* One armed call request. */
typedef struct kgrpc_slot {
    kgrpc_tag tag; /* first: the queue hands back &tag */
    kgrpc_server *server;
    size_t index; /* into methods, or GENERIC_SLOT */
    grpc_call *call;
    gpr_timespec deadline;
    grpc_metadata_array metadata;
    grpc_byte_buffer *payload;
    grpc_call_details details; /* GENERIC_SLOT */
    uint64_t armed_ns;
    bool armed;
} kgrpc_slot;

/* ---- statuses ---- */

grpc_status_code kgrpc_status_of(osp_error_code code) {
    switch (code) {
    case OSP_ERROR_INTERNAL:
        return GRPC_STATUS_INTERNAL;
    case OSP_ERROR_NOT_FOUND:
        return GRPC_STATUS_NOT_FOUND;
    case OSP_ERROR_INVALID_ARG:
        return GRPC_STATUS_INVALID_ARGUMENT;
    case OSP_ERROR_UNAVAILABLE:
        return GRPC_STATUS_UNAVAILABLE;
    case OSP_ERROR_UNSUPPORTED:
        return GRPC_STATUS_UNIMPLEMENTED;
    case OSP_ERROR_ALREADY_EXISTS:
        return GRPC_STATUS_ALREADY_EXISTS;
    case OSP_ERROR_CANCELLED:
        return GRPC_STATUS_CANCELLED;
    default:
        return GRPC_STATUS_UNKNOWN;
    }
}

/* ---- byte buffers ---- */

static void buffer_slice_free(void *buffer) {
    KGRPC_RECEIVED(buffer);
    osp_buffer_free(buffer);
}

grpc_byte_buffer *kgrpc_byte_buffer_from_parts(kgrpc_encoded *e) {
    grpc_slice *slices = calloc(e->n_parts ? e->n_parts : 1, sizeof *slices);
    if (!slices)
        return NULL;
    size_t n = 0;
    for (size_t i = 0; i < e->n_parts; i++) {
        kgrpc_part *p = &e->parts[i];
        if (p->len == 0)
            continue;
        if (p->buffer) {
            /* Sent straight from the output buffer; the slice frees it. */
            KGRPC_HANDOFF(p->buffer);
            slices[n++] = grpc_slice_new_with_user_data(
                (void *)p->base, p->len, buffer_slice_free, p->buffer);
            p->buffer = NULL;
        } else {
            slices[n++] = grpc_slice_from_copied_buffer(p->base, p->len);
        }
    }
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(slices, n);
    for (size_t i = 0; i < n; i++)
        grpc_slice_unref(slices[i]); /* the buffer holds its own refs */
    free(slices);
    return bb;
}

grpc_byte_buffer *kgrpc_byte_buffer_copy(const void *data, size_t len) {
    grpc_slice slice = grpc_slice_from_copied_buffer(data, len);
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&slice, 1);
    grpc_slice_unref(slice);
    return bb;
}

bool kgrpc_received_init(kgrpc_received *r, grpc_byte_buffer *bb) {
    memset(r, 0, sizeof *r);
    if (!bb || !grpc_byte_buffer_reader_init(&r->reader, bb))
        return false;
    r->reader_ok = true;
    size_t cap = 0, n = 0, total = 0;
    grpc_slice *slice;
    while (grpc_byte_buffer_reader_peek(&r->reader, &slice)) {
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            kgrpc_segment *grown = realloc(r->segments, cap * sizeof *grown);
            if (!grown)
                return false;
            r->segments = grown;
        }
        r->segments[n].data = GRPC_SLICE_START_PTR(*slice);
        r->segments[n].len = GRPC_SLICE_LENGTH(*slice);
        total += r->segments[n].len;
        n++;
    }
    r->message = (kgrpc_message){r->segments, n, total};
    return true;
}

void kgrpc_received_destroy(kgrpc_received *r) {
    if (r->reader_ok)
        grpc_byte_buffer_reader_destroy(&r->reader);
    free(r->segments);
    memset(r, 0, sizeof *r);
}

/* ---- calls ---- */

void kgrpc_call_ref(kgrpc_call *call) {
    atomic_fetch_add(&call->refs, 1);
}

/* A reference to a call met in the server's list, unless its last one is
 * already gone (call_free is about to unlink it). Under the server lock. */
static bool call_ref_if_live(kgrpc_call *call) {
    int refs = atomic_load(&call->refs);
    while (refs != 0)
        if (atomic_compare_exchange_weak(&call->refs, &refs, refs + 1))
            return true;
    return false;
}

/* Leaves the server's list first, so that a walk of the list under the
 * server lock never meets a call whose handler is being freed; counts as
 * inactive only once everything is freed. */
static void call_free(kgrpc_call *call) {
    kgrpc_server *s = call->server;
    pthread_mutex_lock(&s->mu);
    if (call->prev)
        call->prev->next = call->next;
    else
        s->calls = call->next;
    if (call->next)
        call->next->prev = call->prev;
    pthread_mutex_unlock(&s->mu);
    if (call->handler_free)
        call->handler_free(call->handler);
    if (call->payload)
        grpc_byte_buffer_destroy(call->payload);
    if (call->finish_message) /* its batch was refused */
        grpc_byte_buffer_destroy(call->finish_message);
    grpc_metadata_array_destroy(&call->metadata);
    grpc_slice_unref(call->status_details);
    grpc_call_unref(call->call);
    pthread_mutex_lock(&s->mu);
    if (--s->active_calls == 0)
        pthread_cond_broadcast(&s->idle);
    pthread_mutex_unlock(&s->mu);
    free(call);
}

void kgrpc_call_unref(kgrpc_call *call) {
    if (atomic_fetch_sub(&call->refs, 1) == 1)
        call_free(call);
}

bool kgrpc_call_start_batch(kgrpc_call *call, const grpc_op *ops, size_t n,
                            kgrpc_tag *tag) {
    tag->call = call;
    kgrpc_call_ref(call);
    KGRPC_HANDOFF(tag);
    grpc_call_error rc = grpc_call_start_batch(call->call, ops, n, tag, NULL);
    if (rc != GRPC_CALL_OK) {
        OSP_LOG_ERROR("gRPC refused an operation batch (%d) on %s", (int)rc,
                      call->method ? call->method->path : "a call");
        kgrpc_call_unref(call);
        return false;
    }
    return true;
}

/* The final batch is done: its message can go, and the handler hears. */
static void finish_done(kgrpc_tag *tag, bool ok) {
    kgrpc_call *call = tag->call;
    if (ok && call->close_cancelled)
        atomic_store(&call->cancelled, true);
    if (call->finish_message) {
        grpc_byte_buffer_destroy(call->finish_message);
        call->finish_message = NULL;
    }
    if (call->on_finished)
        call->on_finished(call, ok);
}

static grpc_compression_level compression_level(kgrpc_compression c) {
    switch (c) {
    case KGRPC_COMPRESSION_LOW:
        return GRPC_COMPRESS_LEVEL_LOW;
    case KGRPC_COMPRESSION_MEDIUM:
        return GRPC_COMPRESS_LEVEL_MED;
    case KGRPC_COMPRESSION_HIGH:
        return GRPC_COMPRESS_LEVEL_HIGH;
    default:
        return GRPC_COMPRESS_LEVEL_NONE;
    }
}

/* Fills op as the call's initial metadata, with the inference response
 * compression level when `compress`. */
static void initial_metadata_op(const kgrpc_call *call, grpc_op *op,
                                bool compress) {
    memset(op, 0, sizeof *op);
    op->op = GRPC_OP_SEND_INITIAL_METADATA;
    grpc_compression_level level =
        compression_level(call->server->opts.infer_compression);
    if (compress && level != GRPC_COMPRESS_LEVEL_NONE) {
        op->data.send_initial_metadata.maybe_compression_level.is_set = 1;
        op->data.send_initial_metadata.maybe_compression_level.level = level;
    }
}

void kgrpc__initial_metadata_op(const kgrpc_call *call, grpc_op *op,
                                bool compress) {
    initial_metadata_op(call, op, compress);
}

void kgrpc_call_finish(kgrpc_call *call, grpc_byte_buffer *message,
                       grpc_status_code code, const char *details,
                       bool compress) {
    grpc_op ops[4];
    size_t n = 0;
    if (!call->initial_metadata_sent) {
        initial_metadata_op(call, &ops[n++], compress);
        call->initial_metadata_sent = true;
    }
    if (message) {
        memset(&ops[n], 0, sizeof ops[n]);
        ops[n].op = GRPC_OP_SEND_MESSAGE;
        ops[n].data.send_message.send_message = message;
        n++;
    }
    grpc_slice_unref(call->status_details);
    call->status_details =
        grpc_slice_from_copied_string(details ? details : "");
    memset(&ops[n], 0, sizeof ops[n]);
    ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[n].data.send_status_from_server.status = code;
    ops[n].data.send_status_from_server.status_details = &call->status_details;
    n++;
    if (!call->close_started) {
        memset(&ops[n], 0, sizeof ops[n]);
        ops[n].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
        ops[n].data.recv_close_on_server.cancelled = &call->close_cancelled;
        call->close_started = true;
        n++;
    }
    call->finish_tag.done = finish_done;
    /* The message must outlive the batch (grpc_op_send_message). */
    call->finish_message = message;
    kgrpc_call_start_batch(call, ops, n, &call->finish_tag);
}

void kgrpc_call_reply(kgrpc_call *call, const ProtobufCMessage *msg) {
    size_t len = protobuf_c_message_get_packed_size(msg);
    uint8_t *data = malloc(len ? len : 1);
    if (!data) {
        osp_error *err = osp_error_out_of_memory();
        kgrpc_call_reply_error(call, err);
        osp_error_free(err);
        return;
    }
    protobuf_c_message_pack(msg, data);
    grpc_byte_buffer *bb = kgrpc_byte_buffer_copy(data, len);
    free(data);
    kgrpc_call_finish(call, bb, GRPC_STATUS_OK, NULL, false);
}

void kgrpc_call_reply_error(kgrpc_call *call, const osp_error *err) {
    kgrpc_call_finish(call, NULL, kgrpc_status_of(osp_error_get_code(err)),
                      osp_error_message(err), false);
}

ProtobufCMessage *kgrpc_call_unpack(kgrpc_call *call,
                                    const ProtobufCMessageDescriptor *desc) {
    grpc_byte_buffer_reader reader;
    ProtobufCMessage *msg = NULL;
    bool too_large = false;
    if (call->payload && grpc_byte_buffer_reader_init(&reader, call->payload)) {
        grpc_slice flat = grpc_byte_buffer_reader_readall(&reader);
        grpc_byte_buffer_reader_destroy(&reader);
        msg = kgrpc_unpack_bounded(desc, GRPC_SLICE_START_PTR(flat),
                                   GRPC_SLICE_LENGTH(flat), &too_large);
        grpc_slice_unref(flat);
    }
    if (!msg)
        kgrpc_call_finish(call, NULL,
                          too_large ? GRPC_STATUS_RESOURCE_EXHAUSTED
                                    : GRPC_STATUS_INTERNAL,
                          too_large ? "request message too large once decoded"
                                    : KGRPC_PARSE_ERROR,
                          false);
    return msg;
}

const char *kgrpc_call_metadata(const kgrpc_call *call, const char *key,
                                size_t *len) {
    for (size_t i = 0; i < call->metadata.count; i++) {
        const grpc_metadata *m = &call->metadata.metadata[i];
        if (grpc_slice_str_cmp(m->key, key) == 0) {
            *len = GRPC_SLICE_LENGTH(m->value);
            return (const char *)GRPC_SLICE_START_PTR(m->value);
        }
    }
    return NULL;
}

osp_error *kgrpc_call_forward_metadata(const kgrpc_call *call,
                                       osp_infer_request *req) {
    const kserve_header_forward *forward = call->server->opts.forward_headers;
    osp_error *err = NULL;
    for (size_t i = 0; forward && !err && i < call->metadata.count; i++) {
        const grpc_metadata *m = &call->metadata.metadata[i];
        err = kserve_header_forward_apply(
            forward, req, (const char *)GRPC_SLICE_START_PTR(m->key),
            GRPC_SLICE_LENGTH(m->key),
            (const char *)GRPC_SLICE_START_PTR(m->value),
            GRPC_SLICE_LENGTH(m->value));
    }
    return err;
}

/* ---- accepting calls ---- */

static void slot_done(kgrpc_tag *tag, bool ok);

/* Asks gRPC for the next call of the slot's method. */
static void slot_arm(kgrpc_slot *slot) {
    kgrpc_server *s = slot->server;
    grpc_metadata_array_init(&slot->metadata);
    slot->call = NULL;
    slot->payload = NULL;
    slot->armed_ns = osp_now_ns();
    slot->tag.done = slot_done;
    slot->tag.call = NULL;
    grpc_call_error rc;
    KGRPC_HANDOFF(&slot->tag);
    if (slot->index == GENERIC_SLOT) {
        grpc_call_details_init(&slot->details);
        rc =
            grpc_server_request_call(s->server, &slot->call, &slot->details,
                                     &slot->metadata, s->cq, s->cq, &slot->tag);
    } else {
        rc = grpc_server_request_registered_call(
            s->server, s->registered[slot->index], &slot->call, &slot->deadline,
            &slot->metadata,
            methods[slot->index].streaming ? NULL : &slot->payload, s->cq,
            s->cq, &slot->tag);
    }
    slot->armed = rc == GRPC_CALL_OK;
    if (!slot->armed) {
        OSP_LOG_ERROR("unable to request gRPC calls (%d)", (int)rc);
        grpc_metadata_array_destroy(&slot->metadata);
        if (slot->index == GENERIC_SLOT)
            grpc_call_details_destroy(&slot->details);
    }
}

static void close_done(kgrpc_tag *tag, bool ok) {
    kgrpc_call *call = tag->call;
    if (!ok || !call->close_cancelled)
        return;
    atomic_store(&call->cancelled, true);
    pthread_mutex_lock(&call->server->mu);
    void (*hook)(kgrpc_call *) = call->on_cancelled;
    pthread_mutex_unlock(&call->server->mu);
    if (hook)
        hook(call);
}

/* Whether the call carries the key its API group requires; when not it
 * is answered with Triton's UNAVAILABLE. */
static bool restriction_passes(kgrpc_call *call, kserve_api api) {
    const kserve_restriction *r = call->server->opts.restricted
                                      ? &call->server->opts.restricted[api]
                                      : NULL;
    if (!r || !r->header)
        return true;
    size_t len;
    const char *got = kgrpc_call_metadata(call, r->header, &len);
    if (got && len == strlen(r->value) && memcmp(got, r->value, len) == 0)
        return true;
    char message[600];
    snprintf(message, sizeof message,
             "This protocol is restricted, expecting header '%s'", r->header);
    kgrpc_call_finish(call, NULL, GRPC_STATUS_UNAVAILABLE, message, false);
    return false;
}

/* A call arrived on `slot`: takes it over, re-arms the slot and starts
 * the method. */
static void slot_done(kgrpc_tag *tag, bool ok) {
    kgrpc_slot *slot = (kgrpc_slot *)tag;
    kgrpc_server *s = slot->server;
    if (!ok) {
        /* the server is shutting down: no call came */
        slot->armed = false;
        grpc_metadata_array_destroy(&slot->metadata);
        if (slot->index == GENERIC_SLOT)
            grpc_call_details_destroy(&slot->details);
        return;
    }
    kgrpc_call *call = calloc(1, sizeof *call);
    if (!call) {
        /* Nothing can answer it: drop the call. */
        grpc_call_cancel_with_status(slot->call, GRPC_STATUS_UNAVAILABLE,
                                     "out of memory", NULL);
        grpc_call_unref(slot->call);
        if (slot->payload)
            grpc_byte_buffer_destroy(slot->payload);
        grpc_metadata_array_destroy(&slot->metadata);
        if (slot->index == GENERIC_SLOT)
            grpc_call_details_destroy(&slot->details);
        slot_arm(slot);
        return;
    }
    call->server = s;
    call->call = slot->call;
    call->metadata = slot->metadata; /* moves */
    call->payload = slot->payload;
    call->armed_ns = slot->armed_ns;
    call->matched_ns = osp_now_ns();
    call->status_details = grpc_empty_slice();
    atomic_init(&call->refs, 1);
    call->method = slot->index == GENERIC_SLOT ? NULL : &methods[slot->index];
    char *unknown_path = NULL;
    if (slot->index == GENERIC_SLOT) {
        unknown_path = grpc_slice_to_c_string(slot->details.method);
        grpc_call_details_destroy(&slot->details);
    }
    pthread_mutex_lock(&s->mu);
    s->active_calls++;
    call->next = s->calls;
    if (s->calls)
        s->calls->prev = call;
    s->calls = call;
    bool accepting = s->accepting;
    pthread_mutex_unlock(&s->mu);
    if (accepting)
        slot_arm(slot);
    else
        slot->armed = false;

    /* A watching method learns at once whether the client cancels or
     * goes away; another unary call asks in its final batch
     * (kgrpc_call_finish). */
    if (call->method && call->method->watches_close) {
        grpc_op close_op;
        memset(&close_op, 0, sizeof close_op);
        close_op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
        close_op.data.recv_close_on_server.cancelled = &call->close_cancelled;
        call->close_tag.done = close_done;
        call->close_started = true;
        kgrpc_call_start_batch(call, &close_op, 1, &call->close_tag);
    }

    if (!call->method) {
        char message[512];
        snprintf(message, sizeof message, "Method not found: %s",
                 unknown_path ? unknown_path : "");
        kgrpc_call_finish(call, NULL, GRPC_STATUS_UNIMPLEMENTED, message,
                          false);
    } else if (restriction_passes(call, call->method->api)) {
        if (!call->method->streaming && !call->payload)
            kgrpc_call_finish(call, NULL, GRPC_STATUS_INTERNAL,
                              KGRPC_PARSE_ERROR, false);
        else
            call->method->start(call);
    }
    gpr_free(unknown_path);
    kgrpc_call_unref(call); /* the arrival's reference */
}

/* ---- threads ---- */

static void shutdown_done(kgrpc_tag *tag, bool ok) {
    (void)tag;
    (void)ok;
}

static void *queue_thread(void *arg) {
    kgrpc_server *s = arg;
    for (;;) {
        grpc_event ev = grpc_completion_queue_next(
            s->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
        if (ev.type == GRPC_QUEUE_SHUTDOWN)
            break;
        if (ev.type != GRPC_OP_COMPLETE)
            continue;
        kgrpc_tag *tag = ev.tag;
        KGRPC_RECEIVED(tag);
        if (tag == &s->shutdown_tag) {
            pthread_mutex_lock(&s->mu);
            s->shutdown_done = true;
            pthread_cond_broadcast(&s->idle);
            pthread_mutex_unlock(&s->mu);
            continue;
        }
        kgrpc_call *call = tag->call;
        tag->done(tag, ev.success != 0);
        if (call)
            kgrpc_call_unref(call); /* the batch's reference */
    }
    return NULL;
}

/* ---- start and stop ---- */

/* Reads a whole PEM file named by flag `flag` into *out (NUL-terminated). */
static osp_error *read_pem(const char *flag, const char *path, char **out) {
    *out = NULL;
    if (!path || !path[0])
        return osp_error_new(OSP_ERROR_INVALID_ARG, "--grpc-use-ssl needs %s",
                             flag);
    FILE *f = fopen(path, "rb");
    if (!f)
        return osp_error_new(OSP_ERROR_INVALID_ARG, "unable to read %s '%s'",
                             flag, path);
    char *data = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (cap - len < 4096) {
            if (cap > (size_t)1 << 24) { /* certificates are small */
                free(data);
                fclose(f);
                return osp_error_new(OSP_ERROR_INVALID_ARG,
                                     "%s '%s' is larger than 16 MiB", flag,
                                     path);
            }
            char *grown = realloc(data, cap + 65536);
            if (!grown) {
                free(data);
                fclose(f);
                return osp_error_out_of_memory();
            }
            data = grown;
            cap += 65536;
        }
        size_t got = fread(data + len, 1, cap - len - 1, f);
        len += got;
        if (got == 0)
            break;
    }
    fclose(f);
    data[len] = '\0';
    *out = data;
    return NULL;
}

static osp_error *make_credentials(const kgrpc_options *o,
                                   grpc_server_credentials **out) {
    if (!o->use_ssl && !o->use_ssl_mutual) {
        *out = grpc_insecure_server_credentials_create();
        return NULL;
    }
    char *cert = NULL, *key = NULL, *root = NULL;
    osp_error *err;
    if ((err = read_pem("--grpc-server-cert", o->server_cert, &cert)) ||
        (err = read_pem("--grpc-server-key", o->server_key, &key)))
        goto out;
    if ((o->use_ssl_mutual || (o->root_cert && o->root_cert[0])) &&
        (err = read_pem("--grpc-root-cert", o->root_cert, &root)))
        goto out;
    grpc_ssl_pem_key_cert_pair pair = {key, cert};
    *out = grpc_ssl_server_credentials_create_ex(
        root, &pair, 1,
        o->use_ssl_mutual
            ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
            : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE,
        NULL);
    if (!*out)
        err = osp_error_new(OSP_ERROR_INVALID_ARG,
                            "unable to use the gRPC TLS certificates");
out:
    free(cert);
    free(key);
    free(root);
    return err;
}

static grpc_arg int_arg(const char *key, int value) {
    grpc_arg a;
    a.type = GRPC_ARG_INTEGER;
    a.key = (char *)key;
    a.value.integer = value;
    return a;
}

int kgrpc_server_port(const kgrpc_server *s) {
    return s->port;
}

static void destroy_unstarted(kgrpc_server *s) {
    if (s->server)
        grpc_server_destroy(s->server);
    if (s->cq) {
        grpc_completion_queue_shutdown(s->cq);
        while (grpc_completion_queue_next(
                   s->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL)
                   .type != GRPC_QUEUE_SHUTDOWN)
            ;
        grpc_completion_queue_destroy(s->cq);
    }
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->idle);
    free(s->registered);
    free(s->slots);
    free(s->threads);
    free(s);
    grpc_shutdown_blocking();
}

/* Completion-queue threads when the flag leaves it open. gRPC core hands
 * its polling role from thread to thread at every event, so on a host with
 * one or two CPUs a second thread only adds context switches (simple at
 * concurrency 16 on 2 CPUs: 57 -> 32 µs of server CPU per request, 0.61 ->
 * 0.89 of the HTTP port's rate); larger hosts keep Triton's 2 so that the
 * decoding of large requests is not serialised on one thread. */
static int default_thread_count(void) {
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    return cpus > 0 && cpus <= 2 ? 1 : 2;
}

osp_error *kgrpc_server_start(const kgrpc_options *opts, kgrpc_server **out) {
    kgrpc_server *s = calloc(1, sizeof *s);
    if (!s)
        return osp_error_out_of_memory();
    grpc_init();
    s->opts = *opts;
    s->opts.address = NULL; /* borrowed only during start */
    s->opts.server_cert = s->opts.server_key = s->opts.root_cert = NULL;
    pthread_mutex_init(&s->mu, NULL);
    /* Drain deadlines are CLOCK_MONOTONIC, like every Osprey clock. */
    cond_init_monotonic(&s->idle);
    s->accepting = true;
    s->n_slots = N_METHODS + 1;
    s->registered = calloc(N_METHODS, sizeof *s->registered);
    s->slots = calloc(s->n_slots, sizeof *s->slots);
    s->n_threads = opts->infer_thread_count > 0 ? opts->infer_thread_count
                                                : default_thread_count();
    s->threads = calloc((size_t)s->n_threads, sizeof *s->threads);
    if (!s->registered || !s->slots || !s->threads) {
        destroy_unstarted(s);
        return osp_error_out_of_memory();
    }

    const kgrpc_keepalive *ka = &opts->keepalive;
    grpc_arg args[12];
    size_t n_args = 0;
    args[n_args++] =
        int_arg(GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, opts->max_message_size);
    args[n_args++] =
        int_arg(GRPC_ARG_MAX_SEND_MESSAGE_LENGTH, opts->max_message_size);
    args[n_args++] = int_arg(GRPC_ARG_ALLOW_REUSEPORT, opts->reuse_port);
    args[n_args++] = int_arg(GRPC_ARG_KEEPALIVE_TIME_MS, ka->time_ms);
    args[n_args++] = int_arg(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, ka->timeout_ms);
    args[n_args++] = int_arg(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS,
                             ka->permit_without_calls);
    args[n_args++] = int_arg(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA,
                             ka->http2_max_pings_without_data);
    args[n_args++] =
        int_arg(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
                ka->http2_min_recv_ping_interval_without_data_ms);
    args[n_args++] =
        int_arg(GRPC_ARG_HTTP2_MAX_PING_STRIKES, ka->http2_max_ping_strikes);
    if (ka->max_connection_age_ms)
        args[n_args++] =
            int_arg(GRPC_ARG_MAX_CONNECTION_AGE_MS, ka->max_connection_age_ms);
    if (ka->max_connection_age_grace_ms)
        args[n_args++] = int_arg(GRPC_ARG_MAX_CONNECTION_AGE_GRACE_MS,
                                 ka->max_connection_age_grace_ms);
    grpc_channel_args channel_args = {n_args, args};
    s->server = grpc_server_create(&channel_args, NULL);
    s->cq = grpc_completion_queue_create_for_next(NULL);
    grpc_server_register_completion_queue(s->server, s->cq, NULL);
    for (size_t i = 0; i < N_METHODS; i++)
        s->registered[i] = grpc_server_register_method(
            s->server, methods[i].path, NULL,
            methods[i].streaming ? GRPC_SRM_PAYLOAD_NONE
                                 : GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER,
            0);

    grpc_server_credentials *creds = NULL;
    osp_error *err = make_credentials(opts, &creds);
    if (err) {
        destroy_unstarted(s);
        return err;
    }
    char addr[600];
    const char *host = opts->address ? opts->address : "0.0.0.0";
    bool v6 = strchr(host, ':') && host[0] != '[';
    snprintf(addr, sizeof addr, v6 ? "[%s]:%d" : "%s:%d", host, opts->port);
    s->port = grpc_server_add_http2_port(s->server, addr, creds);
    grpc_server_credentials_release(creds);
    if (s->port <= 0) {
        destroy_unstarted(s);
        return osp_error_new(OSP_ERROR_UNAVAILABLE,
                             "failed to start the gRPC service: unable to "
                             "listen on %s",
                             addr);
    }
    grpc_server_start(s->server);
    for (size_t i = 0; i < s->n_slots; i++) {
        s->slots[i].server = s;
        s->slots[i].index = i;
        slot_arm(&s->slots[i]);
    }
    for (int i = 0; i < s->n_threads; i++)
        if (pthread_create(&s->threads[i], NULL, queue_thread, s) != 0) {
            /* Serve with the threads that did start. */
            s->n_threads = i;
            break;
        }
    if (s->n_threads == 0) {
        err = osp_error_new(OSP_ERROR_UNAVAILABLE,
                            "unable to start the gRPC threads");
        kgrpc_server_stop_accepting(s);
        kgrpc_server_drain(s, 0);
        kgrpc_server_free(s);
        return err;
    }
    *out = s;
    return NULL;
}

void kgrpc_server_stop_accepting(kgrpc_server *s) {
    pthread_mutex_lock(&s->mu);
    s->accepting = false;
    if (!s->shutdown_started) {
        s->shutdown_started = true;
        s->shutdown_tag.done = shutdown_done;
        KGRPC_HANDOFF(&s->shutdown_tag);
        grpc_server_shutdown_and_notify(s->server, s->cq, &s->shutdown_tag);
    }
    /* Streams end once their requests are answered; tell them outside the
     * server lock (their handlers lock their own state first). */
    size_t n = 0;
    for (kgrpc_call *c = s->calls; c; c = c->next)
        n += c->on_quiesce != NULL;
    kgrpc_call **quiesce = n ? calloc(n, sizeof *quiesce) : NULL;
    n = 0;
    for (kgrpc_call *c = s->calls; c && quiesce; c = c->next)
        if (c->on_quiesce && call_ref_if_live(c))
            quiesce[n++] = c;
    pthread_mutex_unlock(&s->mu);
    for (size_t i = 0; i < n; i++) {
        quiesce[i]->on_quiesce(quiesce[i]);
        kgrpc_call_unref(quiesce[i]);
    }
    free(quiesce);
}

/* Waits until no call is active and the shutdown tag came, or until
 * `deadline_ns` (osp_now_ns). True when both happened. */
static bool wait_idle(kgrpc_server *s, uint64_t deadline_ns) {
    pthread_mutex_lock(&s->mu);
    while (s->active_calls > 0 || !s->shutdown_done) {
        if (!cond_wait_until(&s->idle, &s->mu, deadline_ns))
            break;
    }
    bool idle = s->active_calls == 0 && s->shutdown_done;
    pthread_mutex_unlock(&s->mu);
    return idle;
}

bool kgrpc_server_drain(kgrpc_server *s, int timeout_ms) {
    kgrpc_server_stop_accepting(s);
    if (wait_idle(s, deadline_after_ns((uint64_t)timeout_ms * 1000000u)))
        return true;
    OSP_LOG_WARN("gRPC calls still in progress after %d ms; cancelling them",
                 timeout_ms);
    grpc_server_cancel_all_calls(s->server);
    /* Cancelled calls end at once unless the core still holds them. */
    return wait_idle(s, deadline_after_ns(2000ull * 1000000u));
}

void kgrpc_server_free(kgrpc_server *s) {
    if (!s)
        return;
    grpc_completion_queue_shutdown(s->cq);
    for (int i = 0; i < s->n_threads; i++)
        pthread_join(s->threads[i], NULL);
    grpc_server_destroy(s->server);
    grpc_completion_queue_destroy(s->cq);
    kgrpc_infer_pool_free(s);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->idle);
    free(s->registered);
    free(s->slots);
    free(s->threads);
    free(s);
    grpc_shutdown_blocking();
}
