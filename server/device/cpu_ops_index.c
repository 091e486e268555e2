/*
 * The CPU device's index-driven tensor ops: scatter. Updates are applied
 * in order (outer, then index, then inner), so repeated indices give the
 * last update for NONE and the running combination for the reductions.
 */
#include <stdint.h>
#include <string.h>

#include "cpu_ops.h"
#include "osprey/error.h"

static inline int64_t index_at(const void *indices, osp_datatype dtype,
                               int64_t j) {
    return dtype == OSP_TYPE_INT32 ? ((const int32_t *)indices)[j]
                                   : ((const int64_t *)indices)[j];
}

/* dst[k] = dst[k] (op) src[k] for k < n, in type T. */
#define SCATTER_COMBINE(T, reduction, dst_, src_, n)                           \
    do {                                                                       \
        T *d_ = (T *)(dst_);                                                   \
        const T *s_ = (const T *)(src_);                                       \
        switch (reduction) {                                                   \
        case OSP_SCATTER_ADD:                                                  \
            for (int64_t k_ = 0; k_ < (n); k_++)                               \
                d_[k_] = (T)(d_[k_] + s_[k_]);                                 \
            break;                                                             \
        case OSP_SCATTER_MUL:                                                  \
            for (int64_t k_ = 0; k_ < (n); k_++)                               \
                d_[k_] = (T)(d_[k_] * s_[k_]);                                 \
            break;                                                             \
        case OSP_SCATTER_MAX:                                                  \
            for (int64_t k_ = 0; k_ < (n); k_++)                               \
                d_[k_] = s_[k_] > d_[k_] ? s_[k_] : d_[k_];                    \
            break;                                                             \
        case OSP_SCATTER_MIN:                                                  \
            for (int64_t k_ = 0; k_ < (n); k_++)                               \
                d_[k_] = s_[k_] < d_[k_] ? s_[k_] : d_[k_];                    \
            break;                                                             \
        default:                                                               \
            break;                                                             \
        }                                                                      \
    } while (0)

/* Integer products wrap modulo 2^bits, as integer binary ops do: computed
 * in unsigned arithmetic so that overflow is defined. */
static void combine_int(osp_scatter_reduction reduction, osp_datatype dtype,
                        char *dst, const char *src, int64_t n) {
    if (dtype == OSP_TYPE_INT32) {
        if (reduction == OSP_SCATTER_ADD || reduction == OSP_SCATTER_MUL) {
            uint32_t *d = (uint32_t *)dst;
            const uint32_t *s = (const uint32_t *)src;
            for (int64_t k = 0; k < n; k++)
                d[k] = reduction == OSP_SCATTER_ADD ? d[k] + s[k] : d[k] * s[k];
        } else {
            SCATTER_COMBINE(int32_t, reduction, dst, src, n);
        }
    } else {
        if (reduction == OSP_SCATTER_ADD || reduction == OSP_SCATTER_MUL) {
            uint64_t *d = (uint64_t *)dst;
            const uint64_t *s = (const uint64_t *)src;
            for (int64_t k = 0; k < n; k++)
                d[k] = reduction == OSP_SCATTER_ADD ? d[k] + s[k] : d[k] * s[k];
        } else {
            SCATTER_COMBINE(int64_t, reduction, dst, src, n);
        }
    }
}

/* Every index is checked before anything is written, so a bad one leaves
 * data untouched. */
osp_error *cpu_op_scatter(osp_device *dev, void *stream,
                          const osp_scatter_args *args) {
    (void)dev;
    (void)stream;
    int64_t len = args->axis_len, n_idx = args->n_indices;
    for (int64_t j = 0; j < n_idx; j++) {
        int64_t v = index_at(args->indices, args->index_dtype, j);
        if (v < -len || v >= len)
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "scatter: index %lld (at %lld) is outside "
                                 "[%lld, %lld)",
                                 (long long)v, (long long)j, (long long)-len,
                                 (long long)len);
    }
    size_t es = osp_datatype_byte_size(args->dtype);
    int64_t inner = args->inner;
    size_t row = (size_t)inner * es;
    char *data = args->data;
    const char *upd = args->updates;
    for (int64_t o = 0; o < args->outer; o++) {
        char *block = data + (size_t)o * (size_t)len * row;
        for (int64_t j = 0; j < n_idx; j++, upd += row) {
            int64_t v = index_at(args->indices, args->index_dtype, j);
            if (v < 0)
                v += len;
            char *to = block + (size_t)v * row;
            switch (args->reduction) {
            case OSP_SCATTER_NONE:
                memcpy(to, upd, row);
                break;
            default:
                if (args->dtype == OSP_TYPE_FP32)
                    SCATTER_COMBINE(float, args->reduction, to, upd, inner);
                else
                    combine_int(args->reduction, args->dtype, to, upd, inner);
                break;
            }
        }
    }
    return NULL;
}
