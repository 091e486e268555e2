#include "json_util.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_dtoa.h"

/* ---- output buffer ---- */

/* rapidjson's escaping: '"', '\\' and control characters; '/' and bytes
 * >= 0x80 are written as they are. */
void json_write_string(bytebuf *b, const char *s, size_t n) {
    static const char hex[] = "0123456789ABCDEF";
    /* Worst case 6 bytes per input byte plus the quotes. */
    if (n > (SIZE_MAX - 2) / 6 || !bytebuf_reserve(b, n * 6 + 2))
        return;
    char *o = b->data + b->len;
    *o++ = '"';
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\') {
            *o++ = (char)c;
            continue;
        }
        *o++ = '\\';
        switch (c) {
        case '"':
            *o++ = '"';
            break;
        case '\\':
            *o++ = '\\';
            break;
        case '\b':
            *o++ = 'b';
            break;
        case '\f':
            *o++ = 'f';
            break;
        case '\n':
            *o++ = 'n';
            break;
        case '\r':
            *o++ = 'r';
            break;
        case '\t':
            *o++ = 't';
            break;
        default:
            *o++ = 'u';
            *o++ = '0';
            *o++ = '0';
            *o++ = hex[c >> 4];
            *o++ = hex[c & 0xF];
        }
    }
    *o++ = '"';
    b->len = (size_t)(o - b->data);
}

void json_write_cstr(bytebuf *b, const char *s) {
    json_write_string(b, s, strlen(s));
}

void json_write_uint(bytebuf *b, uint64_t v) {
    char tmp[24];
    int n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    if (!bytebuf_reserve(b, (size_t)n))
        return;
    while (n)
        b->data[b->len++] = tmp[--n];
}

void json_write_int(bytebuf *b, int64_t v) {
    if (v < 0) {
        bytebuf_putc(b, '-');
        json_write_uint(b, (uint64_t)0 - (uint64_t)v);
    } else {
        json_write_uint(b, (uint64_t)v);
    }
}

void json_write_double(bytebuf *b, double v) {
    if (!bytebuf_reserve(b, JSON_DTOA_BUFSIZE))
        return;
    b->len += json_dtoa(v, b->data + b->len);
}

void json_write_bool(bytebuf *b, bool v) {
    if (v)
        bytebuf_put(b, "true", 4);
    else
        bytebuf_put(b, "false", 5);
}

/* ---- string decoding ---- */

size_t json_utf8_encode(unsigned long cp, char out[4]) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* 4 hex digits that json_scan has checked. */
static unsigned long checked_hex4(const char *p) {
    unsigned long v = 0;
    for (int i = 0; i < 4; i++)
        v = v << 4 | (unsigned long)json_hex_value(p[i]);
    return v;
}

size_t json_string_decode(const char *text, size_t *pos, char *out) {
    size_t p = *pos + 1;
    size_t n = 0;
    char *o = out;
    for (;;) {
        size_t run = p;
        while (text[p] != '"' && text[p] != '\\')
            p++;
        if (o) {
            memcpy(o, text + run, p - run);
            o += p - run;
        }
        n += p - run;
        if (text[p] == '"')
            break;
        char e = text[p + 1];
        if (e != 'u') {
            char c = e;
            switch (e) {
            case 'b':
                c = '\b';
                break;
            case 'f':
                c = '\f';
                break;
            case 'n':
                c = '\n';
                break;
            case 'r':
                c = '\r';
                break;
            case 't':
                c = '\t';
                break;
            default:
                break; /* '"', '\\', '/' stand for themselves */
            }
            if (o)
                *o++ = c;
            n++;
            p += 2;
            continue;
        }
        unsigned long cp = checked_hex4(text + p + 2);
        p += 6;
        if (cp >= 0xD800 && cp <= 0xDBFF) {
            unsigned long lo = checked_hex4(text + p + 2);
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            p += 6;
        }
        char utf8[4];
        size_t k = json_utf8_encode(cp, utf8);
        if (o) {
            memcpy(o, utf8, k);
            o += k;
        }
        n += k;
    }
    *pos = p + 1;
    return n;
}

