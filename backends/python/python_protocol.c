/* Frames and payloads of the python stub's control channel
 * (python_protocol.h). */
#include "python_protocol.h"

#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "osprey/clock.h"

static bool text_reserve(pyproto_text *t, size_t more) {
    if (t->failed)
        return false;
    if (t->len + more + 1 <= t->cap)
        return true;
    size_t cap = t->cap ? t->cap : 256;
    while (cap < t->len + more + 1)
        cap *= 2;
    char *p = realloc(t->data, cap);
    if (!p) {
        t->failed = true;
        return false;
    }
    t->data = p;
    t->cap = cap;
    return true;
}

void pyproto_text_printf(pyproto_text *t, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || !text_reserve(t, (size_t)n))
        return;
    va_start(ap, fmt);
    vsnprintf(t->data + t->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    t->len += (size_t)n;
}

void pyproto_text_json_string(pyproto_text *t, const char *s) {
    pyproto_text_printf(t, "\"");
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            pyproto_text_printf(t, "\\%c", *p);
        else if (*p < 0x20)
            pyproto_text_printf(t, "\\u%04x", *p);
        else if (text_reserve(t, 1)) {
            t->data[t->len++] = (char)*p;
            t->data[t->len] = '\0';
        }
    }
    pyproto_text_printf(t, "\"");
}

bool pyproto_text_reserve(pyproto_text *t, size_t more) {
    if (t->failed || t->len + more + 1 <= t->cap)
        return !t->failed;
    if (more > SIZE_MAX - t->len - 1) {
        t->failed = true;
        return false;
    }
    char *p = realloc(t->data, t->len + more + 1);
    if (!p) {
        t->failed = true;
        return false;
    }
    t->data = p;
    t->cap = t->len + more + 1;
    return true;
}

void pyproto_text_append(pyproto_text *t, const void *data, size_t n) {
    if (n == 0 || !text_reserve(t, n))
        return;
    memcpy(t->data + t->len, data, n);
    t->len += n;
    t->data[t->len] = '\0';
}

/* A descriptor; with gpu (borrowed, may be NULL) one of a GPU tensor. */
static osp_error *append_descriptor(pyproto_text *t, const char *name,
                                    osp_datatype dtype, const osp_shape *shape,
                                    const pyproto_gpu_ref *gpu, uint64_t offset,
                                    uint64_t byte_size) {
    size_t name_len = strlen(name);
    const char *type = osp_datatype_wire_name(dtype);
    uint8_t type_len = (uint8_t)strlen(type);
    if (name_len > UINT16_MAX || shape->rank < 0 || shape->rank > OSP_MAX_DIMS)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "python backend: tensor name longer than %u "
                             "bytes or rank over %d",
                             (unsigned)UINT16_MAX, OSP_MAX_DIMS);
    uint16_t len16 = (uint16_t)name_len;
    uint8_t rank = (uint8_t)shape->rank;
    uint8_t rank_byte = rank | (gpu ? PYPROTO_RANK_ON_GPU : 0);
    uint64_t where[2] = {offset, byte_size};
    pyproto_text_append(t, &len16, sizeof len16);
    pyproto_text_append(t, name, name_len);
    pyproto_text_append(t, &type_len, 1);
    pyproto_text_append(t, type, type_len);
    pyproto_text_append(t, &rank_byte, 1);
    pyproto_text_append(t, shape->dims, 8 * (size_t)rank);
    pyproto_text_append(t, where, sizeof where);
    if (gpu) {
        pyproto_text_append(t, &gpu->device_id, sizeof gpu->device_id);
        pyproto_text_append(t, &gpu->lease, sizeof gpu->lease);
        pyproto_text_append(t, gpu->ipc_handle, sizeof gpu->ipc_handle);
    }
    return NULL;
}

osp_error *pyproto_append_tensor(pyproto_text *t, const char *name,
                                 osp_datatype dtype, const osp_shape *shape,
                                 uint64_t offset, uint64_t byte_size) {
    return append_descriptor(t, name, dtype, shape, NULL, offset, byte_size);
}

osp_error *pyproto_append_gpu_tensor(pyproto_text *t, const char *name,
                                     osp_datatype dtype, const osp_shape *shape,
                                     const pyproto_gpu_ref *gpu,
                                     uint64_t offset, uint64_t byte_size) {
    return append_descriptor(t, name, dtype, shape, gpu, offset, byte_size);
}

