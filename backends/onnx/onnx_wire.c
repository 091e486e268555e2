/*
 * Bytes to protobuf-c messages for the ONNX loader: reading a file under a
 * size limit, a non-recursive walk of the wire format that refuses what
 * protobuf-c would recurse too deep into (or choke on, with a worse
 * message), and an allocator that bounds what protobuf-c may hold.
 */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "onnx_load_internal.h"

/* Largest field number protobuf allows (2^29 - 1). */
#define MAX_FIELD_NUMBER 536870911u

osp_error *onnx__read_file(const char *path, uint64_t max_bytes,
                           const char *what, uint8_t **data, size_t *len) {
    osp_error *err = NULL;
    uint8_t *buf = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return osp_error_new(OSP_ERROR_INVALID_ARG, "cannot open the %s: %s",
                             what, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        err = osp_error_new(OSP_ERROR_INVALID_ARG, "cannot stat the %s: %s",
                            what, strerror(errno));
        goto out;
    }
    if (!S_ISREG(st.st_mode)) {
        err = osp_error_new(OSP_ERROR_INVALID_ARG,
                            "the %s is not a regular file", what);
        goto out;
    }
    if ((uint64_t)st.st_size > max_bytes || (uint64_t)st.st_size > SIZE_MAX) {
        err = osp_error_new(OSP_ERROR_INVALID_ARG,
                            "the %s file has %lld bytes, over the limit of "
                            "%llu",
                            what, (long long)st.st_size,
                            (unsigned long long)max_bytes);
        goto out;
    }
    size_t size = (size_t)st.st_size;
    buf = malloc(size ? size : 1);
    if (!buf) {
        err = osp_error_out_of_memory();
        goto out;
    }
    size_t done = 0;
    while (done < size) {
        ssize_t got = read(fd, buf + done, size - done);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            err = osp_error_new(OSP_ERROR_INVALID_ARG, "cannot read the %s: %s",
                                what, strerror(errno));
            goto out;
        }
        if (got == 0) {
            err = osp_error_new(OSP_ERROR_INVALID_ARG,
                                "the %s file shrank while it was read", what);
            goto out;
        }
        done += (size_t)got;
    }
    *data = buf;
    *len = size;
    buf = NULL;
out:
    free(buf);
    close(fd);
    return err;
}

/* ---- the budgeted allocator ---- */

/* Each block carries its size in front, so frees are credited exactly. */
typedef union block_header {
    size_t size;
    max_align_t align_;
} block_header;

static void *budget_alloc(void *data, size_t size) {
    onnx__pb_budget *b = data;
    if (size > b->limit - b->live || size > SIZE_MAX - sizeof(block_header)) {
        b->exceeded = true;
        return NULL;
    }
    block_header *h = malloc(sizeof *h + size);
    if (!h) {
        b->out_of_memory = true;
        return NULL;
    }
    h->size = size;
    b->live += size;
    return h + 1;
}

static void budget_free(void *data, void *ptr) {
    onnx__pb_budget *b = data;
    if (!ptr)
        return;
    block_header *h = (block_header *)ptr - 1;
    b->live -= h->size;
    free(h);
}

void onnx__pb_free(ProtobufCMessage *msg, onnx__pb_budget *budget) {
    if (msg)
        protobuf_c_message_free_unpacked(msg, &budget->allocator);
}

void onnx__pb_release_bytes(onnx__pb_budget *budget, ProtobufCBinaryData *bd) {
    budget_free(budget, bd->data);
    bd->data = NULL;
    bd->len = 0;
}

/* ---- the wire-format check ---- */

/* A message being walked: its type and where its bytes end. */
typedef struct wire_frame {
    const ProtobufCMessageDescriptor *desc;
    size_t end;
} wire_frame;

/* Reads a varint of at most max_bytes bytes at data[*pos..end). */
static bool read_varint(const uint8_t *data, size_t end, size_t *pos,
                        unsigned max_bytes, uint64_t *value) {
    uint64_t v = 0;
    for (unsigned i = 0; i < max_bytes; i++) {
        if (*pos >= end)
            return false;
        uint8_t byte = data[(*pos)++];
        v |= (uint64_t)(byte & 0x7f) << (7 * i);
        if (!(byte & 0x80)) {
            *value = v;
            return true;
        }
    }
    return false;
}