/* ---- scanner ---- */

/* Container kinds on the scanner's stack, one bit per level. */
enum { SCAN_ARRAY = 0, SCAN_OBJECT = 1 };

typedef struct scanner {
    const char *text;
    size_t len;
    size_t pos;
    uint8_t *stack; /* bit d-1: kind of the container at depth d */
    size_t stack_bytes;
    size_t depth;
    json_scan_info *info;
    /* inputs[i].data tracking (only with info->want_data_spans) */
    bool key1_inputs;   /* last key at depth 1 was "inputs" */
    bool inputs_open;   /* the depth-2 container is the inputs array */
    size_t input_index; /* index of the current element of inputs */
    bool key3_data;     /* last key at depth 3 (an input object) was "data" */
    bool span_open;
    size_t span_start;
    size_t spans_cap;
} scanner;

static osp_error *scan_error(const scanner *s, const char *msg, size_t at) {
    (void)s;
    return osp_error_new(OSP_ERROR_INTERNAL,
                         "failed to parse the request JSON buffer: %s at %zu",
                         msg, at);
}

static int scan_kind(const scanner *s, size_t depth) {
    size_t bit = depth - 1;
    return (s->stack[bit / 8] >> (bit % 8)) & 1;
}

static osp_error *scan_push(scanner *s, int kind) {
    if (s->depth >= JSON_MAX_PARSE_DEPTH)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "JSON nesting depth exceeds maximum allowed limit "
                             "(%d)",
                             JSON_MAX_PARSE_DEPTH);
    size_t bit = s->depth;
    if (bit / 8 >= s->stack_bytes) {
        size_t n = s->stack_bytes ? s->stack_bytes * 2 : 64;
        uint8_t *p = realloc(s->stack, n);
        if (!p)
            return osp_error_new(OSP_ERROR_UNAVAILABLE,
                                 "out of memory parsing JSON");
        memset(p + s->stack_bytes, 0, n - s->stack_bytes);
        s->stack = p;
        s->stack_bytes = n;
    }
    if (kind)
        s->stack[bit / 8] |= (uint8_t)(1u << (bit % 8));
    else
        s->stack[bit / 8] &= (uint8_t) ~(1u << (bit % 8));
    s->depth++;
    if (s->depth > s->info->max_depth)
        s->info->max_depth = s->depth;
    return NULL;
}

static void skip_ws(scanner *s) {
    const char *t = s->text;
    size_t p = s->pos;
    while (p < s->len &&
           (t[p] == ' ' || t[p] == '\n' || t[p] == '\r' || t[p] == '\t'))
        p++;
    s->pos = p;
}

static char peek(const scanner *s) {
    return s->pos < s->len ? s->text[s->pos] : '\0';
}