size_t pyproto_append_release(pyproto_text *t,
                              const pyproto_response *responses, size_t n) {
    uint32_t count = 0;
    for (size_t r = 0; r < n; r++)
        for (size_t k = 0; k < responses[r].n_outputs; k++)
            count += responses[r].outputs[k].on_gpu &&
                     responses[r].outputs[k].gpu.lease != 0;
    if (count == 0)
        return 0;
    pyproto_text_append(t, &count, sizeof count);
    for (size_t r = 0; r < n; r++)
        for (size_t k = 0; k < responses[r].n_outputs; k++) {
            const pyproto_output *o = &responses[r].outputs[k];
            if (o->on_gpu && o->gpu.lease != 0)
                pyproto_text_append(t, &o->gpu.lease, sizeof o->gpu.lease);
        }
    return count;
}

void pyproto_text_free(pyproto_text *t) {
    free(t->data);
    memset(t, 0, sizeof *t);
}

osp_error_code pyproto_error_code(uint32_t triton_code) {
    switch (triton_code) {
    case 2:
        return OSP_ERROR_NOT_FOUND;
    case 3:
        return OSP_ERROR_INVALID_ARG;
    case 4:
        return OSP_ERROR_UNAVAILABLE;
    case 5:
        return OSP_ERROR_UNSUPPORTED;
    case 6:
        return OSP_ERROR_ALREADY_EXISTS;
    case 7:
        return OSP_ERROR_CANCELLED;
    case 0:
        return OSP_ERROR_UNKNOWN;
    default:
        return OSP_ERROR_INTERNAL;
    }
}

uint32_t pyproto_triton_code(osp_error_code code) {
    switch (code) {
    case OSP_ERROR_UNKNOWN:
        return 0;
    case OSP_ERROR_NOT_FOUND:
        return 2;
    case OSP_ERROR_INVALID_ARG:
        return 3;
    case OSP_ERROR_UNAVAILABLE:
        return 4;
    case OSP_ERROR_UNSUPPORTED:
        return 5;
    case OSP_ERROR_ALREADY_EXISTS:
        return 6;
    case OSP_ERROR_CANCELLED:
        return 7;
    default:
        return 1;
    }
}

/* A bounds-checked reader over a RESULT or BLS payload. */
typedef struct reader {
    const uint8_t *p;
    size_t left;
} reader;

static bool take(reader *r, void *dst, size_t n) {
    if (r->left < n)
        return false;
    memcpy(dst, r->p, n);
    r->p += n;
    r->left -= n;
    return true;
}

/* A u<width> little-endian length followed by that many bytes, as a new
 * NUL-terminated string. */
static bool take_string(reader *r, size_t width, char **out) {
    uint32_t n = 0; /* the host is little-endian, as the stub packs */
    if (!take(r, &n, width) || r->left < n)
        return false;
    char *s = malloc((size_t)n + 1);
    if (!s)
        return false;
    memcpy(s, r->p, n);
    s[n] = '\0';
    r->p += n;
    r->left -= n;
    *out = s;
    return true;
}

static osp_error *bad_result(const char *what) {
    return osp_error_new(OSP_ERROR_INTERNAL,
                         "python backend: malformed result from the stub (%s)",
                         what);
}

static osp_error *decode_output(reader *r, uint64_t region_size,
                                pyproto_output *o) {
    char *dtype = NULL;
    uint8_t rank = 0;
    if (!take_string(r, 2, &o->name) || !take_string(r, 1, &dtype))
        return bad_result("tensor name or datatype");
    o->dtype = osp_datatype_from_wire_name(dtype);
    free(dtype);
    if (o->dtype == OSP_TYPE_INVALID)
        return bad_result("unknown datatype");
    if (!take(r, &rank, 1))
        return bad_result("rank");
    o->on_gpu = (rank & PYPROTO_RANK_ON_GPU) != 0;
    rank &= (uint8_t)~PYPROTO_RANK_ON_GPU;
    if (rank > OSP_MAX_DIMS)
        return bad_result("rank");
    o->shape.rank = rank;
    for (int d = 0; d < rank; d++)
        if (!take(r, &o->shape.dims[d], 8) || o->shape.dims[d] < 0)
            return bad_result("dims");
    if (!take(r, &o->offset, 8) || !take(r, &o->byte_size, 8))
        return bad_result("tensor offset or size");
    if (o->on_gpu) {
        /* Checked against its allocation when the server opens it. */
        if (!take(r, &o->gpu.device_id, 4) || !take(r, &o->gpu.lease, 8) ||
            !take(r, o->gpu.ipc_handle, sizeof o->gpu.ipc_handle))
            return bad_result("GPU tensor reference");
        if (o->gpu.device_id < 0 || o->offset > UINT64_MAX - o->byte_size)
            return bad_result("GPU tensor device or range");
        if (o->dtype == OSP_TYPE_BYTES)
            return bad_result("a BYTES tensor in GPU memory");
    } else if (o->offset > region_size ||
               o->byte_size > region_size - o->offset) {
        return bad_result("tensor outside the region");
    }
    int64_t count = 0;
    if (!osp_shape_element_count(&o->shape, &count))
        return bad_result("element count");
    if (o->dtype != OSP_TYPE_BYTES &&
        (uint64_t)count * osp_datatype_byte_size(o->dtype) != o->byte_size)
        return bad_result("byte size does not match the shape");
    return NULL;
}

