/*
 * The control channel between the server and a python stub
 * (stub/osprey_python_stub.py): frames of an 8-byte header (u32 type, u32
 * payload length, little-endian) and a payload, on a Unix stream socket.
 * Tensors live in the shared-memory region (python_shm.h), except in the
 * frames that carry them inline (RESPONSE, BLS_CALL, BLS_ANSWER), or in
 * GPU memory (below).
 *
 * A tensor descriptor (EXEC's inputs, RESULT's outputs, BLS inputs) is:
 * u16 name length, name, u8 datatype length, datatype, u8 rank, i64
 * dims[rank], u64 offset, u64 byte size. Bit 7 of the rank byte
 * (PYPROTO_RANK_ON_GPU) marks a tensor in GPU memory (a stub's
 * Tensor.from_dlpack of a CUDA tensor, or an input handed over under
 * FORCE_CPU_ONLY_INPUT_TENSORS "no"): then i32 device id, u64 lease and
 * the 64-byte CUDA IPC handle of its allocation follow the byte size, the
 * offset counts from the start of that allocation, and nothing of it is
 * in the region or the frame. The lease is the stub's number for a
 * tensor it lends in a RESULT or RESPONSE (0 elsewhere): it keeps that
 * memory alive until a RELEASE names the lease. GPU tensors of a BLS or
 * BLS_CALL are held by the stub until the call's first answer instead;
 * the server copies them before it starts the call.
 *
 * server -> stub
 *   INIT      JSON {"model_file", "args": {Triton's initialize args},
 *             "growth", "region_max", "frame_max" (the largest frame it
 *             may send), "doorbell" (true: fd 5 is its doorbell),
 *             "memory_limit"}; answered OK or ERROR
 *   EXEC      binary (the stub unpacks it with struct.unpack_from): u64
 *             region size, u64 where outputs may start, u64 the batch's
 *             number, u32 request count, then per request of the batch
 *             (python_requests.h): u16 id length, id, u8 0 and u64
 *             correlation id or u8 1, u16 length and a string one, u32
 *             parameters length, parameters (a JSON object's text), u16
 *             output count, per output u16 length and name, u16 input
 *             count, per input a tensor descriptor (as RESULT's outputs)
 *             of its rows of the batch's inputs, which lie once in the
 *             region; answered RESULT (one response per request, in
 *             order) or ERROR (the whole batch failed)
 *   FINALIZE  empty; the stub runs finalize(), answers OK and exits
 *   CANCEL    u64 a decoupled request's EXEC number: its client has
 *             gone, its is_cancelled() becomes true
 *   AUTO_COMPLETE  JSON {"model_file", "model_repository", "config"}; the
 *             stub runs auto_complete_config, answers OK with what it
 *             added (python_complete.h) or ERROR, and exits
 *   RELEASE   u32 count, u64 leases[count]: the server is done with the
 *             GPU tensors the stub lent it under these leases (copied, or
 *             given up on when the response failed), sent after it
 *             handled the RESULT or RESPONSE that named them; the stub may
 *             free them
 *   BLS_ANSWER  an answer to a BLS_CALL (python_bls_async.h): u64 the
 *             call's id, u32 flags (1 = final: the call's last answer), u64
 *             data size, one response as in RESULT with offsets into the
 *             data, then the data (tensors inline). A call of a model that
 *             is not decoupled gets one, final; exec(decoupled=True) one per
 *             response of the called model, the final flag on the last (an
 *             empty response when that model sent the flag alone)
 *   CALL_ANSWER  the answer to a METRIC or IS_CANCELLED frame: u64 the
 *             frame's call id, u32 0 or 1 (an error follows), f64 a value
 *             (a metric's; IS_CANCELLED: 1 when cancelled), u32 message
 *             length, message
 * stub -> server
 *   OK, ERROR (UTF-8 message)
 *   RESULT    u64 region size, u32 response count, then per response
 *             u32 kind: 0 = outputs: u32 count, then per output u16 name
 *             length, name, u8 datatype length, datatype, u8 rank, i64
 *             dims[rank], u64 offset, u64 byte size; 1 = error: u32 code
 *             (pb_utils.TritonError's), u32 length, message
 *   LOG       u32 level (0 info, 1 warning, 2 error, 3 verbose), message;
 *             may come before any answer
 *   BLS       a request of the model's own (pb_utils.InferenceRequest.exec),
 *             sent during EXEC by a model that is not decoupled, from the
 *             thread running execute, one at a time (the others go as
 *             BLS_CALL), never for exec(decoupled=True): u64 region
 *             size, u64 where the server may write outputs, then the
 *             request (below) with its input descriptors' offsets in the
 *             region. The server answers
 *             BLS_RESULT: a RESULT payload with one response, before the
 *             EXEC's answer.
 *   RESPONSE  a decoupled model's response (its response sender), during
 *             or after EXEC: u64 the EXEC's "batch" number, u32 flags (1 =
 *             final), u32 1 when a response follows (0: only the flags),
 *             u64 data size, the response as in RESULT with offsets into
 *             the data, then the data (tensors travel inline: a response
 *             may come from another thread while the region is in use).
 *             A decoupled EXEC is answered RESULT with no responses once
 *             execute has returned None, or ERROR.
 *   BLS_CALL  a BLS request with its tensors inline (every one but a
 *             BLS), from any thread between initialize and finalize:
 *             u64 a call id of the stub's choice (BLS_ANSWER and
 *             BLS_CANCEL frames name it), u8 1 for exec(decoupled=True),
 *             u64 data size, the request (below) with its input
 *             descriptors' offsets into the data, then the data: tensors
 *             travel inline, as the region belongs to whichever request
 *             the instance runs meanwhile. Several calls may be in flight
 *             at once; the server answers each as its responses come.
 *   BLS_CANCEL  u64 the id of an exec(decoupled=True) call in flight
 *             (ResponseIterator.cancel()): the server cancels the called
 *             request; its answers still end with a final one.
 *   METRIC    a custom metrics operation (pb_utils.MetricFamily, Metric):
 *             python_metrics.h has its layout; answered CALL_ANSWER
 *             unless its call id is 0
 *   IS_CANCELLED  request.is_cancelled() of a model that is not
 *             decoupled: u64 call id, u64 the EXEC's batch number, u32 the
 *             request's index in it; answered CALL_ANSWER, 1 when that
 *             request's client has gone (0 once its EXEC was answered)
 *
 * The request of BLS and BLS_CALL: u16 model length, model, i64 version,
 * u16 id length, id, u32 input count, input descriptors (as RESULT's
 * outputs), u32 output count, per output u16 length and name, u64 timeout
 * in microseconds (0 = none), u32 parameter count, per parameter u16 key
 * length, key, u8 type (0 string: u32 length and the bytes; 1 int: i64;
 * 2 bool: u8 0 or 1).
 *
 * Frames carry at most pyproto_frame_max(shm-region-max-byte-size) bytes:
 * inline tensors count against the region's limit, as they would in the
 * region. A stub whose model is not decoupled rings its doorbell (fd 5,
 * python_watch.h) for each frame it sends while the server is not reading
 * (no INIT, EXEC or FINALIZE in flight), once the frame's header is sent.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "osprey/datatype.h"
#include "osprey/device.h"
#include "osprey/error.h"
#include "osprey/infer.h"
#include "osprey/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

enum {
    PYPROTO_INIT = 1,
    PYPROTO_EXEC = 2,
    PYPROTO_FINALIZE = 3,
    PYPROTO_AUTO_COMPLETE = 4,
    PYPROTO_BLS_RESULT = 5,
    PYPROTO_CANCEL = 6,
    PYPROTO_BLS_ANSWER = 7,
    PYPROTO_RELEASE = 8,
    PYPROTO_CALL_ANSWER = 9,
    PYPROTO_OK = 10,
    PYPROTO_ERROR = 11,
    PYPROTO_RESULT = 12,
    PYPROTO_LOG = 13,
    PYPROTO_BLS = 14,
    PYPROTO_RESPONSE = 15,
    PYPROTO_BLS_CALL = 16,
    PYPROTO_BLS_CANCEL = 17,
    PYPROTO_METRIC = 18,
    PYPROTO_IS_CANCELLED = 19,
};

/* What a frame may hold besides tensors (descriptors, messages). Frames
 * without tensors (RESULT, EXEC, LOG) stay under it. */