int json_hex_value(char c) {
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Reads 4 hex digits at p; -1 if any is not hex. */
static long hex4(const scanner *s, size_t p) {
    if (p + 4 > s->len)
        return -1;
    long v = 0;
    for (int i = 0; i < 4; i++) {
        int h = json_hex_value(s->text[p + i]);
        if (h < 0)
            return -1;
        v = v * 16 + h;
    }
    return v;
}

/* At an opening quote. Leaves pos after the closing quote; *key (if not
 * NULL) gets the raw text between the quotes. */
static osp_error *scan_string(scanner *s, const char **raw, size_t *raw_len) {
    const char *t = s->text;
    size_t start = ++s->pos;
    for (;;) {
        size_t p = s->pos;
        while (p < s->len) {
            unsigned char c = (unsigned char)t[p];
            if (c == '"' || c == '\\' || c < 0x20)
                break;
            p++;
        }
        s->pos = p;
        if (p >= s->len)
            return scan_error(s, "Missing a closing quotation mark in string.",
                              p);
        unsigned char c = (unsigned char)t[p];
        if (c == '"') {
            if (raw) {
                *raw = t + start;
                *raw_len = p - start;
            }
            s->pos = p + 1;
            return NULL;
        }
        if (c < 0x20) {
            if (c == 0)
                return scan_error(
                    s, "Missing a closing quotation mark in string.", p);
            return scan_error(s, "Invalid encoding in string.", p);
        }
        /* escape */
        char e = p + 1 < s->len ? t[p + 1] : '\0';
        switch (e) {
        case '"':
        case '\\':
        case '/':
        case 'b':
        case 'f':
        case 'n':
        case 'r':
        case 't':
            s->pos = p + 2;
            break;
        case 'u': {
            long cp = hex4(s, p + 2);
            if (cp < 0)
                return scan_error(
                    s, "Incorrect hex digit after \\u escape in string.",
                    p + 2);
            s->pos = p + 6;
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                if (s->pos + 1 >= s->len || t[s->pos] != '\\' ||
                    t[s->pos + 1] != 'u')
                    return scan_error(
                        s, "The surrogate pair in string is invalid.", s->pos);
                long lo = hex4(s, s->pos + 2);
                if (lo < 0)
                    return scan_error(
                        s, "Incorrect hex digit after \\u escape in string.",
                        s->pos + 2);
                if (lo < 0xDC00 || lo > 0xDFFF)
                    return scan_error(
                        s, "The surrogate pair in string is invalid.", s->pos);
                s->pos += 6;
            } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
                return scan_error(s, "The surrogate pair in string is invalid.",
                                  p);
            }
            break;
        }
        default:
            return scan_error(s, "Invalid escape character in string.", p + 1);
        }
    }
}

static bool scan_literal(scanner *s, const char *lit) {
    size_t n = strlen(lit);
    if (s->pos + n > s->len || memcmp(s->text + s->pos, lit, n) != 0)
        return false;
    s->pos += n;
    return true;
}

static bool is_digit(char c) {
    return c >= '0' && c <= '9';
}

/* A number, or NaN / Infinity / -Infinity. */
static osp_error *scan_number(scanner *s) {
    const char *t = s->text;
    size_t start = s->pos;
    size_t p = s->pos;
    if (peek(s) == 'N') {
        if (scan_literal(s, "NaN"))
            return NULL;
        return scan_error(s, "Invalid value.", start);
    }
    if (t[p] == '-')
        p++;
    if (p < s->len && t[p] == 'I') {
        s->pos = p;
        if (scan_literal(s, "Infinity"))
            return NULL;
        return scan_error(s, "Invalid value.", start);
    }
    size_t int_start = p;
    if (p < s->len && t[p] == '0') {
        p++;
    } else if (p < s->len && is_digit(t[p])) {
        while (p < s->len && is_digit(t[p]))
            p++;
    } else {
        return scan_error(s, "Invalid value.", start);
    }
    bool huge = p - int_start > 300;
    if (p < s->len && t[p] == '.') {
        p++;
        if (p >= s->len || !is_digit(t[p]))
            return scan_error(s, "Miss fraction part in number.", p);
        while (p < s->len && is_digit(t[p]))
            p++;
    }
    if (p < s->len && (t[p] == 'e' || t[p] == 'E')) {
        p++;
        if (p < s->len && (t[p] == '+' || t[p] == '-'))
            p++;
        if (p >= s->len || !is_digit(t[p]))
            return scan_error(s, "Miss exponent in number.", p);
        size_t exp_start = p;
        while (p < s->len && is_digit(t[p]))
            p++;
        if (p - exp_start > 2)
            huge = true;
    }
    s->pos = p;
    if (huge) {
        /* Only then can the value overflow a double. strtod gets a
         * terminated copy: text[len] need not be a NUL, and the bytes
         * after it may continue the number. */
        size_t n = p - start;
        char *num = malloc(n + 1);
        if (!num)
            return osp_error_new(OSP_ERROR_UNAVAILABLE,
                                 "out of memory parsing JSON");
        memcpy(num, t + start, n);
        num[n] = '\0';
        double d = strtod(num, NULL);
        free(num);
        if (d == HUGE_VAL || d == -HUGE_VAL)
            return scan_error(s, "Number too big to be stored in double.",
                              start);
    }
    return NULL;
}