/* The wire type a field of `fd`'s type is written with (repeated scalars
 * may also come packed, as length-delimited). */
static unsigned expected_wire_type(const ProtobufCFieldDescriptor *fd) {
    switch (fd->type) {
    case PROTOBUF_C_TYPE_FIXED32:
    case PROTOBUF_C_TYPE_SFIXED32:
    case PROTOBUF_C_TYPE_FLOAT:
        return PROTOBUF_C_WIRE_TYPE_32BIT;
    case PROTOBUF_C_TYPE_FIXED64:
    case PROTOBUF_C_TYPE_SFIXED64:
    case PROTOBUF_C_TYPE_DOUBLE:
        return PROTOBUF_C_WIRE_TYPE_64BIT;
    case PROTOBUF_C_TYPE_STRING:
    case PROTOBUF_C_TYPE_BYTES:
    case PROTOBUF_C_TYPE_MESSAGE:
        return PROTOBUF_C_WIRE_TYPE_LENGTH_PREFIXED;
    default:
        return PROTOBUF_C_WIRE_TYPE_VARINT;
    }
}

/* Checks the payload data[pos..end) of a packed repeated scalar field:
 * whole fixed-size values, or varints of at most 10 bytes each. */
static osp_error *packed_check(const ProtobufCFieldDescriptor *fd,
                               const uint8_t *data, size_t pos, size_t end,
                               size_t key_at,
                               const ProtobufCMessageDescriptor *msg) {
    unsigned wire_type = expected_wire_type(fd);
    size_t width = wire_type == PROTOBUF_C_WIRE_TYPE_64BIT   ? 8
                   : wire_type == PROTOBUF_C_WIRE_TYPE_32BIT ? 4
                                                             : 0;
    bool whole = true;
    if (width) {
        whole = (end - pos) % width == 0;
    } else {
        uint64_t value;
        while (whole && pos < end)
            whole = read_varint(data, end, &pos, 10, &value);
    }
    if (whole)
        return NULL;
    return osp_error_new(OSP_ERROR_INVALID_ARG,
                         "bad protobuf at byte %zu: packed field %s of a %s "
                         "message ends inside a value",
                         key_at, fd->name, msg->name);
}

/*
 * Walks `len` bytes of a `desc` message and every known sub-message in it,
 * iteratively, with an explicit stack of at most max_depth frames.
 * protobuf-c's own limits are kept: keys of at most 5 bytes, varints of at
 * most 10, lengths of at most 5 bytes and INT_MAX. Unknown fields are
 * skipped (protobuf-c keeps their bytes without parsing them).
 */
