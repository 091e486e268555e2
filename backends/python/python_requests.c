/* The per-request part of an EXEC payload (python_requests.h). */
#include "python_requests.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A double as JSON writes it shortest (1.5, 0.1, 1e+300); integral values
 * keep a ".0" so that they read back as floats, as Triton's writer does. */
static void append_double(pyproto_text *t, double d) {
    char buf[40];
    if (!isfinite(d)) { /* JSON has no spelling for these */
        pyproto_text_printf(t, "null");
        return;
    }
    for (int precision = 15; precision <= 17; precision++) {
        snprintf(buf, sizeof buf, "%.*g", precision, d);
        if (strtod(buf, NULL) == d)
            break;
    }
    pyproto_text_printf(t, "%s%s", buf, strpbrk(buf, ".eEn") ? "" : ".0");
}

void pyreq_append_parameters(pyproto_text *t, const osp_parameter *params,
                             size_t n) {
    pyproto_text object = {0};
    pyproto_text_printf(&object, "{");
    for (size_t i = 0; i < n; i++) {
        const osp_parameter *p = &params[i];
        pyproto_text_printf(&object, "%s", i ? "," : "");
        pyproto_text_json_string(&object, p->key);
        pyproto_text_printf(&object, ":");
        switch (p->type) {
        case OSP_PARAM_STRING:
            pyproto_text_json_string(&object, p->value.s ? p->value.s : "");
            break;
        case OSP_PARAM_INT:
            pyproto_text_printf(&object, "%lld", (long long)p->value.i);
            break;
        case OSP_PARAM_BOOL:
            pyproto_text_printf(&object, "%s", p->value.b ? "true" : "false");
            break;
        case OSP_PARAM_DOUBLE:
            append_double(&object, p->value.d);
            break;
        }
    }
    pyproto_text_printf(&object, "}");
    if (object.failed)
        t->failed = true;
    else
        pyproto_text_json_string(t, object.data);
    pyproto_text_free(&object);
}

/* Where request rows [first, first + rows) of a BYTES input begin and how
 * many bytes they take, walking the elements from *cursor (the byte where
 * row `*cursor_row` begins; both advance). False when an element overruns
 * the input. */
static bool bytes_rows(const pyreq_input *in, int64_t row_elements,
                       int64_t first, int64_t rows, size_t *cursor,
                       int64_t *cursor_row, size_t *start, size_t *size) {
    for (int pass = 0; pass < 2; pass++) {
        int64_t until = pass == 0 ? first : first + rows;
        if (pass == 1)
            *start = *cursor;
        for (; *cursor_row < until; (*cursor_row)++) {
            for (int64_t e = 0; e < row_elements; e++) {
                uint32_t len = 0;
                if (in->byte_size - *cursor < 4)
                    return false;
                memcpy(&len, in->bytes + *cursor, 4);
                if (in->byte_size - *cursor - 4 < len)
                    return false;
                *cursor += 4 + (size_t)len;
            }
        }
    }
    *size = *cursor - *start;
    return true;
}

/* Appends one request's descriptor of input `in`: its rows, or the whole
 * input for a model that does not batch. cursor/cursor_row: a BYTES
 * input's walk so far (bytes_rows). */
static osp_error *append_input(pyproto_text *exec, const pyreq_input *in,
                               const osp_batch_request *req, bool whole,
                               size_t *cursor, int64_t *cursor_row) {
    osp_shape shape = in->shape;
    size_t start = 0, size = in->byte_size;
    if (!whole) {
        int64_t total = shape.rank > 0 ? shape.dims[0] : -1;
        int64_t row_elements = 1;
        for (int d = 1; d < shape.rank; d++)
            row_elements *= shape.dims[d];
        if (total < 0 || req->first_row < 0 || req->rows < 0 ||
            req->first_row > total || req->rows > total - req->first_row)
            return osp_error_new(OSP_ERROR_INTERNAL,
                                 "python backend: a request's rows do not fit "
                                 "input '%s'",
                                 in->name);
        if (in->dtype == OSP_TYPE_BYTES) {
            if (!bytes_rows(in, row_elements, req->first_row, req->rows, cursor,
                            cursor_row, &start, &size))
                return osp_error_new(OSP_ERROR_INTERNAL,
                                     "python backend: the elements of input "
                                     "'%s' overrun it",
                                     in->name);
        } else {
            size_t row_bytes = total ? in->byte_size / (size_t)total : 0;
            start = (size_t)req->first_row * row_bytes;
            size = (size_t)req->rows * row_bytes;
        }
        shape.dims[0] = req->rows;
    }
    pyproto_text_json_string(exec, in->name);
    pyproto_text_printf(exec, ",\"%s\",[", osp_datatype_wire_name(in->dtype));
    for (int d = 0; d < shape.rank; d++)
        pyproto_text_printf(exec, "%s%lld", d ? "," : "",
                            (long long)shape.dims[d]);
    pyproto_text_printf(exec, "],%zu,%zu]", in->offset + start, size);
    return NULL;
}

osp_error *pyreq_append_requests(pyproto_text *exec, const pyreq_input *inputs,
                                 size_t n_inputs,
                                 const osp_batch_request *requests,
                                 size_t n_requests, char *const *output_names,
                                 size_t n_outputs) {
    osp_error *err = NULL;
    /* Per input, how far a BYTES input's elements were walked. */
    size_t *cursor = calloc(n_inputs + 1, sizeof *cursor);
    int64_t *cursor_row = calloc(n_inputs + 1, sizeof *cursor_row);
    if (!cursor || !cursor_row) {
        err = osp_error_out_of_memory();
        goto out;
    }
    pyproto_text_printf(exec, "[");
    for (size_t r = 0; r < n_requests && !err; r++) {
        const osp_batch_request *req = &requests[r];
        /* One request of a model that batches has every row: its
         * descriptors are the inputs' own. */
        bool whole = req->rows == 0 || n_requests == 1;
        pyproto_text_printf(exec, "%s{\"inputs\":[", r ? "," : "");
        for (size_t i = 0; i < n_inputs && !err; i++) {
            pyproto_text_printf(exec, "%s[", i ? "," : "");
            err = append_input(exec, &inputs[i], req, whole, &cursor[i],
                               &cursor_row[i]);
        }
        pyproto_text_printf(exec, "],\"outputs\":[");
        bool first = true;
        for (size_t o = 0; o < n_outputs; o++) {
            if (req->output_requested && !req->output_requested[o])
                continue;
            pyproto_text_printf(exec, "%s", first ? "" : ",");
            pyproto_text_json_string(exec, output_names[o]);
            first = false;
        }
        pyproto_text_printf(exec, "],\"id\":");
        pyproto_text_json_string(exec, req->id ? req->id : "");
        pyproto_text_printf(exec, ",\"correlation_id\":");
        if (req->correlation_id_string)
            pyproto_text_json_string(exec, req->correlation_id_string);
        else
            pyproto_text_printf(exec, "%llu",
                                (unsigned long long)req->correlation_id);
        pyproto_text_printf(exec, ",\"parameters\":");
        pyreq_append_parameters(exec, req->parameters, req->n_parameters);
        pyproto_text_printf(exec, "}");
    }
    pyproto_text_printf(exec, "]");
    if (!err && exec->failed)
        err = osp_error_out_of_memory();
out:
    free(cursor);
    free(cursor_row);
    return err;
}