static osp_error *span_add(scanner *s, size_t end) {
    json_scan_info *info = s->info;
    if (info->n_spans == s->spans_cap) {
        size_t cap = s->spans_cap ? s->spans_cap * 2 : 4;
        json_span *p = realloc(info->spans, cap * sizeof *p);
        if (!p)
            return osp_error_new(OSP_ERROR_UNAVAILABLE,
                                 "out of memory parsing JSON");
        info->spans = p;
        s->spans_cap = cap;
    }
    json_span *sp = &info->spans[info->n_spans++];
    sp->input_index = s->input_index;
    sp->start = s->span_start;
    sp->end = end;
    return NULL;
}

/* Called as a value begins at the current depth (before a container is
 * pushed): tracks inputs[i].data. */
static void track_value_start(scanner *s) {
    if (s->depth == 2 && s->inputs_open)
        s->input_index = s->input_index + 1;
    if (s->depth == 3 && s->inputs_open && s->key3_data &&
        scan_kind(s, 3) == SCAN_OBJECT) {
        s->span_open = true;
        s->span_start = s->pos;
    }
}

/* Called after a key is read at the current depth. */
static void track_key(scanner *s, const char *key, size_t n) {
    if (s->depth == 1)
        s->key1_inputs = n == 6 && memcmp(key, "inputs", 6) == 0;
    else if (s->depth == 3)
        s->key3_data = n == 4 && memcmp(key, "data", 4) == 0;
}

/* Called when a value has ended and depth is back to its container. */
static osp_error *track_value_end(scanner *s) {
    if (s->span_open && s->depth == 3) {
        s->span_open = false;
        return span_add(s, s->pos);
    }
    return NULL;
}

osp_error *json_scan(const char *text, size_t len, json_scan_info *info) {
    osp_error *err = NULL;
    scanner s;
    memset(&s, 0, sizeof s);
    s.text = text;
    s.len = len;
    s.info = info;
    s.input_index = (size_t)-1;
    bool track = info->want_data_spans;
    info->max_depth = 0;
    info->spans = NULL;
    info->n_spans = 0;

    skip_ws(&s);
    if (s.pos >= len) {
        err = scan_error(&s, "The document is empty.", s.pos);
        goto out;
    }
    for (;;) {
        /* ---- a value starts at s.pos ---- */
        if (track)
            track_value_start(&s);
        char c = peek(&s);
        if (c == '{' || c == '[') {
            bool obj = c == '{';
            if (track && obj == false && s.depth == 1 && s.key1_inputs &&
                scan_kind(&s, 1) == SCAN_OBJECT) {
                s.inputs_open = true;
                s.input_index = (size_t)-1;
            }
            if ((err = scan_push(&s, obj ? SCAN_OBJECT : SCAN_ARRAY)))
                goto out;
            s.pos++;
            skip_ws(&s);
            char close = obj ? '}' : ']';
            if (peek(&s) == close) {
                s.pos++;
                s.depth--;
                goto value_done;
            }
            if (!obj)
                continue; /* first element */
            goto member_key;
        } else if (c == '"') {
            if ((err = scan_string(&s, NULL, NULL)))
                goto out;
        } else if (c == 't' || c == 'f' || c == 'n') {
            if (!scan_literal(&s, c == 't'   ? "true"
                                  : c == 'f' ? "false"
                                             : "null")) {
                err = scan_error(&s, "Invalid value.", s.pos);
                goto out;
            }
        } else if (c == '-' || is_digit(c) || c == 'N' || c == 'I') {
            if (c == 'I') {
                if (!scan_literal(&s, "Infinity")) {
                    err = scan_error(&s, "Invalid value.", s.pos);
                    goto out;
                }
            } else if ((err = scan_number(&s))) {
                goto out;
            }
        } else {
            err = scan_error(&s, "Invalid value.", s.pos);
            goto out;
        }

    value_done:
        /* ---- a value ended; depth is its container's ---- */
        if (track && (err = track_value_end(&s)))
            goto out;
        if (track && s.depth < 2)
            s.inputs_open = false;
        if (s.depth == 0) {
            skip_ws(&s);
            if (s.pos != len) {
                err = scan_error(
                    &s,
                    "The document root must not be followed by other values.",
                    s.pos);
                goto out;
            }
            break;
        }
        skip_ws(&s);
        c = peek(&s);
        if (scan_kind(&s, s.depth) == SCAN_ARRAY) {
            if (c == ',') {
                s.pos++;
                skip_ws(&s);
                continue;
            }
            if (c == ']') {
                s.pos++;
                s.depth--;
                goto value_done;
            }
            err = scan_error(
                &s, "Missing a comma or ']' after an array element.", s.pos);
            goto out;
        }
        if (c == '}') {
            s.pos++;
            s.depth--;
            goto value_done;
        }
        if (c != ',') {
            err = scan_error(
                &s, "Missing a comma or '}' after an object member.", s.pos);
            goto out;
        }
        s.pos++;
        skip_ws(&s);

    member_key:
        /* ---- an object member starts at s.pos ---- */
        if (peek(&s) != '"') {
            err = scan_error(&s, "Missing a name for object member.", s.pos);
            goto out;
        }
        {
            const char *key;
            size_t key_len;
            if ((err = scan_string(&s, &key, &key_len)))
                goto out;
            if (track)
                track_key(&s, key, key_len);
        }
        skip_ws(&s);
        if (peek(&s) != ':') {
            err = scan_error(
                &s, "Missing a colon after a name of object member.", s.pos);
            goto out;
        }
        s.pos++;
        skip_ws(&s);
    }

out:
    free(s.stack);
    if (err) {
        free(info->spans);
        info->spans = NULL;
        info->n_spans = 0;
    }
    return err;
}

