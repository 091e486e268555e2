/* The safetensors reader: see safetensors.h for the format and checks. */
#include "safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* How deep values inside "__metadata__" may nest before we refuse them. */
#define MAX_NESTING 64

typedef struct dtype_info {
    const char *name;
    size_t size;
} dtype_info;

static const dtype_info known_dtypes[] = {
    {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E4M3", 1}, {"F8_E5M2", 1},
    {"U16", 2},  {"I16", 2}, {"F16", 2}, {"BF16", 2},    {"U32", 4},
    {"I32", 4},  {"F32", 4}, {"U64", 8}, {"I64", 8},     {"F64", 8},
};

/* Where the parser is in the header; `start` is file byte 8. */
typedef struct header_cursor {
    const uint8_t *start;
    const uint8_t *p;
    const uint8_t *end;
    const char *what;
} header_cursor;

static osp_error *syntax_error(const header_cursor *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static osp_error *file_error(const char *what, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* INVALID_ARG "<file>: bad safetensors header at byte <n>: <why>", where n
 * is the cursor's offset in the file. */
static osp_error *syntax_error(const header_cursor *c, const char *fmt, ...) {
    char why[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    return osp_error_new(OSP_ERROR_INVALID_ARG,
                         "%s: bad safetensors header at byte %zu: %s", c->what,
                         (size_t)(c->p - c->start) + 8, why);
}

/* INVALID_ARG "<file>: <why>", for errors that are not about syntax. */
static osp_error *file_error(const char *what, const char *fmt, ...) {
    char why[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    return osp_error_new(OSP_ERROR_INVALID_ARG, "%s: %s", what, why);
}

static osp_error *out_of_memory(const char *what) {
    return osp_error_new(OSP_ERROR_UNAVAILABLE,
                         "%s: out of memory reading the safetensors header",
                         what);
}

static void skip_ws(header_cursor *c) {
    while (c->p < c->end &&
           (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
        c->p++;
}

/* Consumes `ch` after optional whitespace; `where` completes the message. */
static osp_error *expect(header_cursor *c, char ch, const char *where) {
    skip_ws(c);
    if (c->p >= c->end)
        return syntax_error(c, "expected '%c' %s, found the end of the header",
                            ch, where);
    if (*c->p != (uint8_t)ch)
        return syntax_error(c, "expected '%c' %s", ch, where);
    c->p++;
    return NULL;
}

/* Consumes `ch` and returns true if it is the next non-space byte. */
static bool accept(header_cursor *c, char ch) {
    skip_ws(c);
    if (c->p < c->end && *c->p == (uint8_t)ch) {
        c->p++;
        return true;
    }
    return false;
}

static bool digit_at(const uint8_t *p, const uint8_t *end) {
    return p < end && *p >= '0' && *p <= '9';
}

static int hex_value(uint8_t ch) {
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F')
        return ch - 'A' + 10;
    return -1;
}

/* Reads the 4 hex digits of a \u escape. */
static bool read_hex4(header_cursor *c, uint32_t *out) {
    if (c->end - c->p < 4)
        return false;
    uint32_t value = 0;
    for (int i = 0; i < 4; i++) {
        int h = hex_value(c->p[i]);
        if (h < 0)
            return false;
        value = value << 4 | (uint32_t)h;
    }
    c->p += 4;
    *out = value;
    return true;
}

/* Writes code point cp as UTF-8 to dst (when not NULL); returns its length. */
static size_t put_utf8(uint8_t *dst, uint32_t cp) {
    uint8_t buf[4];
    size_t n;
    if (cp < 0x80) {
        buf[0] = (uint8_t)cp;
        n = 1;
    } else if (cp < 0x800) {
        buf[0] = (uint8_t)(0xC0 | cp >> 6);
        buf[1] = (uint8_t)(0x80 | (cp & 0x3F));
        n = 2;
    } else if (cp < 0x10000) {
        buf[0] = (uint8_t)(0xE0 | cp >> 12);
        buf[1] = (uint8_t)(0x80 | (cp >> 6 & 0x3F));
        buf[2] = (uint8_t)(0x80 | (cp & 0x3F));
        n = 3;
    } else {
        buf[0] = (uint8_t)(0xF0 | cp >> 18);
        buf[1] = (uint8_t)(0x80 | (cp >> 12 & 0x3F));
        buf[2] = (uint8_t)(0x80 | (cp >> 6 & 0x3F));
        buf[3] = (uint8_t)(0x80 | (cp & 0x3F));
        n = 4;
    }
    if (dst)
        memcpy(dst, buf, n);
    return n;
}

/* Decodes the escape after a backslash (the cursor is past the '\') into
 * a code point. Surrogate pairs are joined; a lone surrogate or \u0000
 * (which would cut a C string short) is an error. */
static osp_error *parse_escape(header_cursor *c, uint32_t *cp) {
    static const char simple[] = "\"\\/bfnrt";
    static const char meaning[] = "\"\\/\b\f\n\r\t";
    uint8_t esc = *c->p++;
    const char *hit = esc ? strchr(simple, esc) : NULL;
    if (hit) {
        *cp = (uint8_t)meaning[hit - simple];
        return NULL;
    }
    if (esc != 'u')
        return syntax_error(c, "unknown escape in a string");
    uint32_t value, low;
    if (!read_hex4(c, &value))
        return syntax_error(c, "a \\u escape needs 4 hex digits");
    if (value >= 0xDC00 && value <= 0xDFFF)
        return syntax_error(c, "lone low surrogate in a string");
    if (value >= 0xD800 && value <= 0xDBFF) {
        if (c->end - c->p < 2 || c->p[0] != '\\' || c->p[1] != 'u')
            return syntax_error(c, "lone high surrogate in a string");
        c->p += 2;
        if (!read_hex4(c, &low) || low < 0xDC00 || low > 0xDFFF)
            return syntax_error(c, "bad low surrogate in a string");
        value = 0x10000 + ((value - 0xD800) << 10) + (low - 0xDC00);
    }
    if (value == 0)
        return syntax_error(c, "\\u0000 in a string");
    *cp = value;
    return NULL;
}

/*
 * Parses a JSON string at the cursor (after whitespace). With `out`, sets
 * *out to the decoded NUL-terminated UTF-8 text (caller frees); with NULL
 * it only checks the string. Raw control characters are errors.
 */
static osp_error *parse_string(header_cursor *c, char **out) {
    skip_ws(c);
    if (c->p >= c->end || *c->p != '"')
        return syntax_error(c, "expected a string");
    c->p++;
    /* Find the closing quote first: the decoded text is never longer than
     * its encoding, so that bounds the buffer. */
    const uint8_t *close = c->p;
    while (close < c->end && *close != '"')
        close += (*close == '\\' && close + 1 < c->end) ? 2 : 1;
    if (close >= c->end)
        return syntax_error(c, "unterminated string");

    uint8_t *text = NULL;
    if (out) {
        text = malloc((size_t)(close - c->p) + 1);
        if (!text)
            return out_of_memory(c->what);
    }
    osp_error *err = NULL;
    size_t n = 0;
    while (c->p < close) {
        uint8_t ch = *c->p;
        if (ch < 0x20) {
            err = syntax_error(c, "control character in a string");
            goto out;
        }
        if (ch != '\\') {
            if (text)
                text[n] = ch;
            n++;
            c->p++;
            continue;
        }
        c->p++;
        uint32_t cp = 0;
        if ((err = parse_escape(c, &cp)))
            goto out;
        n += put_utf8(text ? text + n : NULL, cp);
    }
    if (c->p != close) { /* an escape ran over the quote: cannot happen */
        err = syntax_error(c, "malformed string");
        goto out;
    }
    c->p = close + 1;
    if (text) {
        text[n] = '\0';
        *out = (char *)text;
        text = NULL;
    }
out:
    free(text);
    return err;
}

/* A non-negative JSON integer that fits uint64: no sign, fraction,
 * exponent or leading zero. `field` names it in messages. */
static osp_error *parse_u64(header_cursor *c, const char *field,
                            uint64_t *out) {
    skip_ws(c);
    const uint8_t *begin = c->p;
    uint64_t value = 0;
    while (digit_at(c->p, c->end)) {
        unsigned d = (unsigned)(*c->p - '0');
        if (value > (UINT64_MAX - d) / 10)
            return syntax_error(c, "%s: number too large", field);
        value = value * 10 + d;
        c->p++;
    }
    size_t digits = (size_t)(c->p - begin);
    bool more = c->p < c->end && (*c->p == '.' || *c->p == 'e' || *c->p == 'E');
    if (digits == 0 || (digits > 1 && *begin == '0') || more) {
        c->p = begin;
        return syntax_error(c, "%s: expected a non-negative integer", field);
    }
    *out = value;
    return NULL;
}

/* Parses "[n, ...]" of at most `cap` non-negative integers. */
static osp_error *parse_u64_array(header_cursor *c, const char *field,
                                  uint64_t *values, size_t cap, size_t *count) {
    osp_error *err;
    if ((err = expect(c, '[', "to open an array")))
        return err;
    size_t n = 0;
    if (!accept(c, ']')) {
        do {
            if (n == cap)
                return syntax_error(c, "%s has more than %zu entries", field,
                                    cap);
            if ((err = parse_u64(c, field, &values[n++])))
                return err;
        } while (accept(c, ','));
        if ((err = expect(c, ']', "to close an array")))
            return err;
    }
    *count = n;
    return NULL;
}

static osp_error *skip_literal(header_cursor *c, const char *word) {
    size_t n = strlen(word);
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, word, n) != 0)
        return syntax_error(c, "expected a value");
    c->p += n;
    return NULL;
}

/* Steps over a JSON number (the full grammar, value unused). */
static osp_error *skip_number(header_cursor *c) {
    const uint8_t *p = c->p, *end = c->end;
    if (p < end && *p == '-')
        p++;
    if (p < end && *p == '0')
        p++;
    else if (digit_at(p, end))
        while (digit_at(p, end))
            p++;
    else
        return syntax_error(c, "expected a value");
    if (p < end && *p == '.') {
        if (!digit_at(++p, end))
            return syntax_error(c, "expected digits after '.'");
        while (digit_at(p, end))
            p++;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < end && (*p == '+' || *p == '-'))
            p++;
        if (!digit_at(p, end))
            return syntax_error(c, "expected digits in an exponent");
        while (digit_at(p, end))
            p++;
    }
    c->p = p;
    return NULL;
}

/* Checks and steps over any JSON value nested at most MAX_NESTING deep
 * (for "__metadata__" and unknown keys). */
static osp_error *skip_value(header_cursor *c, int depth) {
    osp_error *err;
    if (depth > MAX_NESTING)
        return syntax_error(c, "values nested more than %d deep", MAX_NESTING);
    skip_ws(c);
    if (c->p >= c->end)
        return syntax_error(c, "expected a value, found the end of the header");
    switch (*c->p) {
    case '"':
        return parse_string(c, NULL);
    case '{':
        c->p++;
        if (accept(c, '}'))
            return NULL;
        do {
            if ((err = parse_string(c, NULL)) ||
                (err = expect(c, ':', "after a key")) ||
                (err = skip_value(c, depth + 1)))
                return err;
        } while (accept(c, ','));
        return expect(c, '}', "to close an object");
    case '[':
        c->p++;
        if (accept(c, ']'))
            return NULL;
        do {
            if ((err = skip_value(c, depth + 1)))
                return err;
        } while (accept(c, ','));
        return expect(c, ']', "to close an array");
    case 't':
        return skip_literal(c, "true");
    case 'f':
        return skip_literal(c, "false");
    case 'n':
        return skip_literal(c, "null");
    default:
        return skip_number(c);
    }
}

static const dtype_info *find_dtype(const char *name) {
    for (size_t i = 0; i < sizeof known_dtypes / sizeof *known_dtypes; i++)
        if (strcmp(known_dtypes[i].name, name) == 0)
            return &known_dtypes[i];
    return NULL;
}

/* Sets t's dtype, shape, data and byte_size from the parsed fields and
 * checks that the offsets lie in the `data_len` bytes of tensor data at
 * `data` and hold exactly shape x element size bytes. */
static osp_error *check_tensor_info(const char *what, const char *name,
                                    const char *dtype, const uint64_t *dims,
                                    size_t rank, const uint64_t *offsets,
                                    size_t n_offsets, const uint8_t *data,
                                    size_t data_len, safetensors_tensor *t) {
    const dtype_info *info = find_dtype(dtype);
    if (!info)
        return file_error(what, "tensor '%s' has unknown dtype '%s'", name,
                          dtype);
    if (n_offsets != 2)
        return file_error(
            what, "tensor '%s': data_offsets must be [begin, end]", name);
    uint64_t count = 1, bytes;
    t->shape.rank = (int)rank;
    for (size_t i = 0; i < rank; i++) {
        if (dims[i] > (uint64_t)INT64_MAX ||
            __builtin_mul_overflow(count, dims[i], &count))
            return file_error(what, "tensor '%s': shape too large", name);
        t->shape.dims[i] = (int64_t)dims[i];
    }
    if (__builtin_mul_overflow(count, (uint64_t)info->size, &bytes) ||
        bytes > SIZE_MAX)
        return file_error(what, "tensor '%s': shape too large", name);
    uint64_t begin = offsets[0], end = offsets[1];
    if (begin > end || end > data_len)
        return file_error(what,
                          "tensor '%s': data_offsets [%llu,%llu] lie outside "
                          "the %zu bytes of tensor data",
                          name, (unsigned long long)begin,
                          (unsigned long long)end, data_len);
    if (end - begin != bytes) {
        char shape[160];
        return file_error(what,
                          "tensor '%s': data_offsets [%llu,%llu] hold %llu "
                          "bytes but %s %s needs %llu",
                          name, (unsigned long long)begin,
                          (unsigned long long)end,
                          (unsigned long long)(end - begin), dtype,
                          osp_shape_format(&t->shape, shape, sizeof shape),
                          (unsigned long long)bytes);
    }
    strcpy(t->dtype, info->name);
    t->element_size = info->size;
    t->byte_size = (size_t)bytes;
    t->data = data + begin;
    return NULL;
}

/*
 * Parses one tensor description {"dtype":.., "shape":.., "data_offsets":..}
 * (keys in any order, each exactly once; unknown keys are skipped) and
 * fills t (all but its name) over the tensor data at `data`.
 */
static osp_error *parse_tensor_info(header_cursor *c, const char *name,
                                    const uint8_t *data, size_t data_len,
                                    safetensors_tensor *t) {
    osp_error *err = NULL;
    char *key = NULL, *dtype = NULL;
    uint64_t dims[OSP_MAX_DIMS], offsets[2];
    size_t rank = 0, n_offsets = 0;
    bool have_shape = false, have_offsets = false;

    if ((err = expect(c, '{', "to open a tensor description")))
        goto out;
    if (!accept(c, '}')) {
        do {
            free(key);
            key = NULL;
            if ((err = parse_string(c, &key)) ||
                (err = expect(c, ':', "after a key")))
                goto out;
            bool is_dtype = strcmp(key, "dtype") == 0;
            bool is_shape = strcmp(key, "shape") == 0;
            bool is_offsets = strcmp(key, "data_offsets") == 0;
            if ((is_dtype && dtype) || (is_shape && have_shape) ||
                (is_offsets && have_offsets))
                err = syntax_error(c, "tensor '%s': duplicate key '%s'", name,
                                   key);
            else if (is_dtype)
                err = parse_string(c, &dtype);
            else if (is_shape)
                err = parse_u64_array(c, "shape", dims, OSP_MAX_DIMS, &rank);
            else if (is_offsets)
                err =
                    parse_u64_array(c, "data_offsets", offsets, 2, &n_offsets);
            else
                err = skip_value(c, 1);
            if (err)
                goto out;
            have_shape |= is_shape;
            have_offsets |= is_offsets;
        } while (accept(c, ','));
        if ((err = expect(c, '}', "to close a tensor description")))
            goto out;
    }
    if (!dtype || !have_shape || !have_offsets) {
        err = file_error(c->what, "tensor '%s' lacks \"%s\"", name,
                         !dtype        ? "dtype"
                         : !have_shape ? "shape"
                                       : "data_offsets");
        goto out;
    }
    err = check_tensor_info(c->what, name, dtype, dims, rank, offsets,
                            n_offsets, data, data_len, t);
out:
    free(key);
    free(dtype);
    return err;
}

static int compare_by_name(const void *a, const void *b) {
    const safetensors_tensor *x = *(const safetensors_tensor *const *)a;
    const safetensors_tensor *y = *(const safetensors_tensor *const *)b;
    return strcmp(x->name, y->name);
}

static int compare_by_offset(const void *a, const void *b) {
    const safetensors_tensor *x = *(const safetensors_tensor *const *)a;
    const safetensors_tensor *y = *(const safetensors_tensor *const *)b;
    return (x->data > y->data) - (x->data < y->data);
}

/* Refuses duplicate names and tensors whose bytes overlap. */
static osp_error *check_unique_and_disjoint(const safetensors *st,
                                            const char *what) {
    osp_error *err = NULL;
    size_t n = st->n_tensors;
    if (n < 2)
        return NULL;
    const safetensors_tensor **sorted = malloc(n * sizeof *sorted);
    if (!sorted)
        return out_of_memory(what);
    for (size_t i = 0; i < n; i++)
        sorted[i] = &st->tensors[i];

    qsort(sorted, n, sizeof *sorted, compare_by_name);
    for (size_t i = 1; i < n; i++) {
        if (strcmp(sorted[i - 1]->name, sorted[i]->name) == 0) {
            err =
                file_error(what, "tensor '%s' appears twice", sorted[i]->name);
            goto out;
        }
    }
    qsort(sorted, n, sizeof *sorted, compare_by_offset);
    const safetensors_tensor *prev = NULL;
    for (size_t i = 0; i < n; i++) {
        if (sorted[i]->byte_size == 0)
            continue; /* an empty tensor overlaps nothing */
        if (prev && prev->data + prev->byte_size > sorted[i]->data) {
            err = file_error(what, "tensors '%s' and '%s' overlap", prev->name,
                             sorted[i]->name);
            goto out;
        }
        prev = sorted[i];
    }
out:
    free(sorted);
    return err;
}

/* Makes room for one more tensor in st. */
static osp_error *grow_tensors(safetensors *st, size_t *cap, const char *what) {
    if (st->n_tensors < *cap)
        return NULL;
    size_t new_cap = *cap ? *cap * 2 : 8;
    if (new_cap > SIZE_MAX / sizeof *st->tensors)
        return out_of_memory(what);
    safetensors_tensor *grown =
        realloc(st->tensors, new_cap * sizeof *st->tensors);
    if (!grown)
        return out_of_memory(what);
    st->tensors = grown;
    *cap = new_cap;
    return NULL;
}

osp_error *safetensors_parse(const uint8_t *bytes, size_t len, const char *what,
                             safetensors **out) {
    osp_error *err = NULL;
    safetensors *st = NULL;
    char *name = NULL;
    size_t cap = 0;
    bool seen_metadata = false;

    if (len < 8)
        return file_error(what,
                          "%zu bytes is too short for a safetensors file "
                          "(it starts with an 8-byte header length)",
                          len);
    uint64_t header_len = 0;
    for (int i = 0; i < 8; i++)
        header_len |= (uint64_t)bytes[i] << (8 * i);
    if (header_len > OSP_SAFETENSORS_MAX_HEADER)
        return file_error(what,
                          "safetensors header length %llu exceeds the limit "
                          "of %llu bytes",
                          (unsigned long long)header_len,
                          (unsigned long long)OSP_SAFETENSORS_MAX_HEADER);
    if (header_len > len - 8)
        return file_error(what,
                          "safetensors header length %llu exceeds the %zu "
                          "bytes that follow it",
                          (unsigned long long)header_len, len - 8);
    header_cursor c = {bytes + 8, bytes + 8, bytes + 8 + header_len, what};
    const uint8_t *data = c.end;
    size_t data_len = len - 8 - (size_t)header_len;

    st = calloc(1, sizeof *st);
    if (!st)
        return out_of_memory(what);
    if ((err = expect(&c, '{', "at the start of the header")))
        goto out;
    if (!accept(&c, '}')) {
        do {
            if ((err = parse_string(&c, &name)) ||
                (err = expect(&c, ':', "after a tensor name")))
                goto out;
            if (strcmp(name, "__metadata__") == 0) {
                skip_ws(&c);
                if (seen_metadata || c.p >= c.end || *c.p != '{') {
                    err = syntax_error(&c, "__metadata__ must be one object");
                    goto out;
                }
                seen_metadata = true;
                if ((err = skip_value(&c, 1)))
                    goto out;
            } else {
                if ((err = grow_tensors(st, &cap, what)))
                    goto out;
                safetensors_tensor *t = &st->tensors[st->n_tensors];
                memset(t, 0, sizeof *t);
                if ((err = parse_tensor_info(&c, name, data, data_len, t)))
                    goto out;
                t->name = name;
                name = NULL;
                st->n_tensors++;
            }
            free(name);
            name = NULL;
        } while (accept(&c, ','));
        if ((err = expect(&c, '}', "to close the header")))
            goto out;
    }
    skip_ws(&c);
    if (c.p != c.end) {
        err = syntax_error(&c, "unexpected bytes after the header object");
        goto out;
    }
    if ((err = check_unique_and_disjoint(st, what)))
        goto out;
    *out = st;
    st = NULL;
out:
    free(name);
    safetensors_free(st);
    return err;
}

osp_error *safetensors_load(const char *path, safetensors **out) {
    osp_error *err = NULL;
    uint8_t *bytes = NULL;
    struct stat sb;

    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return osp_error_new(errno == ENOENT ? OSP_ERROR_NOT_FOUND
                                             : OSP_ERROR_UNAVAILABLE,
                             "cannot open '%s': %s", path, strerror(errno));
    if (fstat(fd, &sb) != 0) {
        err = osp_error_new(OSP_ERROR_UNAVAILABLE, "cannot stat '%s': %s", path,
                            strerror(errno));
        goto out;
    }
    if (!S_ISREG(sb.st_mode)) {
        err = file_error(path, "not a regular file");
        goto out;
    }
    if ((uint64_t)sb.st_size > SIZE_MAX) {
        err = file_error(path, "file too large");
        goto out;
    }
    size_t size = (size_t)sb.st_size, got = 0;
    bytes = malloc(size ? size : 1);
    if (!bytes) {
        err =
            osp_error_new(OSP_ERROR_UNAVAILABLE,
                          "cannot allocate %zu bytes to read '%s'", size, path);
        goto out;
    }
    while (got < size) {
        ssize_t n = read(fd, bytes + got, size - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            err = osp_error_new(OSP_ERROR_UNAVAILABLE, "cannot read '%s': %s",
                                path, strerror(errno));
            goto out;
        }
        if (n == 0)
            break;
        got += (size_t)n;
    }
    if (got != size) {
        err = osp_error_new(OSP_ERROR_UNAVAILABLE,
                            "'%s' shrank while being read", path);
        goto out;
    }
    if ((err = safetensors_parse(bytes, size, path, out)))
        goto out;
    (*out)->owned_bytes_ = bytes;
    bytes = NULL;
out:
    free(bytes);
    close(fd);
    return err;
}

const safetensors_tensor *safetensors_find(const safetensors *st,
                                           const char *name) {
    for (size_t i = 0; i < st->n_tensors; i++)
        if (strcmp(st->tensors[i].name, name) == 0)
            return &st->tensors[i];
    return NULL;
}

void safetensors_free(safetensors *st) {
    if (!st)
        return;
    for (size_t i = 0; i < st->n_tensors; i++)
        free(st->tensors[i].name);
    free(st->tensors);
    free(st->owned_bytes_);
    free(st);
}
