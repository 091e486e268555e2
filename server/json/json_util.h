/*
 * Protocol-neutral JSON helpers for the frontends (KServe v2 over HTTP and,
 * later, gRPC and the queue worker; TF Serving):
 *  - json_write_*: compact JSON writers (no spaces, '/' not escaped) into
 *    a bytebuf, the hot path for responses;
 *  - json_scan: an iterative validator that also measures nesting depth and
 *    can locate the text of every `inputs[i].data` value, with rapidjson's
 *    error messages ("failed to parse the request JSON buffer: ... at N");
 *  - json_parse: json-c parsing bounded by the scanned depth, skipping the
 *    located data spans, and an iterative free (json_object_put recurses);
 *  - typed accessors that fail with TritonJson's messages (all INTERNAL).
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <json-c/json.h>

#include "bytebuf.h"
#include "osprey/error.h"

/* ---- output buffer ---- */

/* Writers into the tree's byte buffer (server/common/bytebuf.h), which
 * callers also fill with bytebuf_put* and bytebuf_printf. */

/* A quoted, escaped JSON string of n raw bytes (not UTF-8 validated, as
 * Triton). */
void json_write_string(bytebuf *b, const char *s, size_t n);
void json_write_cstr(bytebuf *b, const char *s);
void json_write_int(bytebuf *b, int64_t v);
void json_write_uint(bytebuf *b, uint64_t v);
void json_write_double(bytebuf *b, double v);
void json_write_bool(bytebuf *b, bool v);

/* The value of a hexadecimal digit (either case), or -1: for \u escapes
 * here and %XX escapes in URLs. */
int json_hex_value(char c);

/* ---- string decoding (the one unescaper for checked text) ---- */

/* The JSON string whose opening quote is at text[*pos], in a document
 * json_scan accepted (so every escape is well formed and a closing quote
 * follows): returns its decoded length and, when out is not NULL, writes
 * the decoded bytes there (no NUL; out has room for the length a call
 * with out NULL returned). Leaves *pos after the closing quote.
 * (json_doc's parser decodes as it validates, for rapidjson's error
 * offsets; it shares json_utf8_encode.) */
size_t json_string_decode(const char *text, size_t *pos, char *out);
/* Writes code point cp (at most 0x10FFFF) as UTF-8; returns 1 to 4. */
size_t json_utf8_encode(unsigned long cp, char out[4]);

/* ---- validation and parsing ---- */

/* Hard cap on nesting the parser accepts at all; deeper bodies get 400
 * "JSON nesting depth exceeds maximum allowed limit (<cap>)". */
#define JSON_MAX_PARSE_DEPTH 1000000

/* Nesting json_parse builds in full. A container nested inside one at this
 * depth (valid, and accepted as Triton's iterative rapidjson accepts it) is
 * built as an empty container of its kind: no handler reads below a few levels,
 * their type survives for the handlers' type checks, and the tree of a body
 * nested 250 000 levels deep costs a few KiB instead of ~90 MB (json-c spends
 * ~330 bytes per array plus a tokener stack entry per level). */
#define JSON_TREE_MAX_DEPTH 64

typedef struct json_span {
    size_t input_index; /* i in inputs[i] */
    size_t start;       /* offset of the value's first character */
    size_t end;         /* one past its last character */
} json_span;

typedef struct json_scan_info {
    size_t max_depth;
    /* Filled only when want_data_spans: the text of every inputs[i].data
     * value of a root object, in document order. Caller frees spans. */
    bool want_data_spans;
    json_span *spans;
    size_t n_spans;
} json_scan_info;

/* Validates text[0..len) as one JSON document (RFC 8259 plus NaN, Infinity
 * and -Infinity, as rapidjson's kParseNanAndInfFlag). Never recurses.
 * Errors: INTERNAL "failed to parse the request JSON buffer: <rapidjson
 * message> at <offset>"; INVALID_ARG when nesting exceeds
 * JSON_MAX_PARSE_DEPTH. info->spans is freed on error. */
osp_error *json_scan(const char *text, size_t len, json_scan_info *info);

/* Parses a document that json_scan accepted into a json-c tree, replacing
 * each span in `skip` (sorted, non-overlapping) by an empty array and each
 * container below JSON_TREE_MAX_DEPTH by an empty container of its kind.
 * `text` must have a NUL at text[len]. Caller frees *out with json_free. */
osp_error *json_parse(const char *text, size_t len, size_t max_depth,
                      const json_span *skip, size_t n_skip,
                      struct json_object **out);

/* Appends to out (borrowed) the document json_scan accepted with the
 * same pruning as json_parse (each span in `skip` an empty array, each
 * container below JSON_TREE_MAX_DEPTH an empty one of its kind), for a
 * parser other than json-c. text needs no NUL. False when out of memory. */
bool json_prune(const char *text, size_t len, const json_span *skip,
                size_t n_skip, bytebuf *out);

/* json_scan + json_parse for an ordinary request body. */
osp_error *json_parse_body(const char *text, size_t len,
                           struct json_object **out);

/* One member of a root object: the key's text between its quotes (still
 * escaped) and the value's text, as offsets into the document. */
typedef struct json_member_span {
    size_t key_start, key_end;
    size_t value_start, value_end;
} json_member_span;

/* The members of the root object of a document json_scan accepted, in
 * document order and with repeated keys kept (json-c keeps only one of
 * them; rapidjson, and so Triton, keeps all). *n is 0 when the root is not
 * an object. Caller frees *out. */
osp_error *json_root_members(const char *text, size_t len,
                             json_member_span **out, size_t *n);

/* Frees a json-c tree without recursion. NULL is a no-op. */
void json_free(struct json_object *root);

/* ---- TritonJson-style typed access (errors are INTERNAL) ---- */

/* TritonJson's Find: true when obj is an object with member `key`, which
 * may be JSON null (json-c's NULL); *value (if not NULL) gets it. */
bool json_find(struct json_object *obj, const char *key,
               struct json_object **value);
/* Member value; NULL when absent, null, or obj is not an object. */
struct json_object *json_member(struct json_object *obj, const char *key);
/* "attempt to access non-existing object member '<key>'" when absent. */
osp_error *json_member_required(struct json_object *obj, const char *key,
                                struct json_object **out);
osp_error *json_as_string(struct json_object *v, const char **s, size_t *len);
osp_error *json_as_uint(struct json_object *v, uint64_t *out);
osp_error *json_as_int(struct json_object *v, int64_t *out);
osp_error *json_as_bool(struct json_object *v, bool *out);
osp_error *json_as_double(struct json_object *v, double *out);
osp_error *json_as_array(struct json_object *v);
/* Member + type in one step (the TritonJson MemberAsX calls). */
osp_error *json_member_string(struct json_object *obj, const char *key,
                              const char **s, size_t *len);
osp_error *json_member_array(struct json_object *obj, const char *key,
                             struct json_object **out);
/* True for json-c integers that fit in int64 / are >= 0 (rapidjson's
 * IsInt64 / IsUint64). */
bool json_is_int64(struct json_object *v);
bool json_is_uint64(struct json_object *v);