static osp_error *decode_response(reader *r, uint64_t region_size,
                                  pyproto_response *resp) {
    uint32_t kind = 0, count = 0;
    if (!take(r, &kind, 4))
        return bad_result("response kind");
    if (kind == 1) {
        resp->is_error = true;
        if (!take(r, &resp->error_code, 4) ||
            !take_string(r, 4, &resp->error_message))
            return bad_result("error message");
        return NULL;
    }
    if (kind != 0 || !take(r, &count, 4) || count > r->left)
        return bad_result("output count");
    resp->outputs = calloc(count ? count : 1, sizeof *resp->outputs);
    if (!resp->outputs)
        return osp_error_out_of_memory();
    for (uint32_t i = 0; i < count; i++) {
        resp->n_outputs = i + 1;
        osp_error *err = decode_output(r, region_size, &resp->outputs[i]);
        if (err)
            return err;
    }
    return NULL;
}

osp_error *pyproto_result_decode(const uint8_t *payload, size_t len,
                                 pyproto_result *out) {
    reader r = {payload, len};
    pyproto_result res = {0};
    uint32_t count = 0;
    osp_error *err = NULL;
    if (!take(&r, &res.region_size, 8) || !take(&r, &count, 4) ||
        count > r.left / 4) {
        err = bad_result("header");
        goto out;
    }
    res.responses = calloc(count ? count : 1, sizeof *res.responses);
    if (!res.responses) {
        err = osp_error_out_of_memory();
        goto out;
    }
    for (uint32_t i = 0; i < count && !err; i++) {
        res.n_responses = i + 1;
        err = decode_response(&r, res.region_size, &res.responses[i]);
    }
    if (!err && r.left != 0)
        err = bad_result("trailing bytes");
out:
    if (err)
        pyproto_result_destroy(&res);
    else
        *out = res;
    return err;
}

/* The request's parameters: u32 count, then per parameter u16 key
 * length, key, u8 type and the value (python_protocol.h). Fills req. */
static osp_error *decode_parameters(reader *r, pyproto_bls_request *req) {
    uint32_t count = 0;
    /* Each takes at least 4 bytes (key length, type, a bool). */
    if (!take(r, &count, 4) || count > r->left / 4)
        return bad_result("BLS parameter count");
    req->parameters = calloc(count ? count : 1, sizeof *req->parameters);
    if (!req->parameters)
        return osp_error_out_of_memory();
    for (uint32_t i = 0; i < count; i++) {
        osp_parameter *p = &req->parameters[i];
        uint8_t type = 0, flag = 0;
        req->n_parameters = i + 1;
        if (!take_string(r, 2, &p->key) || !take(r, &type, 1))
            return bad_result("BLS parameter");
        switch (type) {
        case 0:
            p->type = OSP_PARAM_STRING;
            if (!take_string(r, 4, &p->value.s))
                return bad_result("BLS parameter value");
            break;
        case 1:
            p->type = OSP_PARAM_INT;
            if (!take(r, &p->value.i, 8))
                return bad_result("BLS parameter value");
            break;
        case 2:
            p->type = OSP_PARAM_BOOL;
            if (!take(r, &flag, 1) || flag > 1)
                return bad_result("BLS parameter value");
            p->value.b = flag == 1;
            break;
        default:
            return bad_result("BLS parameter type");
        }
    }
    return NULL;
}

/* The request BLS and BLS_CALL share: model, version, id, inputs (each
 * inside [0, limit)), outputs, timeout, parameters. Fills req; the caller
 * destroys it on failure. */
