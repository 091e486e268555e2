/*
 * The CUDA device's conv through cuBLAS (the GEMM route), for the
 * precisions its own kernels lack: TF32 (allow_tf32) and FP16 operands
 * (w_fp16; osprey/tensor_ops.h). The route works a chunk at a time, in
 * the caller's workspace (at most OSP_CONV_WORKSPACE_MAX_BYTES is ever
 * asked for): as many images as their im2col matrices fit, or, when one
 * image's does not, as many of its output positions as fit. Per chunk
 * the im2col kernel (kernels_conv.cu) lays the matrix out (rounded to
 * FP16 under w_fp16), then cuBLAS multiplies each group's weights by it
 * straight into y, FP32 (FP32 accumulation either way, TF32 or FP16
 * operands): per group over the chunk's images, or per image over the
 * groups, whichever makes fewer calls. The epilogue kernel then runs
 * once over y. The 1x1 convs of stride 1 without padding under TF32 keep
 * cuda_ops_nn.c's pointwise route, which needs no im2col.
 */
#include <limits.h>

#include "cuda_check.h"
#include "cuda_internal.h"
#include "kernels_nn.h"

/* How conv a's GEMM route goes through its batch: nb images of np
 * output positions per chunk, and the sizes the calls need. */
typedef struct conv_chunks {
    int64_t cg, mg, rows, positions; /* rows: a group's channels x taps */
    int64_t nb, np;
    size_t elem; /* bytes of an im2col element */
} conv_chunks;

/* Fills *c for a within its workspace; false when the route cannot take
 * it: no room for a single position's column, or a size past cuBLAS's
 * ints. */
static bool chunks_of(const osp_conv_args *a, bool fp16, conv_chunks *c) {
    int64_t taps = 1, positions = 1;
    for (int d = 0; d < a->spatial_rank; d++) {
        taps *= a->kernel[d];
        positions *= a->out_dims[d];
    }
    c->cg = a->in_channels / a->group;
    c->mg = a->out_channels / a->group;
    c->rows = c->cg * taps;
    c->positions = positions;
    c->elem = fp16 ? 2 : 4;
    if (a->workspace == NULL || c->rows > INT_MAX || c->mg > INT_MAX ||
        positions > INT_MAX || a->group > INT_MAX || a->batch > INT_MAX)
        return false;
    size_t column = (size_t)(a->group * c->rows) * c->elem;
    size_t image = column * (size_t)positions;
    if (column > a->workspace_bytes)
        return false;
    if (image <= a->workspace_bytes) {
        size_t fit = a->workspace_bytes / image;
        c->nb = (int64_t)fit < a->batch ? (int64_t)fit : a->batch;
        c->np = positions;
    } else {
        c->nb = 1;
        c->np = (int64_t)(a->workspace_bytes / column);
    }
    return true;
}

/* The GEMMs of one chunk (images b0.., positions p0..) whose im2col
 * matrix is in col: y_b,g[mg, p0 + np) = w_g[mg, rows] col_b,g[rows,
 * np], into y (row stride: all the positions). */
static osp_error *chunk_gemms(cuda_stream *s, const osp_conv_args *a,
                              const conv_chunks *c, int64_t b0, int64_t nb,
                              int64_t p0, int64_t np, const void *col) {
    bool fp16 = a->w_fp16 != NULL;
    const char *w = fp16 ? (const char *)a->w_fp16 : (const char *)a->w;
    int64_t group = a->group, P = c->positions;
    int64_t w_group = c->mg * c->rows, col_group = c->rows * np;
    osp_gemm_args g = {.m = c->mg,
                       .n = np,
                       .k = c->rows,
                       .alpha = 1.0f,
                       .beta = 0.0f,
                       .dtype = fp16 ? OSP_TYPE_FP16 : OSP_TYPE_FP32,
                       .lda = c->rows,
                       .ldb = np,
                       .ldc = P,
                       .allow_tf32 = !fp16 && a->allow_tf32,
                       .c_dtype = OSP_TYPE_FP32};
    osp_error *err = NULL;
    if (nb <= group) {
        /* per image, one call over the groups */
        for (int64_t i = 0; i < nb && err == NULL; i++) {
            g.a = w;
            g.b = (const char *)col + (size_t)(i * group * col_group) * c->elem;
            g.c = a->y + ((b0 + i) * a->out_channels) * P + p0;
            err =
                cuda_gemm_batched(s, &g, group, w_group, col_group, c->mg * P);
        }
        return err;
    }
    /* per group, one call over the images */
    for (int64_t gi = 0; gi < group && err == NULL; gi++) {
        g.a = w + (size_t)(gi * w_group) * c->elem;
        g.b = (const char *)col + (size_t)(gi * col_group) * c->elem;
        g.c = a->y + (b0 * a->out_channels + gi * c->mg) * P + p0;
        err = cuda_gemm_batched(s, &g, nb, 0, group * col_group,
                                a->out_channels * P);
    }
    return err;
}

osp_error *cuda_conv_gemm(cuda_stream *s, const osp_conv_args *a, bool *done) {
    bool fp16 = a->w_fp16 != NULL;
    conv_chunks c;
    *done = chunks_of(a, fp16, &c);
    if (!*done)
        return NULL;
    osp_error *err = NULL;
    for (int64_t b0 = 0; b0 < a->batch && err == NULL; b0 += c.nb) {
        int64_t nb = a->batch - b0 < c.nb ? a->batch - b0 : c.nb;
        for (int64_t p0 = 0; p0 < c.positions && err == NULL; p0 += c.np) {
            int64_t np = c.positions - p0 < c.np ? c.positions - p0 : c.np;
            err = OSP_CUDA_CHECK(cuda_launch_conv_im2col(
                s->stream, a, b0, nb, p0, np, fp16, a->workspace));
            if (err == NULL)
                err = chunk_gemms(s, a, &c, b0, nb, p0, np, a->workspace);
        }
    }
    if (err != NULL || (a->bias == NULL && a->residual == NULL &&
                        a->act == OSP_UNARY_IDENTITY))
        return err;
    return OSP_CUDA_CHECK(cuda_launch_conv_epilogue(s->stream, a));
}
