/*
 * Runs ONNX backend test cases (a folder with model.onnx and
 * test_data_set_N/{input,output}_K.pb, the layout of onnx's
 * backend/test/data) through Osprey's ONNX runtime on the CPU device (or,
 * in onnx_conformance_fakecuda, a CUDA device: the kernels' own code on
 * the fake CUDA runtime) and compares the outputs with
 * |got - want| <= atol + rtol * |want| (rtol 1e-3, atol 1e-5; integers and
 * booleans exactly; NaN equals NaN).
 *
 *   onnx_conformance [--expect FILE] [--quiet] [--rtol R] [--atol A]
 *                    [--device cpu|cuda] CASE_DIR...
 *
 * Prints one line per case: PASS, FAIL (wrong numbers or a run error) or
 * UNSUPPORTED (the runtime refused the model at load as UNSUPPORTED),
 * then "N passed, N failed, N unsupported". With --expect, FILE lists
 * case names (one per line, '#' comments) that must pass: the exit
 * status is 1 when one of them does not, else 0.
 *
 *   onnx_conformance --list-ops
 *
 * prints the registered ops, one "domain op_type since until" per line
 * (until 0: no upper bound), for the documentation.
 */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "host_memory.h"
#include "onnx_ops.h"
#include "onnx_runtime.h"
#include "osprey/device.h"
#include "osprey/device_impl.h"
#ifdef OSPREY_CUDA_LINKED
#include "cuda_provider.h"
#endif

static double RTOL = 1e-3, ATOL = 1e-5;
static osp_device *DEVICE; /* where the cases run */
#define MAX_IO 64

/* A run's outputs: host memory, and on a device other than the CPU the
 * device buffers the run writes (copied into data after the run). */
typedef struct host_outputs {
    void *data[MAX_IO];
    size_t bytes[MAX_IO];
    osp_datatype dtype[MAX_IO];
    osp_shape shape[MAX_IO];
    osp_buffer *device[MAX_IO];
} host_outputs;

static bool on_host(void) {
    return DEVICE == osp_device_cpu();
}

static osp_error *alloc_host(void *ctx, size_t index, osp_datatype dtype,
                             const osp_shape *shape, size_t byte_size,
                             void **data) {
    host_outputs *h = ctx;
    if (index >= MAX_IO)
        return osp_error_new(OSP_ERROR_INVALID_ARG, "too many outputs");
    h->data[index] = host_alloc_aligned(byte_size);
    if (!h->data[index])
        return osp_error_out_of_memory();
    h->bytes[index] = byte_size;
    h->dtype[index] = dtype;
    h->shape[index] = *shape;
    *data = h->data[index];
    if (on_host() || byte_size == 0)
        return NULL;
    osp_error *err = osp_device_alloc(DEVICE, byte_size, &h->device[index]);
    if (!err)
        *data = h->device[index]->data;
    return err;
}

/* Inputs as the session's device wants them: on a device other than the
 * CPU, copies in device buffers (bufs[i], NULL for empty tensors). */
static osp_error *inputs_to_device(osp_stream *stream, onnx_io *io,
                                   size_t n, osp_buffer **bufs) {
    for (size_t i = 0; i < n && !on_host(); i++) {
        if (io[i].byte_size == 0)
            continue;
        osp_error *err = osp_device_alloc(DEVICE, io[i].byte_size, &bufs[i]);
        if (!err)
            err = osp_memcpy_async(stream, bufs[i]->data, io[i].data,
                                   io[i].byte_size, OSP_COPY_HOST_TO_DEVICE);
        if (err)
            return err;
        io[i].data = bufs[i]->data;
    }
    return NULL;
}

/* Waits for the run and brings device outputs back into h->data. */
static osp_error *outputs_to_host(osp_stream *stream, host_outputs *h) {
    osp_error *err = NULL;
    for (size_t k = 0; k < MAX_IO && !err; k++)
        if (h->device[k])
            err = osp_memcpy_async(stream, h->data[k], h->device[k]->data,
                                   h->bytes[k], OSP_COPY_DEVICE_TO_HOST);
    osp_error *sync = osp_stream_synchronize(stream);
    if (!err)
        err = sync;
    else
        osp_error_free(sync);
    return err;
}