static osp_error *wire_check(const ProtobufCMessageDescriptor *desc,
                             const uint8_t *data, size_t len,
                             unsigned max_depth) {
    wire_frame stack[ONNX__WIRE_MAX_DEPTH];
    unsigned depth = 1;
    size_t pos = 0;
    stack[0] = (wire_frame){desc, len};
    for (;;) {
        while (depth > 0 && pos == stack[depth - 1].end)
            depth--;
        if (depth == 0)
            return NULL;
        const wire_frame *top = &stack[depth - 1];
        size_t key_at = pos;
        uint64_t key;
        if (!read_varint(data, top->end, &pos, 5, &key))
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "bad protobuf at byte %zu: a field key runs "
                                 "past the end of its %s message",
                                 key_at, top->desc->name);
        uint64_t number = key >> 3;
        unsigned wire_type = (unsigned)(key & 7);
        if (number == 0 || number > MAX_FIELD_NUMBER)
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "bad protobuf at byte %zu: field number %llu "
                                 "in a %s message",
                                 key_at, (unsigned long long)number,
                                 top->desc->name);
        const ProtobufCFieldDescriptor *fd =
            protobuf_c_message_descriptor_get_field(top->desc,
                                                    (unsigned)number);
        if (fd && wire_type != expected_wire_type(fd) &&
            !(fd->label == PROTOBUF_C_LABEL_REPEATED &&
              wire_type == PROTOBUF_C_WIRE_TYPE_LENGTH_PREFIXED))
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "bad protobuf at byte %zu: field %s of a %s "
                                 "message has wire type %u (is this an ONNX "
                                 "file?)",
                                 key_at, fd->name, top->desc->name, wire_type);
        uint64_t value;
        osp_error *err;
        switch (wire_type) {
        case PROTOBUF_C_WIRE_TYPE_VARINT:
            if (!read_varint(data, top->end, &pos, 10, &value))
                return osp_error_new(OSP_ERROR_INVALID_ARG,
                                     "bad protobuf at byte %zu: a varint "
                                     "runs past the end of its %s message",
                                     key_at, top->desc->name);
            continue;
        case PROTOBUF_C_WIRE_TYPE_64BIT:
        case PROTOBUF_C_WIRE_TYPE_32BIT: {
            size_t width = wire_type == PROTOBUF_C_WIRE_TYPE_64BIT ? 8 : 4;
            if (top->end - pos < width)
                return osp_error_new(OSP_ERROR_INVALID_ARG,
                                     "bad protobuf at byte %zu: a fixed-size "
                                     "value runs past the end of its %s "
                                     "message",
                                     key_at, top->desc->name);
            pos += width;
            continue;
        }
        case PROTOBUF_C_WIRE_TYPE_LENGTH_PREFIXED:
            break;
        default:
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "bad protobuf at byte %zu: wire type %u "
                                 "(groups and unknown types are not "
                                 "supported) in a %s message",
                                 key_at, wire_type, top->desc->name);
        }
        if (!read_varint(data, top->end, &pos, 5, &value) ||
            value > INT32_MAX || value > top->end - pos)
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "bad protobuf at byte %zu: a length runs "
                                 "past the end of its %s message",
                                 key_at, top->desc->name);
        size_t payload = (size_t)value;
        if (fd && fd->type == PROTOBUF_C_TYPE_MESSAGE) {
            if (depth >= max_depth)
                return osp_error_new(OSP_ERROR_INVALID_ARG,
                                     "bad protobuf at byte %zu: messages "
                                     "nest deeper than %u levels",
                                     key_at, max_depth);
            stack[depth++] = (wire_frame){fd->descriptor, pos + payload};
            continue;
        }
        if (fd &&
            expected_wire_type(fd) != PROTOBUF_C_WIRE_TYPE_LENGTH_PREFIXED) {
            err = packed_check(fd, data, pos, pos + payload, key_at, top->desc);
            if (err)
                return err;
        }
        if (fd && fd->type == PROTOBUF_C_TYPE_STRING &&
            memchr(data + pos, 0, payload))
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "bad protobuf at byte %zu: string field %s "
                                 "of a %s message holds a NUL byte",
                                 key_at, fd->name, top->desc->name);
        pos += payload;
    }
}

osp_error *onnx__pb_unpack(const ProtobufCMessageDescriptor *desc,
                           const uint8_t *data, size_t len, unsigned max_depth,
                           onnx__pb_budget *budget, ProtobufCMessage **out) {
    if (max_depth > ONNX__WIRE_MAX_DEPTH)
        max_depth = ONNX__WIRE_MAX_DEPTH;
    if (max_depth == 0)
        max_depth = 1;
    static const uint8_t empty[1];
    if (!data)
        data = empty;
    osp_error *err = wire_check(desc, data, len, max_depth);
    if (err)
        return err;

    size_t limit = SIZE_MAX;
    if (len <= (SIZE_MAX - ONNX__UNPACK_SLACK) / ONNX__UNPACK_BYTES_PER_BYTE)
        limit = len * ONNX__UNPACK_BYTES_PER_BYTE + ONNX__UNPACK_SLACK;
    *budget = (onnx__pb_budget){
        .allocator = {budget_alloc, budget_free, budget},
        .limit = limit,
    };
    ProtobufCMessage *msg =
        protobuf_c_message_unpack(desc, &budget->allocator, len, data);
    if (!msg) {
        if (budget->exceeded)
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "the %s message would take more than %zu "
                                 "bytes of memory to unpack",
                                 desc->name, limit);
        if (budget->out_of_memory)
            return osp_error_out_of_memory();
        /* The walk above accepts only what protobuf-c takes; this is a
         * safety net. */
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "protobuf-c cannot unpack the %s message",
                             desc->name);
    }
    *out = msg;
    return NULL;
}
