/*
 * The CPU device's data-movement tensor ops: copy_strided, gather, fill,
 * pad. They move bytes and never look at values, so each works on element
 * sizes (1, 2, 4, 8, 16 bytes) rather than dtypes.
 */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "cpu_ops.h"
#include "cpu_ops_nd.h"
#include "cpu_threads.h"
#include "osprey/error.h"
#include "pad_rules.h"

/* A 16-byte element, copied as one value. */
typedef struct elem16 {
    uint64_t lo, hi;
} elem16;

/* Copies one element of es bytes (1, 2, 4, 8 or 16); a constant-size
 * memcpy per case, so each is a plain load and store. */
static inline void copy_elem(char *dst, const char *src, size_t es) {
    switch (es) {
    case 1:
        *dst = *src;
        break;
    case 2:
        memcpy(dst, src, 2);
        break;
    case 4:
        memcpy(dst, src, 4);
        break;
    case 8:
        memcpy(dst, src, 8);
        break;
    default:
        memcpy(dst, src, 16);
        break;
    }
}

/* n elements of es bytes (1, 2, 4 or 8), each the first es bytes of
 * value. */
static void fill_elements(void *dst, size_t n, size_t es,
                          const uint8_t *value) {
    bool same = true;
    for (size_t i = 1; i < es; i++)
        same = same && value[i] == value[0];
    if (same) {
        memset(dst, value[0], n * es);
        return;
    }
    switch (es) {
    case 2: {
        uint16_t v, *d = dst;
        memcpy(&v, value, 2);
        CPU_LOOP((int64_t)n, i, d[i] = v);
        break;
    }
    case 4: {
        uint32_t v, *d = dst;
        memcpy(&v, value, 4);
        CPU_LOOP((int64_t)n, i, d[i] = v);
        break;
    }
    default: {
        uint64_t v, *d = dst;
        memcpy(&v, value, 8);
        CPU_LOOP((int64_t)n, i, d[i] = v);
        break;
    }
    }
}

/* ---- copy_strided ------------------------------------------------------ */

/* Rows at least this long (in bytes) and contiguous on both sides are
 * copied with memcpy; shorter ones with an element loop, which beats the
 * call for a few elements. */
#define MEMCPY_MIN_BYTES 64

/* dst[i * ds] = src[i * ss] for i < n elements of type T (ss may be 0 or
 * negative; src and dst do not overlap). */
#define COPY_ROW(T)                                                            \
    static void copy_row_##T(int64_t n, const T *restrict src, int64_t ss,     \
                             T *restrict dst, int64_t ds) {                    \
        if (ss == 1 && ds == 1) {                                              \
            CPU_LOOP(n, i, dst[i] = src[i]);                                   \
        } else if (ss == 0 && ds == 1) {                                       \
            T v = src[0];                                                      \
            CPU_LOOP(n, i, dst[i] = v);                                        \
        } else if (ss == -1 && ds == 1) {                                      \
            CPU_LOOP(n, i, dst[i] = src[-i]);                                  \
        } else {                                                               \
            for (int64_t i = 0; i < n; i++)                                    \
                dst[i * ds] = src[i * ss];                                     \
        }                                                                      \
    }
COPY_ROW(uint8_t)
COPY_ROW(uint16_t)
COPY_ROW(uint32_t)
COPY_ROW(uint64_t)
COPY_ROW(elem16)
#undef COPY_ROW

static void copy_row(size_t es, int64_t n, const char *src, int64_t ss,
                     char *dst, int64_t ds) {
    if (ss == 1 && ds == 1 && (size_t)n * es >= MEMCPY_MIN_BYTES) {
        memcpy(dst, src, (size_t)n * es);
        return;
    }
    switch (es) {
    case 1:
        copy_row_uint8_t(n, (const uint8_t *)src, ss, (uint8_t *)dst, ds);
        break;
    case 2:
        copy_row_uint16_t(n, (const uint16_t *)src, ss, (uint16_t *)dst, ds);
        break;
    case 4:
        copy_row_uint32_t(n, (const uint32_t *)src, ss, (uint32_t *)dst, ds);
        break;
    case 8:
        copy_row_uint64_t(n, (const uint64_t *)src, ss, (uint64_t *)dst, ds);
        break;
    default:
        copy_row_elem16(n, (const elem16 *)src, ss, (elem16 *)dst, ds);
        break;
    }
}

/* Tile side of the blocked transpose: a tile of each side stays in L1. */
#define TILE 32

/* The 2-d copy dst[i * d_i + j * d_j] = src[i * s_i + j * s_j] for
 * i < n_i, j < n_j, in TILE x TILE blocks, so that neither side is walked
 * with a large stride across a whole row: the transpose case, where src
 * is contiguous along j and dst along i. */
