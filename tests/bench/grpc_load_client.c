/*
 * grpc_load_client: a closed-loop KServe v2 gRPC load generator for Osprey
 * benchmarks, the gRPC twin of load_client.c (same options where they
 * apply, same report, same JSON keys), on gRPC core's C API.
 *
 * The ModelInferRequest is packed once per variant (protobuf-c, tensors in
 * raw_input_contents) into one refcounted slice; every call sends a byte
 * buffer over that slice, so no call copies or re-encodes the request.
 * --concurrency calls are in flight at all times: each slot starts its next
 * call as soon as the previous one completed (and was checked). Slots are
 * spread over --threads threads, each draining its own completion queue,
 * and over --channels channels (each its own TCP connection, round robin
 * by slot). The run stops at --warmup + --duration seconds; calls still in
 * flight then are cancelled and reported as "incomplete". Only calls that
 * complete inside the measured window count towards throughput and
 * latency; errors count whenever they happen.
 *
 * A response is checked by scanning its raw_output_contents in the
 * received slices (no copy): `simple` must answer INPUT0+INPUT1 and
 * INPUT0-INPUT1, `identity_fp32` its input. Variants (different tensor
 * values per slot) make a server that mixes up requests fail the check.
 */
#define _GNU_SOURCE
#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grpc_service.pb-c.h"
#include "loadgen.h"

#define MAX_VARIANTS 8
#define MAX_VARIANT_BYTES ((size_t)512 << 20) /* all variants together */
#define MAX_CHANNELS 256
#define N_STATUS 17 /* gRPC status codes 0..16 */
#define MODEL_INFER "/inference.GRPCInferenceService/ModelInfer"

typedef enum { MODE_SIMPLE, MODE_FP32 } request_mode;
static const char *const mode_names[] = {"simple", "fp32"};

typedef struct {
    char target[300]; /* host:port */
    request_mode mode;
    int channels;
    loadgen_options load; /* --url, --model, --concurrency, ... */
} options;

/* One prepared request: its packed message and what the answer holds. */
typedef struct {
    grpc_slice packed; /* the serialized ModelInferRequest (one ref) */
    /* raw_output_contents a correct response carries, in order: each
     * expect[i] is borrowed from `owned` or from the packed request. */
    const uint8_t *expect[2];
    size_t expect_len[2];
    size_t n_expect;
    uint8_t *owned; /* simple: OUTPUT0 then OUTPUT1 (malloc'ed) */
} request_variant;

struct worker;

/* One call slot: at most one call in flight. */
typedef struct {
    struct worker *w;
    int index; /* global slot number */
    const request_variant *req;
    grpc_channel *channel;
    void *method; /* grpc_channel_register_call handle of the channel */
    grpc_call *call;
    grpc_byte_buffer *send;
    grpc_byte_buffer *recv;
    grpc_metadata_array initial, trailing;
    grpc_status_code status;
    grpc_slice details;
    uint64_t start_ns;
    uint64_t seq; /* responses received on this slot */
} call_slot;

typedef struct worker {
    const options *opt;
    grpc_completion_queue *cq;
    call_slot *slots;
    int n_slots;
    int in_flight;
    uint64_t measure_start, end;

    /* This thread's, in main's array; reconnects stays 0 (a channel
       reconnects by itself, unseen). */
    loadgen_results *results;
} worker;

/* ---- requests ------------------------------------------------------------ */

static void grpc_slice_free_heap(void *p) {
    free(p);
}

/* Fills *rv with variant v of the request for opt (packed once). Returns
   -1 on OOM; rv may hold partial allocations (variant_free releases them). */
