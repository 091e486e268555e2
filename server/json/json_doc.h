/*
 * A JSON document with rapidjson v1.1.0's behaviour, as Triton and TF
 * Serving parse their requests (prefix tj_; the TF Serving codec and the
 * KServe request decoder use it):
 *  - tj_parse: rapidjson's iterative parser with kParseNanAndInfFlag and
 *    kParseStopWhenDoneFlag over a MemoryStream: the same accepted inputs,
 *    number classes, parsed double values (normal precision), error texts
 *    and offsets. Never recurses; every node lives in one arena per
 *    document, freed whole.
 *  - tjw_*: rapidjson's PrettyWriter (4-space indent, optional
 *    kFormatSingleLineArray, optional byte limit checked per token as TF's
 *    JsonWriterWithLimit does) writing into a bytebuf.
 *  - tj_debug_string: TF's JsonValueToDebugString (a value through the
 *    limited writer, 256 bytes, single-line arrays).
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "osprey/error.h"

#ifdef __cplusplus
extern "C" {
#endif

struct bytebuf;

typedef enum tj_type {
    TJ_NULL = 0,
    TJ_FALSE,
    TJ_TRUE,
    TJ_OBJECT,
    TJ_ARRAY,
    TJ_STRING,
    TJ_NUMBER,
} tj_type;

/* rapidjson's number classes (a number can be several at once). */
enum {
    TJ_NUM_INT = 1,     /* IsInt: an integer literal within int32 */
    TJ_NUM_UINT = 2,    /* IsUint */
    TJ_NUM_INT64 = 4,   /* IsInt64 */
    TJ_NUM_UINT64 = 8,  /* IsUint64 */
    TJ_NUM_DOUBLE = 16, /* IsDouble: '.', an exponent, NaN/Inf, or an
                           integer beyond the 64-bit range */
};

typedef struct tj_value tj_value;
typedef struct tj_member tj_member;

struct tj_value {
    uint8_t type; /* tj_type */
    uint8_t num;  /* TJ_NUM_* for numbers */
    uint32_t n;   /* string bytes, array elements or object members */
    union {
        double d;           /* TJ_NUM_DOUBLE */
        int64_t i;          /* integers that fit int64 */
        uint64_t u;         /* integers above INT64_MAX */
        const char *s;      /* n bytes plus a NUL (may contain NULs) */
        tj_value *items;    /* n elements */
        tj_member *members; /* n members in document order */
    } u;
};

struct tj_member {
    tj_value name; /* a TJ_STRING */
    tj_value value;
};

typedef struct tj_doc tj_doc;

/* Parses text[0..len) (borrowed; need not be NUL-terminated). On success
 * *out is the document (caller frees with tj_doc_free). A syntax error is
 * INVALID_ARG "JSON Parse error: <rapidjson text> at offset: <n>"; out of
 * memory is UNAVAILABLE. */
osp_error *tj_parse(const char *text, size_t len, tj_doc **out);
/* The root value (borrowed, valid until tj_doc_free). */
const tj_value *tj_doc_root(const tj_doc *doc);
/* Frees the whole document at once; NULL is a no-op. */
void tj_doc_free(tj_doc *doc);
/* An empty document used as an arena: tj_doc_alloc hands out 8-byte
 * aligned blocks that live until tj_doc_free. NULL when out of memory. */
tj_doc *tj_doc_new(void);
void *tj_doc_alloc(tj_doc *doc, size_t n);

/* rapidjson FindMember: the FIRST member named key[0..key_len), or NULL
 * (also when obj is not an object). */
const tj_value *tj_find_n(const tj_value *obj, const char *key, size_t key_len);
const tj_value *tj_find(const tj_value *obj, const char *key);
/* rapidjson GetDouble of a number. */
double tj_get_double(const tj_value *v);
/* TF's IsValBase64Object: an object of exactly one member "b64" whose
 * value is a string; *str (if not NULL) gets that string. */
bool tj_is_b64_object(const tj_value *v, const tj_value **str);
/* TF's JsonTypeString: "Null", "False", "True", "Object", "Array",
 * "String", "Number". */
const char *tj_type_name(const tj_value *v);

/* ---- PrettyWriter ---- */

typedef struct tjw_level {
    bool in_array;
    size_t count;
} tjw_level;

typedef struct tjw {
    struct bytebuf *out;
    size_t start; /* out->len when the writer began */
    size_t limit; /* 0: none; else tokens start only below this many bytes */
    bool single_line_arrays; /* kFormatSingleLineArray */
    bool has_root;
    tjw_level *levels;
    size_t depth, cap;
} tjw;

/* Starts a writer appending to out (borrowed). limit as above. */
void tjw_init(tjw *w, struct bytebuf *out, size_t limit);
/* Frees the level stack (not out). */
void tjw_destroy(tjw *w);
/* Each returns false when the writer refuses the token: over the limit,
 * a non-finite double (Writer::Double), or out of memory. */
bool tjw_null(tjw *w);
bool tjw_bool(tjw *w, bool b);
bool tjw_int64(tjw *w, int64_t v);
bool tjw_uint64(tjw *w, uint64_t v);
bool tjw_double(tjw *w, double d);
/* A number token written as given (PrettyWriter::RawValue). */
bool tjw_raw_number(tjw *w, const char *s, size_t n);
bool tjw_string(tjw *w, const char *s, size_t n);
bool tjw_key(tjw *w, const char *s, size_t n);
bool tjw_start_object(tjw *w);
bool tjw_end_object(tjw *w);
bool tjw_start_array(tjw *w);
bool tjw_end_array(tjw *w);

/* Appends TF's JsonValueToDebugString(v) to out. */
void tj_debug_string(const tj_value *v, struct bytebuf *out);

#ifdef __cplusplus
}
#endif