static void copy_tiled(size_t es, int64_t n_i, int64_t n_j, const char *src,
                       int64_t s_i, int64_t s_j, char *dst, int64_t d_i,
                       int64_t d_j) {
    for (int64_t i0 = 0; i0 < n_i; i0 += TILE) {
        int64_t i1 = i0 + TILE < n_i ? i0 + TILE : n_i;
        for (int64_t j0 = 0; j0 < n_j; j0 += TILE) {
            int64_t j1 = j0 + TILE < n_j ? j0 + TILE : n_j;
            for (int64_t j = j0; j < j1; j++)
                copy_row(es, i1 - i0, src + (i0 * s_i + j * s_j) * (int64_t)es,
                         s_i, dst + (i0 * d_i + j * d_j) * (int64_t)es, d_i);
        }
    }
}

/* A transposing copy (src strided along the innermost dimension, where
 * dst is contiguous, and contiguous along another dimension p): every
 * dimension but p and the innermost is walked with a counter (`outer`,
 * with an innermost dimension of 1), and each (p, innermost) plane is
 * copied in tiles, a band of TILE rows of the innermost dimension per
 * unit of work. */
typedef struct transpose_job {
    const cpu_nd *s;
    cpu_nd outer;
    int p;
    int64_t bands; /* per plane */
    size_t es;
    const char *src;
    char *dst;
} transpose_job;

static void transpose_range(void *arg, int64_t lo, int64_t hi) {
    const transpose_job *job = arg;
    const cpu_nd *s = job->s;
    int inner = s->rank - 1, p = job->p;
    int64_t es = (int64_t)job->es, n_i = s->dims[inner];
    int64_t idx[OSP_MAX_DIMS] = {0}, off[2] = {0, 0};
    int64_t plane = lo / job->bands;
    cpu_nd_seek(&job->outer, plane, idx, off);
    for (int64_t u = lo; u < hi; u++) {
        if (u / job->bands != plane) {
            plane = u / job->bands;
            cpu_nd_next_row(&job->outer, idx, off);
        }
        int64_t i0 = u % job->bands * TILE;
        int64_t len = n_i - i0 < TILE ? n_i - i0 : TILE;
        copy_tiled(job->es, len, s->dims[p],
                   job->src + (off[0] + i0 * s->strides[0][inner]) * es,
                   s->strides[0][inner], s->strides[0][p],
                   job->dst + (off[1] + i0 * s->strides[1][inner]) * es,
                   s->strides[1][inner], s->strides[1][p]);
    }
}

/* The transposing copy of s on up to `threads` threads; false when s is
 * not such a copy. */
static bool copy_transposed(const cpu_nd *s, size_t es, const char *src,
                            char *dst, int threads) {
    int inner = s->rank - 1;
    if (s->rank < 2 || s->strides[1][inner] != 1 || s->strides[0][inner] == 1)
        return false;
    int p = -1;
    for (int d = 0; d < inner; d++)
        if (s->strides[0][d] == 1)
            p = d;
    if (p < 0 || s->dims[inner] < 8 || s->dims[p] < 8)
        return false;
    transpose_job job = {.s = s, .p = p, .es = es, .src = src, .dst = dst};
    job.outer = (cpu_nd){.rank = 0, .n_operands = 2};
    for (int d = 0; d < inner; d++) {
        if (d == p)
            continue;
        job.outer.dims[job.outer.rank] = s->dims[d];
        job.outer.strides[0][job.outer.rank] = s->strides[0][d];
        job.outer.strides[1][job.outer.rank] = s->strides[1][d];
        job.outer.rank++;
    }
    job.outer.dims[job.outer.rank] = 1;
    job.outer.strides[0][job.outer.rank] = 0;
    job.outer.strides[1][job.outer.rank] = 0;
    job.outer.rank++;
    job.bands = (s->dims[inner] + TILE - 1) / TILE;
    cpu_parallel_range(cpu_nd_rows(&job.outer) * job.bands, TILE * s->dims[p],
                       threads, transpose_range, &job);
    return true;
}

/* The other copies: elements [lo, hi) of the rows laid end to end. */
typedef struct copy_job {
    const cpu_nd *s;
    size_t es;
    const char *src;
    char *dst;
} copy_job;

static void copy_range(void *arg, int64_t lo, int64_t hi) {
    const copy_job *job = arg;
    const cpu_nd *s = job->s;
    int inner = s->rank - 1;
    int64_t n = s->dims[inner], ss = s->strides[0][inner],
            ds = s->strides[1][inner], es = (int64_t)job->es;
    int64_t idx[OSP_MAX_DIMS] = {0}, off[2] = {0, 0};
    int64_t c = lo % n;
    cpu_nd_seek(s, lo / n, idx, off);
    for (int64_t e = lo; e < hi;) {
        int64_t len = n - c < hi - e ? n - c : hi - e;
        copy_row(job->es, len, job->src + (off[0] + c * ss) * es, ss,
                 job->dst + (off[1] + c * ds) * es, ds);
        e += len;
        c = 0;
        cpu_nd_next_row(s, idx, off);
    }
}