static osp_error *decode_bls_body(reader *r, uint64_t limit,
                                  pyproto_bls_request *req) {
    uint32_t count = 0;
    if (!take_string(r, 2, &req->model) || !take(r, &req->version, 8) ||
        !take_string(r, 2, &req->id) || !take(r, &count, 4) || count > r->left)
        return bad_result("BLS request header");
    req->inputs = calloc(count ? count : 1, sizeof *req->inputs);
    if (!req->inputs)
        return osp_error_out_of_memory();
    for (uint32_t i = 0; i < count; i++) {
        req->n_inputs = i + 1;
        osp_error *err = decode_output(r, limit, &req->inputs[i]);
        if (err)
            return err;
    }
    if (!take(r, &count, 4) || count > r->left)
        return bad_result("BLS output count");
    if (!(req->outputs = calloc(count ? count : 1, sizeof(char *))))
        return osp_error_out_of_memory();
    for (uint32_t i = 0; i < count; i++) {
        req->n_outputs = i + 1;
        if (!take_string(r, 2, &req->outputs[i]))
            return bad_result("BLS output name");
    }
    if (!take(r, &req->timeout_us, 8))
        return bad_result("BLS timeout");
    return decode_parameters(r, req);
}

osp_error *pyproto_bls_decode(const uint8_t *payload, size_t len,
                              pyproto_bls_request *out) {
    reader r = {payload, len};
    pyproto_bls_request req = {0};
    osp_error *err = NULL;
    if (!take(&r, &req.region_size, 8) || !take(&r, &req.out_offset, 8))
        err = bad_result("BLS request header");
    if (!err)
        err = decode_bls_body(&r, req.region_size, &req);
    if (!err && r.left != 0)
        err = bad_result("trailing bytes");
    if (err)
        pyproto_bls_destroy(&req);
    else
        *out = req;
    return err;
}

osp_error *pyproto_bls_call_decode(const uint8_t *payload, size_t len,
                                   pyproto_bls_request *out,
                                   uint64_t *call_id) {
    reader r = {payload, len};
    pyproto_bls_request req = {0};
    uint8_t decoupled = 0;
    uint64_t data_len = 0;
    osp_error *err = NULL;
    if (!take(&r, &req.call_id, 8))
        return bad_result("BLS call id");
    *call_id = req.call_id;
    if (!take(&r, &decoupled, 1) || decoupled > 1 || !take(&r, &data_len, 8) ||
        data_len > r.left)
        err = bad_result("BLS call header");
    if (!err) {
        /* The body ends where the data begins. */
        reader body = {r.p, r.left - (size_t)data_len};
        err = decode_bls_body(&body, data_len, &req);
        if (!err && body.left != 0)
            err = bad_result("BLS call body");
        req.decoupled = decoupled == 1;
        req.data = r.p + (r.left - (size_t)data_len);
        req.data_len = (size_t)data_len;
    }
    if (err)
        pyproto_bls_destroy(&req);
    else
        *out = req;
    return err;
}

osp_error *pyproto_bls_cancel_decode(const uint8_t *payload, size_t len,
                                     uint64_t *call_id) {
    reader r = {payload, len};
    if (!take(&r, call_id, 8) || r.left != 0)
        return bad_result("BLS cancel");
    return NULL;
}

osp_error *pyproto_stream_response_decode(const uint8_t *payload, size_t len,
                                          pyproto_stream_response *out) {
    reader r = {payload, len};
    pyproto_stream_response res = {0};
    uint32_t flags = 0, has = 0;
    uint64_t data_len = 0;
    osp_error *err = NULL;
    if (!take(&r, &res.batch, 8) || !take(&r, &flags, 4) ||
        !take(&r, &has, 4) || !take(&r, &data_len, 8) || has > 1 ||
        data_len > r.left)
        return bad_result("response header");
    res.final = flags & 1;
    res.has_response = has == 1;
    if (res.has_response)
        err = decode_response(&r, data_len, &res.response);
    if (!err && r.left != data_len)
        err = bad_result("response data");
    res.data = r.p;
    res.data_len = data_len;
    if (err)
        pyproto_stream_response_destroy(&res);
    else
        *out = res;
    return err;
}

void pyproto_stream_response_destroy(pyproto_stream_response *r) {
    free(r->response.error_message);
    for (size_t k = 0; k < r->response.n_outputs; k++)
        free(r->response.outputs[k].name);
    free(r->response.outputs);
    memset(r, 0, sizeof *r);
}

void pyproto_bls_destroy(pyproto_bls_request *request) {
    free(request->model);
    free(request->id);
    for (size_t i = 0; i < request->n_inputs; i++)
        free(request->inputs[i].name);
    free(request->inputs);
    for (size_t i = 0; i < request->n_outputs && request->outputs; i++)
        free(request->outputs[i]);
    free(request->outputs);
    for (size_t i = 0; i < request->n_parameters; i++) {
        free(request->parameters[i].key);
        if (request->parameters[i].type == OSP_PARAM_STRING)
            free(request->parameters[i].value.s);
    }
    free(request->parameters);
    memset(request, 0, sizeof *request);
}

