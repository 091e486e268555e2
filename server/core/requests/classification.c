#define _GNU_SOURCE /* qsort_r */
#include "classification.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "osprey/memory.h"

#define MAX_ELEMENTS 1000000 /* Triton's bound on a classified output */
#define MAX_LABEL_FILE ((long)64 << 20)

typedef enum { SIGNED, UNSIGNED, FLOATING } value_kind;

/* One element, read once into the widest type of its kind. */
typedef struct element {
    union {
        int64_t i;
        uint64_t u;
        double f;
    } v;
    size_t index;
} element;

static bool kind_of(osp_datatype dt, value_kind *kind) {
    switch (dt) {
    case OSP_TYPE_INT8:
    case OSP_TYPE_INT16:
    case OSP_TYPE_INT32:
    case OSP_TYPE_INT64:
        *kind = SIGNED;
        return true;
    case OSP_TYPE_UINT8:
    case OSP_TYPE_UINT16:
    case OSP_TYPE_UINT32:
    case OSP_TYPE_UINT64:
        *kind = UNSIGNED;
        return true;
    case OSP_TYPE_FP32:
    case OSP_TYPE_FP64:
        *kind = FLOATING;
        return true;
    default:
        return false;
    }
}

osp_error *classification_check_dtype(osp_datatype dtype) {
    value_kind kind;
    if (kind_of(dtype, &kind))
        return NULL;
    return osp_error_new(OSP_ERROR_INVALID_ARG,
                         "class result not available for output due to "
                         "unsupported type '%s'",
                         osp_datatype_wire_name(dtype));
}

static element read_element(osp_datatype dt, const void *p, size_t i) {
    element e = {.index = i};
    switch (dt) {
    case OSP_TYPE_INT8:
        e.v.i = ((const int8_t *)p)[i];
        break;
    case OSP_TYPE_INT16:
        e.v.i = ((const int16_t *)p)[i];
        break;
    case OSP_TYPE_INT32:
        e.v.i = ((const int32_t *)p)[i];
        break;
    case OSP_TYPE_INT64:
        e.v.i = ((const int64_t *)p)[i];
        break;
    case OSP_TYPE_UINT8:
        e.v.u = ((const uint8_t *)p)[i];
        break;
    case OSP_TYPE_UINT16:
        e.v.u = ((const uint16_t *)p)[i];
        break;
    case OSP_TYPE_UINT32:
        e.v.u = ((const uint32_t *)p)[i];
        break;
    case OSP_TYPE_UINT64:
        e.v.u = ((const uint64_t *)p)[i];
        break;
    case OSP_TYPE_FP32:
        e.v.f = ((const float *)p)[i];
        break;
    default:
        e.v.f = ((const double *)p)[i];
        break;
    }
    return e;
}

/* Largest value first, NaN last, ties by index. */
static int by_value_desc(const void *pa, const void *pb, void *ctx) {
    const element *a = pa, *b = pb;
    value_kind kind = *(const value_kind *)ctx;
    int order = 0;
    if (kind == SIGNED)
        order = (a->v.i < b->v.i) - (a->v.i > b->v.i);
    else if (kind == UNSIGNED)
        order = (a->v.u < b->v.u) - (a->v.u > b->v.u);
    else if (isnan(a->v.f) || isnan(b->v.f))
        order = isnan(a->v.f) - isnan(b->v.f);
    else
        order = (a->v.f < b->v.f) - (a->v.f > b->v.f);
    return order ? order : (a->index > b->index) - (a->index < b->index);
}

/* Appends one BYTES element, `head` then ":<label>" when there is a
 * label (4-byte little-endian length, then the bytes), to *buf. */
static bool append_element(char **buf, size_t *len, size_t *cap,
                           const char *head, size_t n, const char *label) {
    size_t label_len = label ? strlen(label) : 0;
    size_t size = n + (label ? 1 + label_len : 0);
    if (*len + 4 + size > *cap) {
        size_t want = (*len + 4 + size) * 2;
        char *bigger = realloc(*buf, want);
        if (!bigger)
            return false;
        *buf = bigger;
        *cap = want;
    }
    for (int b = 0; b < 4; b++)
        (*buf)[(*len)++] = (char)((uint32_t)size >> (8 * b));
    memcpy(*buf + *len, head, n);
    *len += n;
    if (label) {
        (*buf)[(*len)++] = ':';
        memcpy(*buf + *len, label, label_len);
        *len += label_len;
    }
    return true;
}

/* "<value>:<index>" as std::to_string prints the value; the buffer holds
 * "%f" of the largest double. */