osp_error *cpu_op_copy_strided(osp_device *dev, void *stream,
                               const osp_copy_strided_args *args) {
    (void)dev;
    int threads = cpu_stream_threads(stream);
    const int64_t *strides[2] = {args->src_strides, args->dst_strides};
    cpu_nd s;
    cpu_nd_init(&s, args->rank, args->dims, 2, strides);
    if (copy_transposed(&s, args->elem_size, args->src, args->dst, threads))
        return NULL;
    copy_job job = {&s, args->elem_size, args->src, args->dst};
    cpu_parallel_range(cpu_nd_rows(&s) * s.dims[s.rank - 1], 1, threads,
                       copy_range, &job);
    return NULL;
}

/* ---- gather ------------------------------------------------------------ */

static inline int64_t index_at(const void *indices, osp_datatype dtype,
                               int64_t j) {
    return dtype == OSP_TYPE_INT32 ? ((const int32_t *)indices)[j]
                                   : ((const int64_t *)indices)[j];
}

/* Every index is checked before anything is written, so a bad one leaves
 * out untouched. */
osp_error *cpu_op_gather(osp_device *dev, void *stream,
                         const osp_gather_args *args) {
    (void)dev;
    (void)stream;
    int64_t len = args->axis_len, n_idx = args->n_indices;
    for (int64_t j = 0; j < n_idx; j++) {
        int64_t v = index_at(args->indices, args->index_dtype, j);
        if (v < -len || v >= len)
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "gather: index %lld (at %lld) is outside "
                                 "[%lld, %lld)",
                                 (long long)v, (long long)j, (long long)-len,
                                 (long long)len);
    }
    size_t es = args->elem_size;
    size_t row = (size_t)args->inner * es;
    const char *data = args->data;
    char *out = args->out;
    for (int64_t o = 0; o < args->outer; o++) {
        const char *block = data + (size_t)o * (size_t)len * row;
        for (int64_t j = 0; j < n_idx; j++, out += row) {
            int64_t v = index_at(args->indices, args->index_dtype, j);
            if (v < 0)
                v += len;
            const char *from = block + (size_t)v * row;
            if (row <= 16)
                for (size_t b = 0; b < row; b += es)
                    copy_elem(out + b, from + b, es);
            else
                memcpy(out, from, row);
        }
    }
    return NULL;
}

/* ---- fill -------------------------------------------------------------- */

osp_error *cpu_op_fill(osp_device *dev, void *stream,
                       const osp_fill_args *args) {
    (void)dev;
    (void)stream;
    fill_elements(args->dst, args->n, args->elem_size, args->value);
    return NULL;
}

/* ---- pad --------------------------------------------------------------- */

osp_error *cpu_op_pad(osp_device *dev, void *stream, const osp_pad_args *args) {
    (void)dev;
    (void)stream;
    int rank = args->rank;
    size_t es = args->elem_size;
    const char *x = args->x;
    char *y = args->y;
    if (rank == 0) {
        copy_elem(y, x, es);
        return NULL;
    }
    pad_dim pd[OSP_MAX_DIMS] = {{0, 0, 0, 0}};
    int64_t in_strides[OSP_MAX_DIMS];
    cpu_nd_contiguous(rank, args->in_dims, in_strides);
    for (int d = 0; d < rank; d++)
        pd[d] = pad_dim_of(args, d);
    const pad_dim *last = &pd[rank - 1];
    int64_t row_len = last->out, rows = 1;
    for (int d = 0; d < rank - 1; d++)
        rows *= pd[d].out;
    int64_t idx[OSP_MAX_DIMS] = {0};
    for (int64_t r = 0; r < rows; r++, y += row_len * (int64_t)es) {
        /* The input row this output row reads, unless it is all value. */
        int64_t src_off = 0;
        bool constant_row = false;
        for (int d = 0; d < rank - 1 && !constant_row; d++) {
            int64_t from =
                pad_source(args->mode, &pd[d], idx[d] - pd[d].before);
            constant_row = from < 0;
            src_off += from * in_strides[d];
        }
        if (constant_row) {
            fill_elements(y, (size_t)row_len, es, args->value);
        } else {
            const char *src = x + src_off * (int64_t)es;
            int64_t after = last->before + last->kept;
            if (last->kept > 0)
                memcpy(y + last->before * (int64_t)es,
                       src + last->lo * (int64_t)es, (size_t)last->kept * es);
            if (args->mode == OSP_PAD_CONSTANT) {
                fill_elements(y, (size_t)last->before, es, args->value);
                fill_elements(y + after * (int64_t)es,
                              (size_t)(row_len - after), es, args->value);
            } else {
                for (int64_t o = 0; o < row_len; o++) {
                    if (o == last->before)
                        o = after; /* the copied middle */
                    if (o >= row_len)
                        break;
                    int64_t from =
                        pad_source(args->mode, last, o - last->before);
                    copy_elem(y + o * (int64_t)es, src + from * (int64_t)es,
                              es);
                }
            }
        }
        for (int d = rank - 2; d >= 0; d--) {
            if (++idx[d] < pd[d].out)
                break;
            idx[d] = 0;
        }
    }
    return NULL;
}