#define PYPROTO_MAX_FRAME (16u << 20)

/* Largest frame of a stub whose region may grow to `shm_limit` bytes
 * (shm-region-max-byte-size): inline tensors up to that limit, plus
 * PYPROTO_MAX_FRAME of descriptors, within the u32 frame length. */
size_t pyproto_frame_max(size_t shm_limit);

/* A growable NUL-terminated text buffer for building JSON payloads. */
typedef struct pyproto_text {
    char *data;
    size_t len, cap;
    bool failed; /* an allocation failed; data is then incomplete */
} pyproto_text;

void pyproto_text_printf(pyproto_text *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Appends `s` (borrowed, NUL-terminated) as a JSON string with quotes. */
void pyproto_text_json_string(pyproto_text *t, const char *s);
void pyproto_text_free(pyproto_text *t);

/* The rank byte's flag of a tensor in GPU memory. */
#define PYPROTO_RANK_ON_GPU 0x80u

/* Where a GPU tensor lies: the allocation ipc_handle names on GPU
 * device_id (the stub's and the server's CUDA ordinals agree: the stub
 * inherits the server's environment), and the stub's lease (0: none). */
typedef struct pyproto_gpu_ref {
    int32_t device_id;
    uint64_t lease;
    uint8_t ipc_handle[OSP_DEVICE_IPC_HANDLE_BYTES];
} pyproto_gpu_ref;

typedef struct pyproto_output {
    char *name; /* owned */
    osp_datatype dtype;
    osp_shape shape;
    uint64_t offset, byte_size; /* in the region, or in gpu's allocation */
    bool on_gpu;
    pyproto_gpu_ref gpu; /* when on_gpu */
} pyproto_output;

typedef struct pyproto_response {
    bool is_error;
    uint32_t error_code;     /* pb_utils.TritonError code when is_error */
    char *error_message;     /* owned; NULL unless is_error */
    pyproto_output *outputs; /* owned */
    size_t n_outputs;
} pyproto_response;

typedef struct pyproto_result {
    uint64_t region_size;
    pyproto_response *responses; /* owned */
    size_t n_responses;
} pyproto_result;

/* Decodes a RESULT payload (borrowed). Every length, rank, dim and
 * datatype is checked; offsets are checked against region_size (tensors
 * lie inside the region the stub reports). Caller owns *out on success,
 * freed with pyproto_result_destroy; nothing to free on failure. */
osp_error *pyproto_result_decode(const uint8_t *payload, size_t len,
                                 pyproto_result *out);
void pyproto_result_destroy(pyproto_result *result);

typedef struct pyproto_bls_request {
    uint64_t region_size, out_offset;
    char *model; /* owned */
    int64_t version;
    char *id;               /* owned */
    pyproto_output *inputs; /* owned; offsets checked against region_size */
    size_t n_inputs;
    char **outputs; /* owned */
    size_t n_outputs;
    bool decoupled;      /* BLS_CALL: exec(decoupled=True), every response */
    uint64_t timeout_us; /* the request's queue timeout; 0 = none */
    osp_parameter *parameters; /* owned, each key and string value too */
    size_t n_parameters;
    /* BLS_CALL only: the stub's id of the call, and the inline tensors
     * (borrowed from the payload; input offsets are checked against
     * data_len instead of region_size, which is 0). */
    uint64_t call_id;
    const uint8_t *data;
    size_t data_len;
} pyproto_bls_request;

/* Decodes a BLS payload (borrowed) with the checks of
 * pyproto_result_decode. Caller owns *out on success (destroy it); nothing
 * to free on failure. */
osp_error *pyproto_bls_decode(const uint8_t *payload, size_t len,
                              pyproto_bls_request *out);
void pyproto_bls_destroy(pyproto_bls_request *request);

/* Decodes a BLS_CALL payload (borrowed; out->data points into it) with the
 * checks of pyproto_result_decode, each input inside the call's data.
 * Caller destroys *out on success; nothing to free on failure. When the
 * payload holds at least the call id, *call_id is set even on failure, so
 * that the caller can answer the call with the error. */
osp_error *pyproto_bls_call_decode(const uint8_t *payload, size_t len,
                                   pyproto_bls_request *out, uint64_t *call_id);

/* Decodes a BLS_CANCEL payload (borrowed): the call's id. */
osp_error *pyproto_bls_cancel_decode(const uint8_t *payload, size_t len,
                                     uint64_t *call_id);

/* A decoded RESPONSE frame. */
typedef struct pyproto_stream_response {
    uint64_t batch;
    bool final;
    bool has_response;
    pyproto_response response; /* owned; offsets into data */
    const uint8_t *data;       /* borrowed from the payload */
    size_t data_len;
} pyproto_stream_response;

/* Decodes a RESPONSE payload (borrowed; out->data points into it) with the
 * checks of pyproto_result_decode. Caller destroys *out on success. */
osp_error *pyproto_stream_response_decode(const uint8_t *payload, size_t len,
                                          pyproto_stream_response *out);
void pyproto_stream_response_destroy(pyproto_stream_response *r);

/* Appends a tensor descriptor (u16 name length, name, u8 datatype
 * length, datatype, u8 rank, i64 dims[rank], u64 offset, u64 byte size),
 * as EXEC, RESULT and BLS frames carry them. INVALID_ARG for a name over
 * 65535 bytes; nothing is appended then. */
/* Appends a CALL_ANSWER payload: `refused` (borrowed; NULL: success) or
 * `value`. */
void pyproto_append_call_answer(pyproto_text *t, uint64_t call,
                                const osp_error *refused, double value);

osp_error *pyproto_append_tensor(pyproto_text *t, const char *name,
                                 osp_datatype dtype, const osp_shape *shape,
                                 uint64_t offset, uint64_t byte_size);

/* pyproto_append_tensor for a tensor in GPU memory (`gpu` borrowed;
 * offset in its allocation). */
osp_error *pyproto_append_gpu_tensor(pyproto_text *t, const char *name,
                                     osp_datatype dtype, const osp_shape *shape,
                                     const pyproto_gpu_ref *gpu,
                                     uint64_t offset, uint64_t byte_size);

/* Appends a RELEASE payload naming the lease of every GPU tensor of the
 * `n` responses (borrowed) that has one; returns how many (0: nothing
 * worth sending, and nothing is appended). */
size_t pyproto_append_release(pyproto_text *t,
                              const pyproto_response *responses, size_t n);

/* Appends `n` raw bytes to a payload being built. */
void pyproto_text_append(pyproto_text *t, const void *data, size_t n);

/* Makes room for `more` bytes at once (a large tensor appended next is
 * then copied once, into a buffer of its size); false, and t->failed, when
 * out of memory. */
bool pyproto_text_reserve(pyproto_text *t, size_t more);

/* The pb_utils.TritonError code of an osp_error code. */
uint32_t pyproto_triton_code(osp_error_code code);

/* The osp_error code of a pb_utils.TritonError code. */
osp_error_code pyproto_error_code(uint32_t triton_code);

/* Writes one frame; the socket is blocking. false when the peer is gone. */
bool pyproto_send(int fd, uint32_t type, const void *payload, size_t len);

typedef enum pyproto_recv_status {
    PYPROTO_RECV_OK = 0,
    PYPROTO_RECV_CLOSED,  /* the stub closed the channel or died */
    PYPROTO_RECV_TIMEOUT, /* nothing complete before the deadline */
    PYPROTO_RECV_INVALID, /* a frame over max_frame, or no memory */
} pyproto_recv_status;

/* Reads one frame of at most `max_frame` payload bytes, waiting at most
 * until `deadline_ns` (osp_now_ns clock; 0 = no deadline). On OK the
 * caller owns *payload (malloc'd, NUL appended, may be NULL when *len is
 * 0). */
pyproto_recv_status pyproto_recv(int fd, uint64_t deadline_ns, size_t max_frame,
                                 uint32_t *type, uint8_t **payload,
                                 size_t *len);

#ifdef __cplusplus
}
#endif
