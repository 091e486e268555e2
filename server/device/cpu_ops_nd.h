/*
 * Loops for the CPU device's tensor ops (cpu_ops_elementwise.c,
 * cpu_ops_data.c, cpu_ops_reduce.c).
 *
 * CPU_LOOP and CPU_MAP: flat loops GCC vectorises at -O2. GCC 12's -O2
 * cost model ("very cheap") vectorises only loops that need neither a
 * scalar epilogue nor a runtime alias check, so hot loops run in blocks of
 * a constant CPU_BLOCK elements (then the remainder), and what they write
 * must be known not to alias what they read: `restrict` parameters (GCC
 * ignores `restrict` on local pointers), or CPU_MAP's local block.
 *
 * cpu_nd: N-d iteration for the strided ops (binary_nd, where,
 * copy_strided): a box of dims read or written by a few operands, each
 * through its own strides, reduced to the fewest dimensions that address
 * the same elements, then walked a row (the innermost dimension) at a
 * time with an index counter, so that the per-element loops are flat.
 * A walk may start at any row (cpu_nd_seek), so that threads can share
 * the rows.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "osprey/tensor.h"

#define CPU_BLOCK 8

/* Runs the statement(s) after i for i = 0 .. n-1 (int64_t i declared by
 * the macro), CPU_BLOCK at a time and then the rest. */
#define CPU_LOOP(n, i, ...)                                                    \
    do {                                                                       \
        int64_t cpu_n_ = (n), cpu_b_ = 0;                                      \
        for (; cpu_b_ + CPU_BLOCK <= cpu_n_; cpu_b_ += CPU_BLOCK)              \
            for (int cpu_j_ = 0; cpu_j_ < CPU_BLOCK; cpu_j_++) {               \
                int64_t i = cpu_b_ + cpu_j_;                                   \
                __VA_ARGS__;                                                   \
            }                                                                  \
        for (int64_t i = cpu_b_; i < cpu_n_; i++) {                            \
            __VA_ARGS__;                                                       \
        }                                                                      \
    } while (0)

/* y[i] = the expression after v, of v = x[i] (and i), for i < n, with y
 * either x itself or not overlapping it. Each block of CPU_BLOCK results
 * is computed into a local array before any is stored: all reads of a
 * block come before its writes, so the loops vectorise with no alias
 * information, and y == x is right. */
#define CPU_MAP(T, n, x, y, i, v, ...)                                         \
    do {                                                                       \
        const T *cpu_x_ = (x);                                                 \
        T *cpu_y_ = (y);                                                       \
        int64_t cpu_n_ = (n), cpu_b_ = 0;                                      \
        for (; cpu_b_ + CPU_BLOCK <= cpu_n_; cpu_b_ += CPU_BLOCK) {            \
            T cpu_t_[CPU_BLOCK];                                               \
            for (int cpu_j_ = 0; cpu_j_ < CPU_BLOCK; cpu_j_++) {               \
                int64_t i = cpu_b_ + cpu_j_;                                   \
                T v = cpu_x_[i];                                               \
                cpu_t_[cpu_j_] = (__VA_ARGS__);                                \
            }                                                                  \
            for (int cpu_j_ = 0; cpu_j_ < CPU_BLOCK; cpu_j_++)                 \
                cpu_y_[cpu_b_ + cpu_j_] = cpu_t_[cpu_j_];                      \
        }                                                                      \
        for (int64_t i = cpu_b_; i < cpu_n_; i++) {                            \
            T v = cpu_x_[i];                                                   \
            cpu_y_[i] = (__VA_ARGS__);                                         \
        }                                                                      \
    } while (0)

#define CPU_ND_MAX_OPERANDS 4

typedef struct cpu_nd {
    int rank; /* >= 1 */
    int n_operands;
    int64_t dims[OSP_MAX_DIMS];
    int64_t strides[CPU_ND_MAX_OPERANDS][OSP_MAX_DIMS];
} cpu_nd;

/* Fills `s` with the box `dims` (rank 0 to OSP_MAX_DIMS, no dimension 0)
 * as n_operands operands see it through strides[k] (borrowed), simplified:
 * dimensions of size 1 are dropped, and a dimension merges into the one
 * inside it wherever every operand steps over both as one (its stride is
 * the inner one's times the inner size). A scalar becomes rank 1 [1]. */
static inline void cpu_nd_init(cpu_nd *s, int rank, const int64_t *dims,
                               int n_operands, const int64_t *const *strides) {
    int r = 0;
    s->n_operands = n_operands;
    for (int d = 0; d < rank; d++) {
        if (dims[d] == 1)
            continue;
        bool merge = r > 0;
        for (int k = 0; k < n_operands && merge; k++)
            merge = s->strides[k][r - 1] == strides[k][d] * dims[d];
        if (merge) {
            s->dims[r - 1] *= dims[d];
            for (int k = 0; k < n_operands; k++)
                s->strides[k][r - 1] = strides[k][d];
        } else {
            s->dims[r] = dims[d];
            for (int k = 0; k < n_operands; k++)
                s->strides[k][r] = strides[k][d];
            r++;
        }
    }
    if (r == 0) {
        s->dims[0] = 1;
        for (int k = 0; k < n_operands; k++)
            s->strides[k][0] = 0;
        r = 1;
    }
    s->rank = r;
}

/* The number of rows: the product of every dimension but the innermost. */
static inline int64_t cpu_nd_rows(const cpu_nd *s) {
    int64_t rows = 1;
    for (int d = 0; d < s->rank - 1; d++)
        rows *= s->dims[d];
    return rows;
}

/* Steps the counter idx (over dimensions 0 .. rank-2, all 0 at the start)
 * to the next row, keeping off[k] (element offsets of each operand) in
 * step. */
static inline void cpu_nd_next_row(const cpu_nd *s, int64_t *idx,
                                   int64_t *off) {
    for (int d = s->rank - 2; d >= 0; d--) {
        for (int k = 0; k < s->n_operands; k++)
            off[k] += s->strides[k][d];
        if (++idx[d] < s->dims[d])
            return;
        for (int k = 0; k < s->n_operands; k++)
            off[k] -= s->strides[k][d] * s->dims[d];
        idx[d] = 0;
    }
}

/* Sets idx and off (as cpu_nd_next_row keeps them) to row `row` (<
 * cpu_nd_rows(s)), for a walk that starts there. */
static inline void cpu_nd_seek(const cpu_nd *s, int64_t row, int64_t *idx,
                               int64_t *off) {
    for (int k = 0; k < s->n_operands; k++)
        off[k] = 0;
    for (int d = s->rank - 2; d >= 0; d--) {
        idx[d] = row % s->dims[d];
        row /= s->dims[d];
        for (int k = 0; k < s->n_operands; k++)
            off[k] += idx[d] * s->strides[k][d];
    }
}

/* Row-major contiguous strides of `dims` into `strides`. */
static inline void cpu_nd_contiguous(int rank, const int64_t *dims,
                                     int64_t *strides) {
    int64_t step = 1;
    for (int d = rank - 1; d >= 0; d--) {
        strides[d] = step;
        step *= dims[d];
    }
}