static int variant_build(request_variant *rv, const options *opt, int v) {
    Inference__ModelInferRequest msg = INFERENCE__MODEL_INFER_REQUEST__INIT;
    Inference__ModelInferRequest__InferInputTensor in[2];
    Inference__ModelInferRequest__InferInputTensor *in_ptrs[2];
    Inference__ModelInferRequest__InferRequestedOutputTensor out[2];
    Inference__ModelInferRequest__InferRequestedOutputTensor *out_ptrs[2];
    ProtobufCBinaryData raw[2];
    static const char *const in_names[] = {"INPUT0", "INPUT1"};
    static const char *const out_names[] = {"OUTPUT0", "OUTPUT1"};
    int64_t shape[2] = {1, 16};
    int32_t ints[2][16];
    float *floats = NULL;
    size_t n_tensors = opt->mode == MODE_SIMPLE ? 2 : 1;

    if (opt->mode == MODE_SIMPLE) {
        rv->owned = malloc(2 * sizeof ints[0]);
        if (!rv->owned)
            return -1;
        int32_t sum[16], diff[16];
        for (int i = 0; i < 16; i++) {
            ints[0][i] = loadgen_simple_input(v, 0, i);
            ints[1][i] = loadgen_simple_input(v, 1, i);
            sum[i] = ints[0][i] + ints[1][i];
            diff[i] = ints[0][i] - ints[1][i];
        }
        memcpy(rv->owned, sum, sizeof sum);
        memcpy(rv->owned + sizeof sum, diff, sizeof diff);
        for (int t = 0; t < 2; t++)
            raw[t] = (ProtobufCBinaryData){sizeof ints[t], (uint8_t *)ints[t]};
        rv->expect[0] = rv->owned;
        rv->expect[1] = rv->owned + sizeof sum;
        rv->expect_len[0] = rv->expect_len[1] = sizeof sum;
        rv->n_expect = 2;
    } else {
        shape[1] = opt->load.elements;
        floats = malloc((size_t)opt->load.elements * sizeof *floats);
        if (!floats)
            return -1;
        for (long i = 0; i < opt->load.elements; i++)
            floats[i] = loadgen_fp32_value(v, i);
        raw[0] = (ProtobufCBinaryData){
            (size_t)opt->load.elements * sizeof *floats, (uint8_t *)floats};
        rv->n_expect = 1;
    }
    for (size_t t = 0; t < n_tensors; t++) {
        inference__model_infer_request__infer_input_tensor__init(&in[t]);
        in[t].name = (char *)in_names[t];
        in[t].datatype = opt->mode == MODE_SIMPLE ? "INT32" : "FP32";
        in[t].n_shape = 2;
        in[t].shape = shape;
        in_ptrs[t] = &in[t];
        inference__model_infer_request__infer_requested_output_tensor__init(
            &out[t]);
        out[t].name = (char *)out_names[t];
        out_ptrs[t] = &out[t];
    }
    msg.model_name = (char *)(opt->load.model            ? opt->load.model
                              : opt->mode == MODE_SIMPLE ? "simple"
                                                         : "identity_fp32");
    msg.n_inputs = msg.n_outputs = msg.n_raw_input_contents = n_tensors;
    msg.inputs = in_ptrs;
    msg.outputs = out_ptrs;
    msg.raw_input_contents = raw;

    size_t len = inference__model_infer_request__get_packed_size(&msg);
    uint8_t *packed = malloc(len ? len : 1);
    if (!packed) {
        free(floats);
        return -1;
    }
    inference__model_infer_request__pack(&msg, packed);
    free(floats);
    rv->packed = grpc_slice_new(packed, len, grpc_slice_free_heap);
    if (opt->mode == MODE_FP32) {
        /* identity answers its input: the last len bytes of the message */
        rv->expect_len[0] = raw[0].len;
        rv->expect[0] = packed + len - raw[0].len;
    }
    return 0;
}

static void variant_free(request_variant *rv) {
    if (GRPC_SLICE_START_PTR(rv->packed))
        grpc_slice_unref(rv->packed);
    free(rv->owned);
}

/* ---- response checks ----------------------------------------------------- */

/* A read position over the slices of a received message. */
typedef struct {
    grpc_slice *slices;
    size_t n, seg, at;
    size_t left; /* bytes from here to the end */
} scan;

static bool scan_byte(scan *s, uint8_t *b) {
    while (s->seg < s->n && s->at >= GRPC_SLICE_LENGTH(s->slices[s->seg])) {
        s->seg++;
        s->at = 0;
    }
    if (s->seg >= s->n)
        return false;
    *b = GRPC_SLICE_START_PTR(s->slices[s->seg])[s->at++];
    s->left--;
    return true;
}

static bool scan_varint(scan *s, uint64_t *v) {
    *v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        uint8_t b;
        if (!scan_byte(s, &b))
            return false;
        *v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80))
            return true;
    }
    return false;
}

