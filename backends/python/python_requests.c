/* The per-request part of an EXEC payload (python_requests.h). */
#include "python_requests.h"

#include <math.h>
#include <stdint.h>
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
    pyproto_text_printf(t, "{");
    for (size_t i = 0; i < n; i++) {
        const osp_parameter *p = &params[i];
        pyproto_text_printf(t, "%s", i ? "," : "");
        pyproto_text_json_string(t, p->key);
        pyproto_text_printf(t, ":");
        switch (p->type) {
        case OSP_PARAM_STRING:
            pyproto_text_json_string(t, p->value.s ? p->value.s : "");
            break;
        case OSP_PARAM_INT:
            pyproto_text_printf(t, "%lld", (long long)p->value.i);
            break;
        case OSP_PARAM_BOOL:
            pyproto_text_printf(t, "%s", p->value.b ? "true" : "false");
            break;
        case OSP_PARAM_DOUBLE:
            append_double(t, p->value.d);
            break;
        }
    }
    pyproto_text_printf(t, "}");
}

/* Appends a u16-length-prefixed string; INTERNAL when it is longer than
 * a u16 (names and ids are bounded far below that by the frontends). */
static osp_error *append_string16(pyproto_text *t, const char *s,
                                  const char *what) {
    size_t n = strlen(s);
    if (n > UINT16_MAX)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "python backend: %s is longer than %u bytes", what,
                             (unsigned)UINT16_MAX);
    uint16_t len = (uint16_t)n;
    pyproto_text_append(t, &len, sizeof len);
    pyproto_text_append(t, s, n);
    return NULL;
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
    if (in->on_gpu)
        return pyproto_append_gpu_tensor(exec, in->name, in->dtype, &shape,
                                         &in->gpu, in->offset + start, size);
    return pyproto_append_tensor(exec, in->name, in->dtype, &shape,
                                 in->offset + start, size);
}

osp_error *pyreq_append_requests(pyproto_text *exec, const pyreq_input *inputs,
                                 size_t n_inputs,
                                 const osp_batch_request *requests,
                                 size_t n_requests, char *const *output_names,
                                 size_t n_outputs) {
    osp_error *err = NULL;
    if (n_inputs > UINT16_MAX || n_outputs > UINT16_MAX)
        return osp_error_new(OSP_ERROR_INTERNAL,
                             "python backend: too many inputs or outputs");
    /* Per input, how far a BYTES input's elements were walked. */
    size_t *cursor = calloc(n_inputs + 1, sizeof *cursor);
    int64_t *cursor_row = calloc(n_inputs + 1, sizeof *cursor_row);
    if (!cursor || !cursor_row) {
        err = osp_error_out_of_memory();
        goto out;
    }
    uint32_t count = (uint32_t)n_requests;
    pyproto_text_append(exec, &count, sizeof count);
    for (size_t r = 0; r < n_requests && !err; r++) {
        const osp_batch_request *req = &requests[r];
        /* One request of a model that batches has every row: its
         * descriptors are the inputs' own. */
        bool whole = req->rows == 0 || n_requests == 1;
        if ((err =
                 append_string16(exec, req->id ? req->id : "", "a request id")))
            break;
        uint8_t string_id = req->correlation_id_string != NULL;
        pyproto_text_append(exec, &string_id, 1);
        if (string_id)
            err = append_string16(exec, req->correlation_id_string,
                                  "a sequence id");
        else
            pyproto_text_append(exec, &req->correlation_id, 8);
        /* The parameters' text, its u32 length patched in after. */
        size_t at = exec->len;
        uint32_t params_len = 0;
        pyproto_text_append(exec, &params_len, sizeof params_len);
        pyreq_append_parameters(exec, req->parameters, req->n_parameters);
        if (!exec->failed) {
            params_len = (uint32_t)(exec->len - at - sizeof params_len);
            memcpy(exec->data + at, &params_len, sizeof params_len);
        }
        uint16_t wanted = 0;
        for (size_t o = 0; o < n_outputs; o++)
            wanted += !req->output_requested || req->output_requested[o];
        pyproto_text_append(exec, &wanted, sizeof wanted);
        for (size_t o = 0; o < n_outputs && !err; o++)
            if (!req->output_requested || req->output_requested[o])
                err = append_string16(exec, output_names[o], "an output name");
        uint16_t n_in = (uint16_t)n_inputs;
        pyproto_text_append(exec, &n_in, sizeof n_in);
        for (size_t i = 0; i < n_inputs && !err; i++)
            err = append_input(exec, &inputs[i], req, whole, &cursor[i],
                               &cursor_row[i]);
    }
    if (!err && exec->failed)
        err = osp_error_out_of_memory();
out:
    free(cursor);
    free(cursor_row);
    return err;
}
