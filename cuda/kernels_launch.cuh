/* Grid sizing shared by the kernels_*.cu files. */
#pragma once

#include <stddef.h>

enum { OSP_CUDA_BLOCK = 256 };

/* Blocks for a grid-stride loop over n elements: enough to fill any GPU,
 * few enough that every thread does some work on large inputs. */
static inline unsigned osp_cuda_grid_for(size_t n) {
    size_t blocks = (n + OSP_CUDA_BLOCK - 1) / OSP_CUDA_BLOCK;
    const size_t max_blocks = 65535;
    if (blocks > max_blocks)
        blocks = max_blocks;
    return blocks == 0 ? 1u : (unsigned)blocks;
}