/* ---- json-c parsing ---- */

/* Feeds text to the tokener in pieces json-c's int length can take.
 * Returns false once the tokener stops wanting more (done or failed). */
static bool tokener_feed(struct json_tokener *tok, const char *p, size_t n,
                         struct json_object **obj) {
    while (n > 0) {
        int piece = n > (1u << 30) ? (1 << 30) : (int)n;
        *obj = json_tokener_parse_ex(tok, p, piece);
        if (json_tokener_get_error(tok) != json_tokener_continue)
            return false;
        p += piece;
        n -= (size_t)piece;
    }
    return true;
}

/* The offset just past the string that opens at text[i] (a quote). The
 * text was validated by json_scan, so the closing quote is before `end`. */
static size_t skip_string(const char *text, size_t i, size_t end) {
    for (i++; i < end && text[i] != '"'; i++)
        if (text[i] == '\\')
            i++;
    return i + 1;
}

/* The offset just past the container that opens at text[i]. */
static size_t skip_container(const char *text, size_t i, size_t end) {
    size_t depth = 0;
    while (i < end) {
        char c = text[i];
        if (c == '"') {
            i = skip_string(text, i, end);
            continue;
        }
        if (c == '[' || c == '{')
            depth++;
        else if ((c == ']' || c == '}') && --depth == 0)
            return i + 1;
        i++;
    }
    return end;
}

/* Where the pruned document goes: the tokener itself, or a buffer that is
 * parsed in one call (json_parse). */
typedef struct json_sink {
    struct json_tokener *tok; /* feed here when buf is NULL */
    struct json_object **obj;
    bytebuf *buf;
} json_sink;

/* Sends text to the sink. Returns false once the tokener stops wanting
 * more, or the buffer could not grow. */
static bool sink_put(json_sink *sink, const char *p, size_t n) {
    if (!sink->buf)
        return tokener_feed(sink->tok, p, n, sink->obj);
    bytebuf_put(sink->buf, p, n);
    return !sink->buf->oom;
}

/* Sends text[from..to) (whole values, validated by json_scan) to the sink,
 * replacing every container that would open deeper than
 * JSON_TREE_MAX_DEPTH by an empty one of its kind. *depth is the nesting
 * at `from` and is updated. Returns what sink_put returns. */