static double element(const void *p, osp_datatype dt, size_t i) {
    switch (dt) {
    case OSP_TYPE_FP32:
        return ((const float *)p)[i];
    case OSP_TYPE_FP64:
        return ((const double *)p)[i];
    case OSP_TYPE_INT64:
        return (double)((const int64_t *)p)[i];
    case OSP_TYPE_INT32:
        return ((const int32_t *)p)[i];
    case OSP_TYPE_INT16:
        return ((const int16_t *)p)[i];
    case OSP_TYPE_INT8:
        return ((const int8_t *)p)[i];
    case OSP_TYPE_UINT8:
    case OSP_TYPE_BOOL:
        return ((const uint8_t *)p)[i];
    case OSP_TYPE_UINT16:
        return ((const uint16_t *)p)[i];
    case OSP_TYPE_UINT32:
        return ((const uint32_t *)p)[i];
    case OSP_TYPE_UINT64:
        return (double)((const uint64_t *)p)[i];
    default:
        return NAN;
    }
}

/* Compares a STRING output (the runtime's references, got) with the
 * expected wire form; writes why into msg when it differs. */
static bool same_strings(const onnx_tensor *want, const void *got, char *msg,
                         size_t cap) {
    int64_t n = onnx_shape_count(&want->shape);
    onnx_string *w = malloc((size_t)(n ? n : 1) * sizeof *w);
    const onnx_string *g = got;
    osp_error *err = w ? onnx_strings_from_wire(want->data, want->byte_size,
                                                n, w, "expected output")
                       : osp_error_out_of_memory();
    bool same = err == NULL;
    if (err)
        snprintf(msg, cap, "%s", osp_error_message(err));
    for (int64_t i = 0; same && i < n; i++)
        if (w[i].len != g[i].len ||
            (w[i].len && memcmp(w[i].data, g[i].data, w[i].len) != 0)) {
            snprintf(msg, cap, "element %lld: got '%.*s', want '%.*s'",
                     (long long)i, (int)(g[i].len > 64 ? 64 : g[i].len),
                     g[i].data, (int)(w[i].len > 64 ? 64 : w[i].len),
                     w[i].data);
            same = false;
        }
    osp_error_free(err);
    free(w);
    return same;
}

/* Compares one output; writes why into msg when it differs. */
static bool same_tensor(const onnx_tensor *want, osp_datatype dt,
                        const osp_shape *shape, const void *got, char *msg,
                        size_t cap) {
    char a[128], b[128];
    if (dt != want->dtype || !osp_shape_equal(shape, &want->shape)) {
        snprintf(msg, cap, "got %s %s, want %s %s", osp_datatype_wire_name(dt),
                 osp_shape_format(shape, a, sizeof a),
                 osp_datatype_wire_name(want->dtype),
                 osp_shape_format(&want->shape, b, sizeof b));
        return false;
    }
    if (dt == OSP_TYPE_BYTES)
        return same_strings(want, got, msg, cap);
    size_t es = osp_datatype_byte_size(dt);
    if (es == 0) {
        snprintf(msg, cap, "cannot compare %s", osp_datatype_wire_name(dt));
        return false;
    }
    size_t n = want->byte_size / es;
    bool exact = dt != OSP_TYPE_FP32 && dt != OSP_TYPE_FP64 &&
                 dt != OSP_TYPE_FP16 && dt != OSP_TYPE_BF16;
    if (dt == OSP_TYPE_FP16 || dt == OSP_TYPE_BF16)
        return memcmp(want->data, got, want->byte_size) == 0 ||
               (snprintf(msg, cap, "half-precision bytes differ"), false);
    for (size_t i = 0; i < n; i++) {
        double w = element(want->data, dt, i), g = element(got, dt, i);
        if (isnan(w) && isnan(g))
            continue;
        bool ok = exact ? w == g
                        : (w == g || fabs(g - w) <= ATOL + RTOL * fabs(w));
        if (!ok) {
            snprintf(msg, cap, "element %zu: got %.9g, want %.9g", i, g, w);
            return false;
        }
    }
    return true;
}

typedef enum outcome { PASS, FAIL, UNSUPPORTED } outcome;

/* A STRING input as the runtime takes it: references (*refs, caller
 * frees) into the wire bytes the test file held (t keeps them). */
static osp_error *strings_input(const onnx_tensor *t, onnx_io *io,
                                onnx_string **refs) {
    int64_t n = onnx_shape_count(&t->shape);
    *refs = malloc((size_t)(n ? n : 1) * sizeof **refs);
    if (!*refs)
        return osp_error_out_of_memory();
    osp_error *err =
        onnx_strings_from_wire(t->data, t->byte_size, n, *refs, "input");
    if (err)
        return err;
    io->data = io->host_data = *refs;
    io->byte_size = (size_t)n * ONNX_STRING_BYTES;
    return NULL;
}