/* Skips n bytes, or compares them with want when want is not NULL. */
static bool scan_bytes(scan *s, uint64_t n, const uint8_t *want) {
    if (n > s->left)
        return false;
    while (n > 0) {
        size_t have = GRPC_SLICE_LENGTH(s->slices[s->seg]) - s->at;
        if (have == 0) {
            s->seg++;
            s->at = 0;
            continue;
        }
        size_t step = n < have ? (size_t)n : have;
        if (want) {
            if (memcmp(GRPC_SLICE_START_PTR(s->slices[s->seg]) + s->at, want,
                       step) != 0)
                return false;
            want += step;
        }
        s->at += step;
        s->left -= step;
        n -= step;
    }
    return true;
}

/* Checks that the ModelInferResponse in bb carries rv's expected
   raw_output_contents, in order. On mismatch writes why and returns -1. */
static int verify_response(const request_variant *rv, grpc_byte_buffer *bb,
                           char *why, size_t why_size) {
    grpc_byte_buffer_reader reader;
    if (!grpc_byte_buffer_reader_init(&reader, bb)) {
        snprintf(why, why_size, "unreadable response");
        return -1;
    }
    grpc_slice stack_slices[64];
    scan s = {.slices = stack_slices};
    size_t cap = 64;
    grpc_slice *slice;
    int result = -1;
    while (grpc_byte_buffer_reader_peek(&reader, &slice)) {
        if (s.n == cap) {
            grpc_slice *grown =
                malloc(cap * 2 * sizeof *grown); /* rare: huge responses */
            if (!grown) {
                snprintf(why, why_size, "out of memory");
                goto out;
            }
            memcpy(grown, s.slices, s.n * sizeof *grown);
            if (s.slices != stack_slices)
                free(s.slices);
            s.slices = grown;
            cap *= 2;
        }
        s.slices[s.n++] = *slice;
        s.left += GRPC_SLICE_LENGTH(*slice);
    }
    size_t found = 0;
    while (s.left > 0) {
        uint64_t key, len;
        if (!scan_varint(&s, &key))
            goto bad;
        switch (key & 7) {
        case 0:
            if (!scan_varint(&s, &len))
                goto bad;
            break;
        case 1:
            if (!scan_bytes(&s, 8, NULL))
                goto bad;
            break;
        case 5:
            if (!scan_bytes(&s, 4, NULL))
                goto bad;
            break;
        case 2:
            if (!scan_varint(&s, &len))
                goto bad;
            if ((key >> 3) == 6) { /* raw_output_contents */
                if (found >= rv->n_expect || len != rv->expect_len[found] ||
                    !scan_bytes(&s, len, rv->expect[found])) {
                    snprintf(why, why_size, "raw_output_contents[%zu] differs",
                             found);
                    goto out;
                }
                found++;
            } else if (!scan_bytes(&s, len, NULL)) {
                goto bad;
            }
            break;
        default:
            goto bad;
        }
    }
    if (found != rv->n_expect) {
        snprintf(why, why_size, "%zu raw_output_contents, expected %zu", found,
                 rv->n_expect);
        goto out;
    }
    result = 0;
    goto out;
bad:
    snprintf(why, why_size, "malformed ModelInferResponse");
out:
    if (s.slices != stack_slices)
        free(s.slices);
    grpc_byte_buffer_reader_destroy(&reader);
    return result;
}

/* ---- calls --------------------------------------------------------------- */

/* Starts the slot's next call: one batch with every operation of a unary
   call, whose completion comes back to the worker's queue as the slot. */