static bool feed_pruned(json_sink *sink, const char *text, size_t from,
                        size_t to, size_t *depth) {
    size_t seg = from, i = from;
    while (i < to) {
        char c = text[i];
        if (c == '"') {
            i = skip_string(text, i, to);
            continue;
        }
        if (c == '[' || c == '{') {
            if (*depth >= JSON_TREE_MAX_DEPTH) {
                if (!sink_put(sink, text + seg, i - seg) ||
                    !sink_put(sink, c == '[' ? "[]" : "{}", 2))
                    return false;
                i = seg = skip_container(text, i, to);
                continue;
            }
            (*depth)++;
        } else if (c == ']' || c == '}') {
            (*depth)--;
        }
        i++;
    }
    return sink_put(sink, text + seg, to - seg);
}

/* Documents up to this size are pruned into one buffer and handed to
 * json-c in one json_tokener_parse_ex call: each call sets up and tears
 * down a C numeric locale (duplocale, newlocale, freelocale: ~2,000
 * instructions), and a KServe request with its data spans cut out took
 * five. Larger documents stream through the tokener piece by piece, so
 * that a big body is never copied. */
#define JSON_PARSE_ONE_CALL_MAX (64 * 1024)

osp_error *json_parse(const char *text, size_t len, size_t max_depth,
                      const json_span *skip, size_t n_skip,
                      struct json_object **out) {
    osp_error *err = NULL;
    struct json_object *obj = NULL;
    /* Pruned containers never reach json-c, so its per-level stack is
     * bounded by JSON_TREE_MAX_DEPTH whatever the body's depth. */
    size_t tree_depth =
        max_depth < JSON_TREE_MAX_DEPTH ? max_depth : JSON_TREE_MAX_DEPTH;
    struct json_tokener *tok = json_tokener_new_ex((int)tree_depth + 2);
    bytebuf doc;
    bytebuf_init(&doc);
    if (!tok)
        return osp_error_new(OSP_ERROR_UNAVAILABLE,
                             "out of memory parsing JSON");
    json_sink sink = {.tok = tok, .obj = &obj, .buf = NULL};
    if (len <= JSON_PARSE_ONE_CALL_MAX && bytebuf_reserve(&doc, len + 1))
        sink.buf = &doc;
    size_t pos = 0, depth = 0;
    bool more = true; /* the document is not complete yet */
    for (size_t i = 0; i < n_skip && more; i++) {
        more = feed_pruned(&sink, text, pos, skip[i].start, &depth) &&
               sink_put(&sink, "[]", 2);
        pos = skip[i].end;
    }
    if (more) /* with the NUL */
        more = feed_pruned(&sink, text, pos, len + 1, &depth);
    if (sink.buf) {
        if (doc.oom) {
            err = osp_error_new(OSP_ERROR_UNAVAILABLE,
                                "out of memory parsing JSON");
            goto out;
        }
        tokener_feed(tok, doc.data, doc.len, &obj);
    }
    enum json_tokener_error jerr = json_tokener_get_error(tok);
    if (jerr != json_tokener_success || !obj) {
        /* json_scan accepted it, so this is a json-c limit (e.g. an
         * integer beyond 64 bits). */
        json_free(obj);
        obj = NULL;
        err =
            osp_error_new(OSP_ERROR_INTERNAL,
                          "failed to parse the request JSON buffer: %s at %zu",
                          json_tokener_error_desc(jerr),
                          (size_t)json_tokener_get_parse_end(tok));
        goto out;
    }
    *out = obj;
out:
    json_tokener_free(tok);
    bytebuf_free(&doc);
    return err;
}

bool json_prune(const char *text, size_t len, const json_span *skip,
                size_t n_skip, bytebuf *out) {
    json_sink sink = {.tok = NULL, .obj = NULL, .buf = out};
    size_t pos = 0, depth = 0;
    bool ok = true;
    for (size_t i = 0; i < n_skip && ok; i++) {
        ok = feed_pruned(&sink, text, pos, skip[i].start, &depth) &&
             sink_put(&sink, "[]", 2);
        pos = skip[i].end;
    }
    return ok && feed_pruned(&sink, text, pos, len, &depth);
}

