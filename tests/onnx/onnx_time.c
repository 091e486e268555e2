/*
 * Times Osprey's ONNX runtime on one model in-process, for
 * tests/bench/onnx_bench.py (which times onnxruntime the same way):
 *
 *   onnx_time MODEL.onnx SECONDS NAME:DTYPE:D0xD1x...[:MAX] [...]
 *
 * Inputs are filled with a fixed pseudo-random pattern (FP32 in [-1, 1),
 * INT64/INT32 in [0, MAX) with MAX 100 by default, BOOL alternating). After a warm-up run it runs
 * the model back to back for SECONDS and prints one line of JSON:
 * {"runs": N, "median_ms": m, "p90_ms": p, "mean_ms": a, "median_cpu_ms":
 * c, "arena_bytes": b}, where c is the process's CPU time per run (all
 * threads; on a shared machine steadier than latency at one thread).
 * Threads: OpenBLAS's (OPENBLAS_NUM_THREADS), as the server's. With
 * OSPREY_ONNX_PROFILE set, the time per op type goes to stderr (per node
 * with OSPREY_ONNX_PROFILE=nodes).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "host_memory.h"
#include "onnx_runtime.h"

#define MAX_INPUTS 16
#define MAX_OUTPUTS 16

typedef struct outputs {
    void *data[MAX_OUTPUTS];
    size_t bytes[MAX_OUTPUTS];
} outputs;

/* Keeps one buffer per output across runs, as a server's pool would. */
static osp_error *keep_output(void *ctx, size_t index, osp_datatype dtype,
                              const osp_shape *shape, size_t byte_size,
                              void **data) {
    outputs *o = ctx;
    (void)dtype;
    (void)shape;
    if (index >= MAX_OUTPUTS)
        return NULL;
    if (o->bytes[index] < byte_size) {
        host_free_aligned(o->data[index], o->bytes[index]);
        o->data[index] = host_alloc_aligned(byte_size);
        o->bytes[index] = o->data[index] ? byte_size : 0;
        if (!o->data[index])
            return osp_error_out_of_memory();
    }
    *data = o->data[index];
    return NULL;
}