static void slot_start(call_slot *c) {
    worker *w = c->w;
    c->start_ns = loadgen_now_ns();
    c->call = grpc_channel_create_registered_call(
        c->channel, NULL, GRPC_PROPAGATE_DEFAULTS, w->cq, c->method,
        gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    /* The byte buffer holds a ref on the packed slice: no copy. */
    c->send = grpc_raw_byte_buffer_create((grpc_slice *)&c->req->packed, 1);
    c->recv = NULL;
    grpc_metadata_array_init(&c->initial);
    grpc_metadata_array_init(&c->trailing);
    c->details = grpc_empty_slice();
    grpc_op ops[6];
    memset(ops, 0, sizeof ops);
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = c->send;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &c->initial;
    ops[4].op = GRPC_OP_RECV_MESSAGE;
    ops[4].data.recv_message.recv_message = &c->recv;
    ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[5].data.recv_status_on_client.trailing_metadata = &c->trailing;
    ops[5].data.recv_status_on_client.status = &c->status;
    ops[5].data.recv_status_on_client.status_details = &c->details;
    grpc_call_error rc = grpc_call_start_batch(c->call, ops, 6, c, NULL);
    if (rc != GRPC_CALL_OK) {
        /* Nothing will complete: count it and leave the slot idle. */
        w->results->io_errors++;
        loadgen_record_error(
            w->results, "grpc_call_start_batch refused the call (%d)", (int)rc);
        grpc_call_unref(c->call);
        c->call = NULL;
        grpc_byte_buffer_destroy(c->send);
        grpc_metadata_array_destroy(&c->initial);
        grpc_metadata_array_destroy(&c->trailing);
        return;
    }
    w->in_flight++;
}

/* The slot's call completed (ok false: the batch failed or was cancelled):
   counts it, releases it, and returns the send time. */
static void slot_complete(call_slot *c, bool ok, uint64_t done_ns) {
    worker *w = c->w;
    w->in_flight--;
    bool measured = done_ns >= w->measure_start && done_ns < w->end;
    if (done_ns >= w->end) {
        w->results->incomplete++;
    } else if (!ok) {
        w->results->io_errors++;
        loadgen_record_error(w->results, "call batch failed");
    } else if (c->status != GRPC_STATUS_OK) {
        w->results->status_errors++;
        if ((unsigned)c->status < N_STATUS)
            w->results->status_counts[c->status]++;
        char *details = grpc_slice_to_c_string(c->details);
        loadgen_record_error(w->results, "status %d: %s", (int)c->status,
                             details);
        gpr_free(details);
    } else if (!c->recv) {
        w->results->io_errors++;
        loadgen_record_error(w->results, "OK without a response message");
    } else {
        char why[256];
        int bad = w->opt->load.verify_every > 0 &&
                  c->seq % (uint64_t)w->opt->load.verify_every == 0 &&
                  verify_response(c->req, c->recv, why, sizeof why) != 0;
        c->seq++;
        w->results->status_counts[GRPC_STATUS_OK]++;
        if (bad) {
            w->results->verify_errors++;
            loadgen_record_error(w->results, "slot %d: %s", c->index, why);
        } else if (measured) {
            w->results->ok++;
            w->results->req_bytes += GRPC_SLICE_LENGTH(c->req->packed);
            w->results->resp_bytes += grpc_byte_buffer_length(c->recv);
            loadgen_record_latency(w->results, done_ns - c->start_ns);
        }
    }
    if (c->recv)
        grpc_byte_buffer_destroy(c->recv);
    grpc_byte_buffer_destroy(c->send);
    grpc_metadata_array_destroy(&c->initial);
    grpc_metadata_array_destroy(&c->trailing);
    grpc_slice_unref(c->details);
    grpc_call_unref(c->call);
    c->call = NULL;
}

static void *worker_run(void *arg) {
    worker *w = arg;
    for (int i = 0; i < w->n_slots; i++)
        slot_start(&w->slots[i]);
    bool cancelled = false;
    while (w->in_flight > 0) {
        uint64_t now = loadgen_now_ns();
        if (now >= w->end && !cancelled) {
            /* Time is up: what is still in flight will not count. */
            for (int i = 0; i < w->n_slots; i++)
                if (w->slots[i].call)
                    grpc_call_cancel(w->slots[i].call, NULL);
            cancelled = true;
        }
        gpr_timespec wake = gpr_time_add(
            gpr_now(GPR_CLOCK_MONOTONIC),
            gpr_time_from_millis(cancelled ? 1000 : 50, GPR_TIMESPAN));
        grpc_event ev = grpc_completion_queue_next(w->cq, wake, NULL);
        if (ev.type != GRPC_OP_COMPLETE)
            continue;
        call_slot *c = ev.tag;
        uint64_t done = loadgen_now_ns();
        slot_complete(c, ev.success != 0, done);
        if (done < w->end)
            slot_start(c);
    }
    return NULL;
}

/* ---- command line and report --------------------------------------------- */

static void usage(FILE *f) {
    fputs("usage: grpc_load_client --url HOST:PORT [options]\n"
          "  --url HOST:PORT       gRPC server (grpc:// accepted)\n"
          "  --model NAME          model (default: the mode's)\n"
          "  --mode MODE           request to send (default simple):\n"
          "     simple               simple: INT32 [1,16] x2, raw contents\n"
          "     fp32                 identity_fp32: FP32 [1,N], raw contents\n"
          "  --elements N          fp32 tensor length (16)\n"
          "  --concurrency N       calls in flight (1)\n"
          "  --threads N           completion-queue threads (1)\n"
          "  --channels N          channels, each its own connection (1)\n"
          "  --duration S          measured seconds (3)\n"
          "  --warmup S            unmeasured seconds before that (0)\n"
          "  --verify-every N      check every Nth response; 0 off (1)\n"
          "  --json                print one JSON object\n"
          "Every call must end OK with the expected raw_output_contents;\n"
          "others count as errors. Exit status 0 when there were no errors\n"
          "and at least one call completed. The report has load_client's\n"
          "format; its body bytes are the serialized messages.\n",
          f);
}

/* loadgen_apply_fn for grpc_load_client's own options; ctx is the
   options. */
static int apply_option(void *ctx, const char *name, const char *val) {
    options *opt = ctx;
    long n = 0;
    if (strcmp(name, "--mode") == 0) {
        if (strcmp(val, "simple") == 0)
            opt->mode = MODE_SIMPLE;
        else if (strcmp(val, "fp32") == 0)
            opt->mode = MODE_FP32;
        else
            return -1;
    } else if (strcmp(name, "--channels") == 0) {
        if (loadgen_parse_long(val, 1, &n) || n > MAX_CHANNELS)
            return -1;
        opt->channels = (int)n;
    } else {
        return -1;
    }
    return 0;
}

/* loadgen_cli's use_url: [grpc://]HOST:PORT becomes the target. */
static int use_url(void *ctx, const char *url) {
    options *opt = ctx;
    if (strncmp(url, "grpc://", 7) == 0)
        url += 7;
    if (!strchr(url, ':') || strlen(url) >= sizeof opt->target)
        return -1;
    strcpy(opt->target, url);
    return 0;
}

/* A channel of its own connection (a local subchannel pool keeps channels
   to one target from sharing one), with no receive limit. */
static grpc_channel *channel_new(const char *target) {
    grpc_arg args[2];
    args[0].type = GRPC_ARG_INTEGER;
    args[0].key = GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL;
    args[0].value.integer = 1;
    args[1].type = GRPC_ARG_INTEGER;
    args[1].key = GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
    args[1].value.integer = -1;
    grpc_channel_args channel_args = {2, args};
    grpc_channel_credentials *creds = grpc_insecure_credentials_create();
    grpc_channel *ch = grpc_channel_create(target, creds, &channel_args);
    grpc_channel_credentials_release(creds);
    return ch;
}

/* Waits until the channel is connected (or the deadline): the first
   calls then measure calls, not the connection set-up. */
static bool channel_wait_ready(grpc_channel *ch, grpc_completion_queue *cq,
                               double seconds) {
    gpr_timespec deadline = gpr_time_add(
        gpr_now(GPR_CLOCK_MONOTONIC),
        gpr_time_from_millis((int64_t)(seconds * 1000), GPR_TIMESPAN));
    for (;;) {
        grpc_connectivity_state st =
            grpc_channel_check_connectivity_state(ch, 1);
        if (st == GRPC_CHANNEL_READY)
            return true;
        if (gpr_time_cmp(gpr_now(GPR_CLOCK_MONOTONIC), deadline) >= 0)
            return false;
        grpc_channel_watch_connectivity_state(ch, st, deadline, cq, NULL);
        grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_MONOTONIC),
                                   NULL);
    }
}