static size_t skip_json_ws(const char *text, size_t i, size_t end) {
    while (i < end && (text[i] == ' ' || text[i] == '\n' || text[i] == '\r' ||
                       text[i] == '\t'))
        i++;
    return i;
}

/* The offset just past the value that starts at text[i]. */
static size_t skip_value(const char *text, size_t i, size_t end) {
    if (i >= end)
        return end;
    if (text[i] == '"')
        return skip_string(text, i, end);
    if (text[i] == '[' || text[i] == '{')
        return skip_container(text, i, end);
    while (i < end && text[i] != ',' && text[i] != '}' && text[i] != ']' &&
           text[i] != ' ' && text[i] != '\n' && text[i] != '\r' &&
           text[i] != '\t')
        i++;
    return i;
}

osp_error *json_root_members(const char *text, size_t len,
                             json_member_span **out, size_t *n) {
    json_member_span *spans = NULL;
    size_t count = 0, cap = 0;
    *out = NULL;
    *n = 0;
    size_t i = skip_json_ws(text, 0, len);
    if (i >= len || text[i] != '{')
        return NULL;
    i = skip_json_ws(text, i + 1, len);
    while (i < len && text[i] == '"') {
        json_member_span m;
        m.key_start = i + 1;
        i = skip_string(text, i, len);
        m.key_end = i - 1;
        i = skip_json_ws(text, i, len);
        i = skip_json_ws(text, i + 1, len); /* past ':' */
        m.value_start = i;
        i = skip_value(text, i, len);
        m.value_end = i;
        if (count == cap) {
            size_t c = cap ? cap * 2 : 8;
            json_member_span *p = realloc(spans, c * sizeof *p);
            if (!p) {
                free(spans);
                return osp_error_new(OSP_ERROR_UNAVAILABLE,
                                     "out of memory parsing JSON");
            }
            spans = p;
            cap = c;
        }
        spans[count++] = m;
        i = skip_json_ws(text, i, len);
        if (i < len && text[i] == ',')
            i = skip_json_ws(text, i + 1, len);
    }
    *out = spans;
    *n = count;
    return NULL;
}

osp_error *json_parse_body(const char *text, size_t len,
                           struct json_object **out) {
    json_scan_info info = {0};
    osp_error *err = json_scan(text, len, &info);
    if (err)
        return err;
    return json_parse(text, len, info.max_depth, NULL, 0, out);
}

void json_free(struct json_object *root) {
    if (!root)
        return;
    size_t cap = 64, n = 0;
    struct json_object **stack = malloc(cap * sizeof *stack);
    if (!stack) {
        json_object_put(root); /* best effort */
        return;
    }
    stack[n++] = root;
    while (n > 0) {
        struct json_object *v = stack[--n];
        enum json_type type = json_object_get_type(v);
        /* Take a reference on every child container so that putting the
         * parent does not recurse into it; the child is freed later from
         * the stack. Scalars are freed by the parent's put directly. */
        if (type == json_type_array) {
            size_t len = json_object_array_length(v);
            for (size_t i = 0; i < len; i++) {
                struct json_object *c = json_object_array_get_idx(v, i);
                enum json_type ct = json_object_get_type(c);
                if (ct != json_type_array && ct != json_type_object)
                    continue;
                if (n == cap) {
                    struct json_object **p =
                        realloc(stack, cap * 2 * sizeof *stack);
                    if (!p)
                        break; /* leaves recursion to json-c for the rest */
                    stack = p;
                    cap *= 2;
                }
                stack[n++] = json_object_get(c);
            }
        } else if (type == json_type_object) {
            json_object_object_foreach(v, key, c) {
                (void)key;
                enum json_type ct = json_object_get_type(c);
                if (ct != json_type_array && ct != json_type_object)
                    continue;
                if (n == cap) {
                    struct json_object **p =
                        realloc(stack, cap * 2 * sizeof *stack);
                    if (!p)
                        break;
                    stack = p;
                    cap *= 2;
                }
                stack[n++] = json_object_get(c);
            }
        }
        json_object_put(v);
    }
    free(stack);
}