/* The device named by --device: "cpu", or "cuda" (GPU 0) where a CUDA
 * provider is linked in. NULL (and a line on stderr) when there is none. */
static osp_device *open_device(const char *name) {
    if (strcmp(name, "cpu") == 0)
        return osp_device_cpu();
#ifdef OSPREY_CUDA_LINKED
    if (strcmp(name, "cuda") == 0) {
        static const osp_device_provider *providers[] = {
            &osp_cuda_device_provider};
        osp_device_options opts;
        osp_device_options_init(&opts);
        opts.providers = providers;
        opts.n_providers = 1;
        osp_device *dev = NULL;
        osp_error *err = osp_devices_init(&opts);
        if (!err)
            err = osp_device_cuda_get(0, &dev);
        if (err) {
            fprintf(stderr, "device cuda: %s\n", osp_error_message(err));
            osp_error_free(err);
            return NULL;
        }
        return dev;
    }
#endif
    fprintf(stderr, "no device '%s' in this build\n", name);
    return NULL;
}

/* Runs every test_data_set_* of one case. */
static outcome run_case(const char *dir, char *msg, size_t cap) {
    char path[4096];
    onnx_model *file = NULL;
    onnx_rt_model *rt = NULL;
    onnx_session *session = NULL;
    osp_stream *stream = NULL;
    outcome result = FAIL;
    snprintf(path, sizeof path, "%s/model.onnx", dir);
    osp_error *err = onnx_model_load_file(path, NULL, &file);
    if (!err)
        err = onnx_rt_model_new(file, NULL, &rt);
    if (!err)
        err = osp_stream_new(DEVICE, &stream);
    if (!err)
        err = onnx_session_new(rt, DEVICE, stream, &session);
    if (err) {
        result = osp_error_get_code(err) == OSP_ERROR_UNSUPPORTED ? UNSUPPORTED
                                                                  : FAIL;
        snprintf(msg, cap, "load: %s", osp_error_message(err));
        osp_error_free(err);
        goto out;
    }
    result = PASS;
    for (int set = 0; result == PASS; set++) {
        char set_dir[3800];
        snprintf(set_dir, sizeof set_dir, "%s/test_data_set_%d", dir, set);
        struct stat st;
        if (stat(set_dir, &st) != 0)
            break;
        onnx_tensor inputs[MAX_IO] = {0};
        onnx_string *string_in[MAX_IO] = {0}; /* STRING inputs' references */
        onnx_io io[MAX_IO];
        size_t n_in = 0;
        const onnx_graph *g = onnx_rt_model_graph(rt);
        for (; n_in < g->n_inputs && n_in < MAX_IO; n_in++) {
            char *name = NULL;
            snprintf(path, sizeof path, "%s/input_%zu.pb", set_dir, n_in);
            if ((err = onnx_tensor_load_pb_file(path, &inputs[n_in], &name)))
                break;
            free(name);
            io[n_in] = (onnx_io){.dtype = inputs[n_in].dtype,
                                 .shape = inputs[n_in].shape,
                                 .data = inputs[n_in].data,
                                 .byte_size = inputs[n_in].byte_size,
                                 .host_data = inputs[n_in].data};
            if (inputs[n_in].dtype == OSP_TYPE_BYTES &&
                (err = strings_input(&inputs[n_in], &io[n_in],
                                     &string_in[n_in])))
                break;
        }
        host_outputs outs = {0};
        osp_buffer *in_bufs[MAX_IO] = {0};
        if (!err)
            err = inputs_to_device(stream, io, n_in, in_bufs);
        if (!err)
            err = onnx_session_run(session, io, n_in, alloc_host, &outs);
        if (!err)
            err = outputs_to_host(stream, &outs);
        if (err) {
            snprintf(msg, cap, "set %d: %s", set, osp_error_message(err));
            osp_error_free(err);
            err = NULL;
            result = FAIL;
        }
        for (size_t k = 0; result == PASS && k < g->n_outputs; k++) {
            onnx_tensor want = {0};
            char *name = NULL;
            snprintf(path, sizeof path, "%s/output_%zu.pb", set_dir, k);
            if ((err = onnx_tensor_load_pb_file(path, &want, &name))) {
                snprintf(msg, cap, "%s", osp_error_message(err));
                osp_error_free(err);
                err = NULL;
                result = FAIL;
                break;
            }
            free(name);
            char why[512];
            if (!outs.data[k] ||
                !same_tensor(&want, outs.dtype[k], &outs.shape[k],
                             outs.data[k], why, sizeof why)) {
                snprintf(msg, cap, "set %d output %zu: %s", set, k,
                         outs.data[k] ? why : "not produced");
                result = FAIL;
            }
            onnx_tensor_clear(&want);
        }
        osp_error_free(osp_stream_synchronize(stream)); /* after a failure */
        for (size_t k = 0; k < MAX_IO; k++) {
            host_free_aligned(outs.data[k], outs.bytes[k]);
            osp_buffer_free(outs.device[k]);
            osp_buffer_free(in_bufs[k]);
        }
        for (size_t i = 0; i < MAX_IO; i++)
            free(string_in[i]);
        for (size_t i = 0; i < n_in; i++)
            onnx_tensor_clear(&inputs[i]);
    }
out:
    onnx_session_free(session);
    osp_stream_free(stream);
    onnx_rt_model_free(rt);
    return result;
}

