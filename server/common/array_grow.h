/*
 * array_grow: the growth step of every dynamic array in the tree (h2o's
 * h2o_vector_reserve): doubling capacity, overflow checked.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Makes *array (of *cap elements of `elem` bytes, owned by the caller)
 * hold at least `need` elements, doubling from 16. false when the size
 * overflows or memory is short: *array and *cap are then unchanged. */
bool array_grow(void **array, size_t *cap, size_t need, size_t elem);

#ifdef __cplusplus
}
#endif