static double clock_ms(clockid_t clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static double now_ms(void) {
    return clock_ms(CLOCK_MONOTONIC);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* "name:FP32:1x3x224x224" into io (data allocated and filled). */
static int parse_input(const char *spec, onnx_io *io, char **name) {
    char *copy = strdup(spec);
    char *dt = copy ? strchr(copy, ':') : NULL;
    char *dims = dt ? strchr(dt + 1, ':') : NULL;
    if (!dims)
        return -1;
    *dt++ = '\0';
    *dims++ = '\0';
    *name = copy;
    char *bound = strchr(dims, ':');
    uint32_t modulus = 100;
    if (bound) {
        *bound++ = '\0';
        modulus = (uint32_t)strtoul(bound, NULL, 10);
        if (modulus == 0)
            modulus = 1;
    }
    io->dtype = osp_datatype_from_wire_name(dt);
    io->shape.rank = 0;
    for (char *p = dims; *p && io->shape.rank < OSP_MAX_DIMS;) {
        io->shape.dims[io->shape.rank++] = strtoll(p, &p, 10);
        if (*p == 'x')
            p++;
    }
    int64_t n = 1;
    for (int d = 0; d < io->shape.rank; d++)
        n *= io->shape.dims[d];
    size_t es = osp_datatype_byte_size(io->dtype);
    if (!es)
        return -1;
    io->byte_size = (size_t)n * es;
    void *data = host_alloc_aligned(io->byte_size);
    if (!data)
        return -1;
    uint32_t state = 12345;
    for (int64_t i = 0; i < n; i++) {
        state = state * 1664525u + 1013904223u;
        switch (io->dtype) {
        case OSP_TYPE_FP32:
            ((float *)data)[i] = (float)(state >> 8) / (1 << 23) - 1.0f;
            break;
        case OSP_TYPE_INT64:
            ((int64_t *)data)[i] = (state >> 8) % modulus;
            break;
        case OSP_TYPE_INT32:
            ((int32_t *)data)[i] = (int32_t)((state >> 8) % modulus);
            break;
        case OSP_TYPE_BOOL:
            ((uint8_t *)data)[i] = (uint8_t)(i & 1);
            break;
        default:
            memset((char *)data + i * es, 0, es);
        }
    }
    io->data = data;
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s MODEL SECONDS NAME:DTYPE:DIMS...\n",
                argv[0]);
        return 2;
    }
    double seconds = atof(argv[2]);
    onnx_model *file = NULL;
    onnx_rt_model *rt = NULL;
    onnx_session *session = NULL;
    osp_stream *stream = NULL;
    osp_error *err = onnx_model_load_file(argv[1], NULL, &file);
    if (!err)
        err = onnx_rt_model_new(file, NULL, &rt);
    if (!err)
        err = osp_stream_new(osp_device_cpu(), &stream);
    if (!err)
        err = onnx_session_new(rt, osp_device_cpu(), stream, &session);
    if (err) {
        fprintf(stderr, "%s\n", osp_error_message(err));
        return 1;
    }
    const onnx_graph *g = onnx_rt_model_graph(rt);
    onnx_io inputs[MAX_INPUTS];
    char *names[MAX_INPUTS];
    size_t n = (size_t)(argc - 3);
    if (n != g->n_inputs || n > MAX_INPUTS) {
        fprintf(stderr, "the model has %zu inputs\n", g->n_inputs);
        return 2;
    }
    for (size_t i = 0; i < n; i++) {
        onnx_io io = {0};
        char *name;
        if (parse_input(argv[3 + i], &io, &name) != 0) {
            fprintf(stderr, "bad input spec %s\n", argv[3 + i]);
            return 2;
        }
        size_t k = 0;
        while (k < g->n_inputs && strcmp(g->inputs[k].name, name) != 0)
            k++;
        if (k == g->n_inputs) {
            fprintf(stderr, "no input %s\n", name);
            return 2;
        }
        inputs[k] = io;
        names[i] = name;
    }
    const char *profile = getenv("OSPREY_ONNX_PROFILE");
    if (profile)
        onnx_session_set_profiling(session, strcmp(profile, "nodes") == 0
                                                ? ONNX_PROFILE_NODES
                                                : ONNX_PROFILE_OPS);
    outputs outs = {0};
    size_t cap = 1 << 20, runs = 0;
    double *times = malloc(cap * sizeof *times);
    double *cpu = malloc(cap * sizeof *cpu);
    err = onnx_session_run(session, inputs, n, keep_output, &outs);
    double start = now_ms();
    while (!err && runs < cap && now_ms() - start < seconds * 1e3) {
        double t0 = now_ms(), c0 = clock_ms(CLOCK_PROCESS_CPUTIME_ID);
        err = onnx_session_run(session, inputs, n, keep_output, &outs);
        times[runs] = now_ms() - t0;
        cpu[runs++] = clock_ms(CLOCK_PROCESS_CPUTIME_ID) - c0;
    }
    if (err) {
        fprintf(stderr, "%s\n", osp_error_message(err));
        return 1;
    }
    double total = 0;
    for (size_t i = 0; i < runs; i++)
        total += times[i];
    qsort(times, runs, sizeof *times, cmp_double);
    qsort(cpu, runs, sizeof *cpu, cmp_double);
    printf("{\"runs\": %zu, \"median_ms\": %.4f, \"p90_ms\": %.4f, "
           "\"mean_ms\": %.4f, \"median_cpu_ms\": %.4f, "
           "\"arena_bytes\": %zu}\n",
           runs, times[runs / 2], times[runs * 9 / 10], total / runs,
           cpu[runs / 2], onnx_session_arena_bytes(session));
    if (profile)
        onnx_session_profile_report(session, stderr);
    for (size_t i = 0; i < n; i++) {
        free(names[i]);
        host_free_aligned((void *)inputs[i].data, inputs[i].byte_size);
    }
    for (size_t k = 0; k < MAX_OUTPUTS; k++)
        host_free_aligned(outs.data[k], outs.bytes[k]);
    free(times);
    free(cpu);
    onnx_session_free(session);
    osp_stream_free(stream);
    onnx_rt_model_free(rt);
    return 0;
}