static void cq_drain_destroy(grpc_completion_queue *cq) {
    grpc_completion_queue_shutdown(cq);
    while (grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_MONOTONIC),
                                      NULL)
               .type != GRPC_QUEUE_SHUTDOWN)
        ;
    grpc_completion_queue_destroy(cq);
}

int main(int argc, char **argv) {
    options opt = {
        .mode = MODE_SIMPLE,
        .channels = 1,
        .load = LOADGEN_OPTIONS_DEFAULT,
    };
    const loadgen_cli cli = {.prog = "grpc_load_client",
                             .apply = apply_option,
                             .use_url = use_url,
                             .ctx = &opt};
    int parsed = loadgen_parse_args(&opt.load, argc, argv, &cli);
    if (parsed) {
        usage(parsed > 0 ? stdout : stderr);
        return parsed > 0 ? 0 : 2;
    }
    if (opt.channels > opt.load.concurrency)
        opt.channels = opt.load.concurrency;
    grpc_init();

    int result = 2;
    int n_variants = opt.load.concurrency < MAX_VARIANTS ? opt.load.concurrency
                                                         : MAX_VARIANTS;
    request_variant *variants = calloc((size_t)n_variants, sizeof *variants);
    worker *workers = calloc((size_t)opt.load.threads, sizeof *workers);
    call_slot *slots = calloc((size_t)opt.load.concurrency, sizeof *slots);
    loadgen_results *results = loadgen_results_new(opt.load.threads);
    grpc_channel *channels[MAX_CHANNELS] = {0};
    void *methods[MAX_CHANNELS] = {0};
    if (!variants || !workers || !slots || !results) {
        fprintf(stderr, "grpc_load_client: out of memory\n");
        goto out;
    }
    for (int v = 0; v < n_variants; v++) {
        if (variant_build(&variants[v], &opt, v)) {
            fprintf(stderr, "grpc_load_client: out of memory\n");
            n_variants = v + 1;
            goto out;
        }
        if ((size_t)(v + 1) * GRPC_SLICE_LENGTH(variants[v].packed) >
            MAX_VARIANT_BYTES) {
            n_variants = v + 1; /* large requests: fewer variants */
            break;
        }
    }
    grpc_completion_queue *setup_cq =
        grpc_completion_queue_create_for_next(NULL);
    for (int i = 0; i < opt.channels; i++) {
        channels[i] = channel_new(opt.target);
        methods[i] =
            grpc_channel_register_call(channels[i], MODEL_INFER, NULL, NULL);
        if (!channel_wait_ready(channels[i], setup_cq, 10)) {
            fprintf(stderr, "grpc_load_client: %s: not connected after 10 s\n",
                    opt.target);
            cq_drain_destroy(setup_cq);
            goto out;
        }
    }
    cq_drain_destroy(setup_cq);

    uint64_t measure_start, end;
    loadgen_window(&opt.load, &measure_start, &end);
    int next_slot = 0;
    for (int t = 0; t < opt.load.threads; t++) {
        worker *w = &workers[t];
        int n = loadgen_thread_share(&opt.load, t);
        *w = (worker){.opt = &opt,
                      .cq = grpc_completion_queue_create_for_next(NULL),
                      .slots = slots + next_slot,
                      .n_slots = n,
                      .measure_start = measure_start,
                      .end = end,
                      .results = &results[t]};
        for (int i = 0; i < n; i++) {
            call_slot *c = &w->slots[i];
            int g = next_slot + i;
            c->w = w;
            c->index = g;
            c->req = &variants[g % n_variants];
            c->channel = channels[g % opt.channels];
            c->method = methods[g % opt.channels];
        }
        next_slot += n;
    }
    int ran = loadgen_run_threads(worker_run, workers, opt.load.threads,
                                  sizeof *workers, "grpc_load_client");
    for (int t = 0; t < opt.load.threads; t++)
        cq_drain_destroy(workers[t].cq);
    if (ran)
        goto out;

    loadgen_target target = {
        .mode = mode_names[opt.mode],
        .url = opt.target,
        .path = MODEL_INFER,
        .channels = opt.channels,
        .request_body_bytes = GRPC_SLICE_LENGTH(variants[0].packed),
    };
    result = loadgen_report("grpc_load_client", &opt.load, &target, results,
                            opt.load.threads);

out:
    for (int i = 0; i < MAX_CHANNELS; i++)
        if (channels[i])
            grpc_channel_destroy(channels[i]);
    for (int v = 0; variants && v < n_variants; v++)
        variant_free(&variants[v]);
    loadgen_results_free(results, opt.load.threads);
    free(variants);
    free(workers);
    free(slots);
    grpc_shutdown();
    return result;
}
