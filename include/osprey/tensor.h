/*
 * Shapes and tensor descriptions shared by requests, responses, backends
 * and devices. A shape is a small fixed-size value; -1 marks a variable
 * dimension in model configs only (never in a request's concrete shape).
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "osprey/datatype.h"
#include "osprey/error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define OSP_MAX_DIMS 16

typedef struct osp_shape {
    int rank;
    int64_t dims[OSP_MAX_DIMS];
} osp_shape;

/* Element count of a concrete shape (no negative dims). Sets *count and
 * returns true; returns false on int64 overflow (count undefined). Any zero
 * dim gives 0. Rank 0 gives 1. */
bool osp_shape_element_count(const osp_shape *shape, int64_t *count);

/* Writes "[a,b,c]" (no spaces, Triton's format) into buf, truncating to
 * cap; returns buf. */
char *osp_shape_format(const osp_shape *shape, char *buf, size_t cap);

bool osp_shape_equal(const osp_shape *a, const osp_shape *b);

#ifdef __cplusplus
}
#endif
