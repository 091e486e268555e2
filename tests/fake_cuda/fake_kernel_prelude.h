/*
 * Every header a kernel file (cuda/, .cu) includes, included once at global scope
 * before the file itself is included inside its namespace (see
 * CMakeLists.txt): their include guards then keep them out of the
 * namespace. A kernel file that includes a header missing here fails to
 * compile in the fake build; add it here.
 */
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "activation_rules.h"
#include "binary_rules.h"
#include "kernels.h"
#include "kernels_block.cuh"
#include "kernels_launch.cuh"
#include "kernels_nd.cuh"
#include "kernels_nn.h"
#include "kernels_window.cuh"
#include "osprey/datatype.h"
#include "osprey/device.h"
#include "osprey/tensor_ops.h"
#include "pad_rules.h"
#include "unary_rules.h"
