/*
 * A small, schema-less parser for protobuf text format (the syntax of
 * config.pbtxt). It turns text into a tree of fields; mapping the tree onto
 * a typed struct (and deciding what is a type error) is the caller's job,
 * see model_config.c.
 *
 * Accepted syntax:
 *   field: value            scalar (the ':' is required)
 *   field { ... }           message; also `field: { ... }` and `< ... >`
 *   field: [v1, v2]         list; becomes one node per element, so
 *   field [{...}, {...}]    `f: [1, 2]` and `f: 1 f: 2` give the same tree
 *   values: "str" 'str' (escapes \n \t \r \a \b \f \v \\ \' \" \? \NNN
 *   \xNN, adjacent literals concatenated), integers (decimal, 0x hex, 0
 *   octal, '-' prefix), floats (1.5, 1e-3, .5, 2.f, -inf, -nan) and
 *   identifiers (enum values, true/false, inf, nan: the mapper decides).
 *   '#' comments to end of line; one optional ',' or ';' after each field.
 * Nesting (messages and lists together) is capped at PBTXT_MAX_DEPTH; the
 * parser and pbtxt_free are iterative, so input cannot exhaust the stack.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "osprey/error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PBTXT_MAX_DEPTH 64

typedef enum pbtxt_kind {
    PBTXT_MESSAGE = 0, /* fields in first_child .. (via next) */
    PBTXT_STRING,      /* decoded bytes in str[0..str_len), may hold NUL */
    PBTXT_IDENT,       /* identifier in str: enum value, true, false, ... */
    PBTXT_INT,         /* integer: `negative` and `magnitude` */
    PBTXT_FLOAT,       /* floating point: `fval` */
} pbtxt_kind;

typedef struct pbtxt_node pbtxt_node;
struct pbtxt_node {
    char *name; /* field name; "" for the root */
    int line;   /* 1-based line of the field name (or of the list element) */
    pbtxt_kind kind;
    char *str; /* STRING/IDENT, always NUL-terminated; NULL otherwise */
    size_t str_len;
    bool negative;      /* INT: a '-' was given (also for -0) */
    uint64_t magnitude; /* INT: absolute value */
    double fval;        /* FLOAT */
    pbtxt_node *first_child, *last_child; /* MESSAGE */
    pbtxt_node *next;                     /* next field of the parent */
};

/* Parses `len` bytes of `text` (need not be NUL-terminated) into a tree
 * whose root is a MESSAGE holding the top-level fields. `filename`
 * (borrowed, may be NULL) is used in messages: INVALID_ARG
 * "<file>:<line>: <field.path>: <why>". Caller owns *root on success and
 * frees it with pbtxt_free(). */
osp_error *pbtxt_parse(const char *text, size_t len, const char *filename,
                       pbtxt_node **root);

/* Frees a tree from pbtxt_parse (NULL is fine). */
void pbtxt_free(pbtxt_node *root);

/* Number of direct fields of `msg` called `name`. */
size_t pbtxt_count(const pbtxt_node *msg, const char *name);

#ifdef __cplusplus
}
#endif