static int format_class(char *text, size_t size, value_kind kind,
                        const element *e) {
    if (kind == SIGNED)
        return snprintf(text, size, "%lld:%zu", (long long)e->v.i, e->index);
    if (kind == UNSIGNED)
        return snprintf(text, size, "%llu:%zu", (unsigned long long)e->v.u,
                        e->index);
    return snprintf(text, size, "%f:%zu", e->v.f, e->index);
}

osp_error *classification_apply(osp_infer_output *out, bool batched, uint32_t k,
                                const class_labels *labels) {
    value_kind kind;
    osp_error *err = classification_check_dtype(out->dtype);
    if (err)
        return err;
    kind_of(out->dtype, &kind);
    size_t total = out->byte_size / osp_datatype_byte_size(out->dtype);
    if (total > MAX_ELEMENTS)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "classification output tensor too large");
    size_t items = 1, per_item = total;
    if (batched && out->shape.rank > 0) {
        items = (size_t)out->shape.dims[0];
        per_item = items ? total / items : 0;
    }
    size_t top = per_item < k ? per_item : k;

    element *row = malloc((per_item ? per_item : 1) * sizeof *row);
    char *buf = NULL;
    size_t len = 0, cap = 0;
    bool ok = row != NULL;
    const char *base = out->data ? out->data->data : NULL;
    for (size_t item = 0; ok && item < items; item++) {
        for (size_t i = 0; i < per_item; i++) {
            row[i] = read_element(out->dtype, base, item * per_item + i);
            row[i].index = i; /* the class: its place within the item */
        }
        qsort_r(row, per_item, sizeof *row, by_value_desc, &kind);
        for (size_t c = 0; ok && c < top; c++) {
            char text[400];
            int n = format_class(text, sizeof text, kind, &row[c]);
            const char *label = labels && row[c].index < labels->n
                                    ? labels->labels[row[c].index]
                                    : NULL;
            ok = n > 0 && (size_t)n < sizeof text &&
                 append_element(&buf, &len, &cap, text, (size_t)n, label);
        }
    }
    free(row);
    osp_buffer *strings = ok ? osp_buffer_new_host(len) : NULL;
    if (!strings) {
        free(buf);
        return osp_error_out_of_memory();
    }
    if (len)
        memcpy(strings->data, buf, len);
    free(buf);
    osp_buffer_free(out->data);
    out->data = strings;
    out->byte_size = len;
    out->dtype = OSP_TYPE_BYTES;
    out->shape.rank = batched ? 2 : 1;
    if (batched) {
        out->shape.dims[0] = (int64_t)items;
        out->shape.dims[1] = (int64_t)top;
    } else {
        out->shape.dims[0] = (int64_t)top;
    }
    return NULL;
}

osp_error *class_labels_load(const char *path, class_labels *out) {
    *out = (class_labels){0};
    FILE *f = fopen(path, "rb");
    if (!f)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "cannot open label file '%s': %m", path);
    char *text = NULL;
    long size = -1;
    if (fseek(f, 0, SEEK_END) == 0)
        size = ftell(f);
    osp_error *err = NULL;
    if (size < 0 || size > MAX_LABEL_FILE || fseek(f, 0, SEEK_SET) != 0)
        err = osp_error_new(OSP_ERROR_INVALID_ARG,
                            "label file '%s' is unreadable or larger than 64 "
                            "MiB",
                            path);
    else if (!(text = malloc((size_t)size + 1)) ||
             fread(text, 1, (size_t)size, f) != (size_t)size)
        err = osp_error_new(OSP_ERROR_INVALID_ARG,
                            "cannot read label file '%s'", path);
    fclose(f);
    /* One label per line, as std::getline reads them: a final newline
     * ends the last label rather than starting an empty one. */
    for (long start = 0; !err && start < size;) {
        long end = start;
        while (end < size && text[end] != '\n')
            end++;
        long stop = end > start && text[end - 1] == '\r' ? end - 1 : end;
        char **grown = realloc(out->labels, (out->n + 1) * sizeof *grown);
        char *label =
            grown ? strndup(text + start, (size_t)(stop - start)) : NULL;
        if (grown)
            out->labels = grown;
        if (!label)
            err = osp_error_out_of_memory();
        else
            out->labels[out->n++] = label;
        start = end + 1;
    }
    free(text);
    if (err)
        class_labels_free(out);
    return err;
}

void class_labels_free(class_labels *labels) {
    for (size_t i = 0; i < labels->n; i++)
        free(labels->labels[i]);
    free(labels->labels);
    *labels = (class_labels){0};
}
