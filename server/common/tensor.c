/* Shape helpers. */
#include "osprey/tensor.h"

#include <stdio.h>
#include <string.h>

bool osp_shape_element_count(const osp_shape *shape, int64_t *count) {
    int64_t n = 1;
    bool overflow = false;
    for (int i = 0; i < shape->rank; i++) {
        int64_t d = shape->dims[i];
        if (d == 0) {
            *count = 0; /* any zero dim: empty, whatever else overflows */
            return true;
        }
        if (d < 0 || __builtin_mul_overflow(n, d, &n))
            overflow = true;
    }
    if (overflow)
        return false;
    *count = n;
    return true;
}

char *osp_shape_format(const osp_shape *shape, char *buf, size_t cap) {
    size_t used = 0;
    if (cap == 0)
        return buf;
    buf[0] = '\0';
    used += (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < shape->rank && used < cap; i++)
        used += (size_t)snprintf(buf + used, cap - used, "%s%lld", i ? "," : "",
                                 (long long)shape->dims[i]);
    if (used < cap)
        snprintf(buf + used, cap - used, "]");
    return buf;
}

bool osp_shape_equal(const osp_shape *a, const osp_shape *b) {
    return a->rank == b->rank &&
           memcmp(a->dims, b->dims, sizeof(a->dims[0]) * (size_t)a->rank) == 0;
}