static const char *base_name(const char *dir) {
    size_t len = strlen(dir);
    while (len > 1 && dir[len - 1] == '/')
        len--;
    static char name[1024];
    size_t start = len;
    while (start > 0 && dir[start - 1] != '/')
        start--;
    snprintf(name, sizeof name, "%.*s", (int)(len - start), dir + start);
    return name;
}

/* Whether `name` is listed in the expect file's text. */
static bool listed(const char *text, const char *name) {
    size_t n = strlen(name);
    for (const char *p = text; p && *p;) {
        const char *end = strchr(p, '\n');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        while (len && (p[len - 1] == ' ' || p[len - 1] == '\r'))
            len--;
        if (len == n && strncmp(p, name, n) == 0)
            return true;
        p = end ? end + 1 : NULL;
    }
    return false;
}

static char *read_all(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = size >= 0 ? malloc((size_t)size + 1) : NULL;
    if (text && fread(text, 1, (size_t)size, f) == (size_t)size)
        text[size] = '\0';
    else {
        free(text);
        text = NULL;
    }
    fclose(f);
    return text;
}

static void print_op(const onnx_op *op, void *ctx) {
    (void)ctx;
    printf("%s %s %lld %lld\n", op->domain[0] ? op->domain : "ai.onnx",
           op->op_type, (long long)op->since, (long long)op->until);
}

int main(int argc, char **argv) {
    if (argc == 2 && strcmp(argv[1], "--list-ops") == 0) {
        onnx_op_each(print_op, NULL);
        return 0;
    }
    const char *expect_path = NULL, *device = "cpu";
    bool quiet = false;
    int first = 1;
    for (; first < argc && strncmp(argv[first], "--", 2) == 0; first++) {
        if (strcmp(argv[first], "--expect") == 0 && first + 1 < argc)
            expect_path = argv[++first];
        else if (strcmp(argv[first], "--quiet") == 0)
            quiet = true;
        else if (strcmp(argv[first], "--rtol") == 0 && first + 1 < argc)
            RTOL = atof(argv[++first]);
        else if (strcmp(argv[first], "--atol") == 0 && first + 1 < argc)
            ATOL = atof(argv[++first]);
        else if (strcmp(argv[first], "--device") == 0 && first + 1 < argc)
            device = argv[++first];
    }
    if (!(DEVICE = open_device(device)))
        return 2;
    char *expect = expect_path ? read_all(expect_path) : NULL;
    if (expect_path && !expect) {
        fprintf(stderr, "cannot read %s\n", expect_path);
        return 2;
    }
    int counts[3] = {0}, regressions = 0;
    for (int i = first; i < argc; i++) {
        char msg[1024] = "";
        outcome r = run_case(argv[i], msg, sizeof msg);
        counts[r]++;
        const char *name = base_name(argv[i]);
        bool expected = expect && listed(expect, name);
        if (expected && r != PASS) {
            regressions++;
            printf("REGRESSION %s: %s\n", name, msg);
        } else if (!quiet || r == FAIL) {
            printf("%s %s%s%s\n",
                   r == PASS ? "PASS" : r == FAIL ? "FAIL" : "UNSUPPORTED",
                   name, msg[0] ? ": " : "", msg);
        }
    }
    printf("%d passed, %d failed, %d unsupported\n", counts[PASS],
           counts[FAIL], counts[UNSUPPORTED]);
    if (expect_path)
        printf("%d expected passes regressed\n", regressions);
    free(expect);
    if (DEVICE != osp_device_cpu())
        osp_devices_shutdown();
    return regressions ? 1 : 0;
}
