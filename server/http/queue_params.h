/*
 * The queue API's query values (docs/queue.md, PAI-EAS §1.3): reserved keys
 * (`_name_`) versus tags, booleans, indexes, index lists, Go durations, and
 * the negative commit's form body and code. Pure functions, no transport;
 * every error is INVALID_ARG with a message naming the key and the value
 * rule, which the queue surface sends as a 400.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "osprey/error.h"

/* Limits on what a client controls. */
#define QUEUE_MAX_INDEXES 1024 /* entries of one _indexes_ list */
#define QUEUE_MAX_TAGS 32      /* tags of a put, filters of a get */
#define QUEUE_MAX_TAG_KEY_BYTES 128
#define QUEUE_MAX_TAG_VALUE_BYTES 1024
#define QUEUE_MAX_GET_LENGTH 256 /* _length_ */
#define QUEUE_MAX_WINDOW 1024    /* _window_ */
#define QUEUE_MAX_TIMEOUT_NS (3600ull * 1000 * 1000 * 1000)
#define QUEUE_MAX_CODE_BYTES 20     /* a negative commit's _code_ */
#define QUEUE_MAX_REASON_BYTES 1024 /* and its _reason_ */

/* A key of the form _name_: a reserved key, never a tag. */
bool queue_key_is_reserved(const char *key);
/* One of the reserved keys some SDK sends (_index_, _length_, _timeout_,
 * _raw_, _auto_delete_, _attrs_, _search_, _count_, _watch_, _window_,
 * _index_only_, _auto_commit_, _indexes_, _trunc_, _eos_, _force_,
 * _negative_, _priority_). */
bool queue_key_is_known(const char *key);

/* true|false (any case), 1|0. */
osp_error *queue_parse_bool(const char *key, const char *value, bool *out);
/* Decimal digits only, at most max. */
osp_error *queue_parse_uint(const char *key, const char *value, uint64_t max,
                            uint64_t *out);
/* A watch's _index_: -1, or decimal digits up to INT64_MAX. */
osp_error *queue_parse_start_index(const char *value, int64_t *out);
/* _timeout_: a Go duration ("500ms", "1m30s", "1.5h", "0s"; units ns, us,
 * µs, ms, s, m, h) or a bare number of seconds ("5", "0.5"). Negative
 * durations mean 0; longer than QUEUE_MAX_TIMEOUT_NS is an error. */
osp_error *queue_parse_timeout(const char *value, uint64_t *ns);
/* _indexes_: comma-separated positive decimal indexes (spaces around them
 * allowed), 1 to QUEUE_MAX_INDEXES of them. Caller frees *out. */
osp_error *queue_parse_indexes(const char *value, uint64_t **out, size_t *n);

/* A negative commit's code: at most QUEUE_MAX_CODE_BYTES characters
 * matching ^([A-Z][a-z]*)+(.[A-Z][a-z]*)?$|^[0-9]+$ (the Go SDK's rule). */
bool queue_negative_code_valid(const char *code);
/* The form body `_code_=<code>&_reason_=<text>` (URL-encoded, body[0..len)
 * borrowed): *code and *reason are malloc'd decoded copies (reason "" when
 * absent). INVALID_ARG for a missing or invalid code or an overlong reason. */
osp_error *queue_parse_negative_form(const char *body, size_t len, char **code,
                                     char **reason);