void pyproto_result_destroy(pyproto_result *result) {
    for (size_t i = 0; i < result->n_responses; i++) {
        pyproto_response *resp = &result->responses[i];
        free(resp->error_message);
        for (size_t k = 0; k < resp->n_outputs; k++)
            free(resp->outputs[k].name);
        free(resp->outputs);
    }
    free(result->responses);
    memset(result, 0, sizeof *result);
}

size_t pyproto_frame_max(size_t shm_limit) {
    uint64_t max = (uint64_t)shm_limit + PYPROTO_MAX_FRAME;
    if (max < shm_limit || max > UINT32_MAX) /* the frame length is a u32 */
        max = UINT32_MAX;
    return (size_t)max;
}

bool pyproto_send(int fd, uint32_t type, const void *payload, size_t len) {
    if (len > UINT32_MAX)
        return false;
    uint32_t header[2] = {type, (uint32_t)len};
    struct iovec iov[2] = {{header, sizeof header}, {(void *)payload, len}};
    struct msghdr msg = {.msg_iov = iov, .msg_iovlen = len ? 2 : 1};
    size_t total = sizeof header + len;
    while (total > 0) {
        ssize_t n = sendmsg(fd, &msg, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return false;
        }
        total -= (size_t)n;
        while (n > 0 && msg.msg_iovlen > 0) {
            size_t step = (size_t)n < msg.msg_iov->iov_len
                              ? (size_t)n
                              : msg.msg_iov->iov_len;
            msg.msg_iov->iov_base = (char *)msg.msg_iov->iov_base + step;
            msg.msg_iov->iov_len -= step;
            n -= (ssize_t)step;
            if (msg.msg_iov->iov_len == 0) {
                msg.msg_iov++;
                msg.msg_iovlen--;
            }
        }
    }
    return true;
}

/* Reads exactly n bytes before the deadline. */
static pyproto_recv_status read_full(int fd, uint64_t deadline_ns, void *dst,
                                     size_t n) {
    size_t got = 0;
    while (got < n) {
        /* Without a deadline a blocking recv spares a poll per read. */
        if (deadline_ns) {
            uint64_t now = osp_now_ns();
            if (now >= deadline_ns)
                return PYPROTO_RECV_TIMEOUT;
            struct pollfd pfd = {.fd = fd, .events = POLLIN};
            int rc =
                poll(&pfd, 1, (int)((deadline_ns - now + 999999) / 1000000));
            if (rc == 0 || (rc < 0 && errno == EINTR))
                continue; /* the deadline check above decides */
            if (rc < 0)
                return PYPROTO_RECV_CLOSED;
        }
        ssize_t k = recv(fd, (char *)dst + got, n - got, 0);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return PYPROTO_RECV_CLOSED;
        got += (size_t)k;
    }
    return PYPROTO_RECV_OK;
}

pyproto_recv_status pyproto_recv(int fd, uint64_t deadline_ns, size_t max_frame,
                                 uint32_t *type, uint8_t **payload,
                                 size_t *len) {
    uint32_t header[2];
    pyproto_recv_status st = read_full(fd, deadline_ns, header, sizeof header);
    if (st != PYPROTO_RECV_OK)
        return st;
    if (header[1] > max_frame)
        return PYPROTO_RECV_INVALID;
    uint8_t *buf = malloc((size_t)header[1] + 1);
    if (!buf)
        return PYPROTO_RECV_INVALID;
    if ((st = read_full(fd, deadline_ns, buf, header[1])) != PYPROTO_RECV_OK) {
        free(buf);
        return st;
    }
    buf[header[1]] = 0;
    *type = header[0];
    *payload = buf;
    *len = header[1];
    return PYPROTO_RECV_OK;
}

void pyproto_append_call_answer(pyproto_text *t, uint64_t call,
                                const osp_error *refused, double value) {
    const char *message = refused ? osp_error_message(refused) : "";
    uint32_t status = refused ? 1 : 0, len = (uint32_t)strlen(message);
    pyproto_text_append(t, &call, 8);
    pyproto_text_append(t, &status, 4);
    pyproto_text_append(t, &value, 8);
    pyproto_text_append(t, &len, 4);
    pyproto_text_append(t, message, len);
}