/* ---- typed access ---- */

bool json_find(struct json_object *obj, const char *key,
               struct json_object **value) {
    struct json_object *v = NULL;
    if (!obj || !json_object_is_type(obj, json_type_object) ||
        !json_object_object_get_ex(obj, key, &v))
        return false;
    if (value)
        *value = v;
    return true;
}

struct json_object *json_member(struct json_object *obj, const char *key) {
    struct json_object *v = NULL;
    if (!obj || !json_object_is_type(obj, json_type_object))
        return NULL;
    if (!json_object_object_get_ex(obj, key, &v))
        return NULL;
    return v;
}

osp_error *json_member_required(struct json_object *obj, const char *key,
                                struct json_object **out) {
    if (!obj || !json_object_is_type(obj, json_type_object) ||
        !json_object_object_get_ex(obj, key, out))
        return osp_error_new(
            OSP_ERROR_INTERNAL,
            "attempt to access non-existing object member '%s'", key);
    return NULL;
}

bool json_is_int64(struct json_object *v) {
    if (!json_object_is_type(v, json_type_int))
        return false;
    int64_t i = json_object_get_int64(v);
    /* json-c saturates uint64 values above INT64_MAX. */
    return i != INT64_MAX || json_object_get_uint64(v) == (uint64_t)INT64_MAX;
}

bool json_is_uint64(struct json_object *v) {
    return json_object_is_type(v, json_type_int) &&
           json_object_get_int64(v) >= 0;
}

osp_error *json_as_string(struct json_object *v, const char **s, size_t *len) {
    if (!json_object_is_type(v, json_type_string))
        return osp_error_new(OSP_ERROR_INTERNAL,
                             "attempt to access JSON non-string as string");
    *s = json_object_get_string(v);
    if (len)
        *len = (size_t)json_object_get_string_len(v);
    return NULL;
}

osp_error *json_as_uint(struct json_object *v, uint64_t *out) {
    if (!json_is_uint64(v))
        return osp_error_new(
            OSP_ERROR_INTERNAL,
            "attempt to access JSON non-unsigned-integer as unsigned-integer");
    *out = json_object_get_uint64(v);
    return NULL;
}

osp_error *json_as_int(struct json_object *v, int64_t *out) {
    if (!json_is_int64(v))
        return osp_error_new(
            OSP_ERROR_INTERNAL,
            "attempt to access JSON non-signed-integer as signed-integer");
    *out = json_object_get_int64(v);
    return NULL;
}

osp_error *json_as_bool(struct json_object *v, bool *out) {
    if (!json_object_is_type(v, json_type_boolean))
        return osp_error_new(OSP_ERROR_INTERNAL,
                             "attempt to access JSON non-boolean as boolean");
    *out = json_object_get_boolean(v);
    return NULL;
}

osp_error *json_as_double(struct json_object *v, double *out) {
    if (json_object_is_type(v, json_type_double)) {
        *out = json_object_get_double(v);
        return NULL;
    }
    if (json_object_is_type(v, json_type_int)) {
        *out = json_is_int64(v) ? (double)json_object_get_int64(v)
                                : (double)json_object_get_uint64(v);
        return NULL;
    }
    return osp_error_new(OSP_ERROR_INTERNAL,
                         "attempt to access JSON non-number as double");
}

osp_error *json_as_array(struct json_object *v) {
    if (!json_object_is_type(v, json_type_array))
        return osp_error_new(OSP_ERROR_INTERNAL,
                             "attempt to access JSON non-array as array");
    return NULL;
}

osp_error *json_member_string(struct json_object *obj, const char *key,
                              const char **s, size_t *len) {
    struct json_object *v;
    osp_error *err = json_member_required(obj, key, &v);
    if (err)
        return err;
    return json_as_string(v, s, len);
}

osp_error *json_member_array(struct json_object *obj, const char *key,
                             struct json_object **out) {
    osp_error *err = json_member_required(obj, key, out);
    if (err)
        return err;
    return json_as_array(*out);
}
