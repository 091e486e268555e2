/* Protobuf text format -> pbtxt_node tree. See pbtxt.h for the syntax. */
#include "pbtxt.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Longest number literal accepted (digits of a uint64 or a double fit). */
#define PBTXT_MAX_NUMBER_LEN 128

typedef enum tok_type {
    TOK_EOF = 0,
    TOK_IDENT,
    TOK_NUMBER,
    TOK_STRING,
    TOK_PUNCT,
} tok_type;

typedef struct token {
    tok_type type;
    char punct;        /* TOK_PUNCT */
    bool is_float;     /* TOK_NUMBER: has '.', an exponent or an 'f' */
    const char *start; /* raw text of the token */
    size_t len;
    int line;
    char *str; /* TOK_STRING: decoded bytes, owned until a node takes them */
    size_t str_len;
} token;

/* One open message or list. The root message is stack[0]. */
typedef struct frame {
    bool is_list;
    pbtxt_node *msg;       /* message receiving the fields / list elements */
    char *list_name;       /* list: field name given to each element (owned) */
    const char *path_name; /* name shown in error paths; NULL = none */
    char close;            /* '}', '>', ']', or 0 for the root */
    int open_line;
    bool after_value; /* a field / list element just ended */
    bool after_comma; /* list: a ',' was just read */
} frame;

typedef struct parser {
    const char *p, *end;
    int line;
    const char *file;
    token tok;
    frame stack[PBTXT_MAX_DEPTH + 1];
    int depth;
    char why[64]; /* scratch for a lexer message that names a character */
} parser;

static bool is_digit(char c) {
    return c >= '0' && c <= '9';
}

static bool is_xdigit(char c) {
    return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

static bool is_ident_start(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

static bool is_ident_char(char c) {
    return is_ident_start(c) || is_digit(c);
}

static int xdigit_value(char c) {
    if (is_digit(c))
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return c - 'A' + 10;
}

static bool is_punct(const token *t, char c) {
    return t->type == TOK_PUNCT && t->punct == c;
}

/* Appends ".name" (or "name" first) to the path in buf, truncating. */
static void path_append(char *buf, size_t cap, const char *name) {
    size_t used = strlen(buf);
    if (!name || !*name || used + 1 >= cap)
        return;
    snprintf(buf + used, cap - used, "%s%.64s", used ? "." : "", name);
}

/* INVALID_ARG "<file>:<line>: <path>: <why>", the path being the open
 * frames' field names plus `field` (may be NULL). */
static osp_error *syntax_error(const parser *ps, int line, const char *field,
                               const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static osp_error *syntax_error(const parser *ps, int line, const char *field,
                               const char *fmt, ...) {
    char path[512] = "";
    char why[256];
    for (int i = 1; i < ps->depth; i++)
        path_append(path, sizeof(path), ps->stack[i].path_name);
    path_append(path, sizeof(path), field);

    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    if (path[0])
        return osp_error_new(OSP_ERROR_INVALID_ARG, "%s:%d: %s: %s", ps->file,
                             line, path, why);
    return osp_error_new(OSP_ERROR_INVALID_ARG, "%s:%d: %s", ps->file, line,
                         why);
}

static void skip_space_and_comments(parser *ps) {
    while (ps->p < ps->end) {
        char c = *ps->p;
        if (c == '\n') {
            ps->line++;
            ps->p++;
        } else if (c == ' ' || c == '\t' || c == '\r' || c == '\f' ||
                   c == '\v') {
            ps->p++;
        } else if (c == '#') {
            while (ps->p < ps->end && *ps->p != '\n')
                ps->p++;
        } else {
            break;
        }
    }
}

/* Scans a number literal at ps->p. Conversion happens in the parser, which
 * knows whether a '-' came before. */
static bool lex_number(parser *ps, const char **why) {
    token *t = &ps->tok;
    const char *q = ps->p, *end = ps->end;
    t->is_float = false;
    if (q + 1 < end && q[0] == '0' && (q[1] == 'x' || q[1] == 'X')) {
        q += 2;
        const char *digits = q;
        while (q < end && is_xdigit(*q))
            q++;
        if (q == digits) {
            *why = "invalid hexadecimal number";
            return false;
        }
    } else {
        while (q < end && is_digit(*q))
            q++;
        if (q < end && *q == '.') {
            t->is_float = true;
            q++;
            while (q < end && is_digit(*q))
                q++;
        }
        if (q < end && (*q == 'e' || *q == 'E')) {
            t->is_float = true;
            q++;
            if (q < end && (*q == '+' || *q == '-'))
                q++;
            const char *digits = q;
            while (q < end && is_digit(*q))
                q++;
            if (q == digits) {
                *why = "invalid exponent in number";
                return false;
            }
        }
        if (q < end && (*q == 'f' || *q == 'F')) {
            t->is_float = true;
            q++;
        }
    }
    if (q < end && (is_ident_char(*q) || *q == '.')) {
        *why = "invalid number";
        return false;
    }
    t->type = TOK_NUMBER;
    t->len = (size_t)(q - ps->p);
    ps->p = q;
    return true;
}

/* Scans and decodes a quoted string at ps->p into t->str. */
static bool lex_string(parser *ps, const char **why) {
    token *t = &ps->tok;
    char quote = *ps->p;
    const char *body = ps->p + 1, *q = body;
    while (q < ps->end && *q != quote) {
        if (*q == '\n')
            break;
        if (*q == '\\' && q + 1 < ps->end && q[1] != '\n')
            q++;
        q++;
    }
    if (q >= ps->end || *q != quote) {
        *why = "unterminated string";
        return false;
    }

    size_t raw_len = (size_t)(q - body);
    char *out = malloc(raw_len + 1);
    if (!out) {
        *why = "out of memory";
        return false;
    }
    size_t n = 0;
    for (const char *r = body; r < q;) {
        char c = *r++;
        if (c != '\\') {
            out[n++] = c;
            continue;
        }
        c = *r++; /* the scan above guarantees r < q here */
        switch (c) {
        case 'n':
            out[n++] = '\n';
            break;
        case 't':
            out[n++] = '\t';
            break;
        case 'r':
            out[n++] = '\r';
            break;
        case 'a':
            out[n++] = '\a';
            break;
        case 'b':
            out[n++] = '\b';
            break;
        case 'f':
            out[n++] = '\f';
            break;
        case 'v':
            out[n++] = '\v';
            break;
        case '\\':
        case '\'':
        case '"':
        case '?':
            out[n++] = c;
            break;
        case 'x':
        case 'X': {
            unsigned v = 0;
            int digits = 0;
            while (digits < 2 && r < q && is_xdigit(*r)) {
                v = v * 16 + (unsigned)xdigit_value(*r++);
                digits++;
            }
            if (digits == 0) {
                free(out);
                *why = "invalid \\x escape in string";
                return false;
            }
            out[n++] = (char)v;
            break;
        }
        default:
            if (c >= '0' && c <= '7') {
                unsigned v = (unsigned)(c - '0');
                for (int i = 0; i < 2 && r < q && *r >= '0' && *r <= '7'; i++)
                    v = v * 8 + (unsigned)(*r++ - '0');
                if (v > 0xff) {
                    free(out);
                    *why = "octal escape out of range in string";
                    return false;
                }
                out[n++] = (char)v;
                break;
            }
            free(out);
            *why = "unknown escape sequence in string";
            return false;
        }
    }
    out[n] = '\0';
    t->type = TOK_STRING;
    t->str = out;
    t->str_len = n;
    t->len = (size_t)(q + 1 - ps->p);
    ps->p = q + 1;
    return true;
}

/* Reads the next token into ps->tok (freeing an untaken string). On a
 * lexical error sets *why and returns false. */
static bool lex_next(parser *ps, const char **why) {
    token *t = &ps->tok;
    free(t->str);
    t->str = NULL;
    t->str_len = 0;
    skip_space_and_comments(ps);
    t->line = ps->line;
    t->start = ps->p;
    t->len = 0;
    if (ps->p == ps->end) {
        t->type = TOK_EOF;
        return true;
    }
    char c = *ps->p;
    if (is_ident_start(c)) {
        const char *q = ps->p;
        while (q < ps->end && is_ident_char(*q))
            q++;
        t->type = TOK_IDENT;
        t->len = (size_t)(q - ps->p);
        ps->p = q;
        return true;
    }
    if (is_digit(c) || (c == '.' && ps->p + 1 < ps->end && is_digit(ps->p[1])))
        return lex_number(ps, why);
    if (c == '"' || c == '\'')
        return lex_string(ps, why);
    if (c != '\0' && strchr("{}<>[]:,;-", c)) {
        t->type = TOK_PUNCT;
        t->punct = c;
        t->len = 1;
        ps->p++;
        return true;
    }
    if (c >= 0x20 && c < 0x7f)
        snprintf(ps->why, sizeof(ps->why), "unexpected character '%c'", c);
    else
        snprintf(ps->why, sizeof(ps->why), "unexpected byte 0x%02x",
                 (unsigned char)c);
    *why = ps->why;
    return false;
}

/* Moves to the next token; lexical errors name `field` after the path. */
static osp_error *advance(parser *ps, const char *field) {
    const char *why = NULL;
    if (lex_next(ps, &why))
        return NULL;
    return syntax_error(ps, ps->line, field, "%s", why);
}

/* Moves past a value. A lexical error in a string literal that follows
 * still belongs to this field (it would be concatenated to the value);
 * any other error belongs to whatever comes next, so `field` is dropped. */
static osp_error *advance_after_value(parser *ps, const char *field) {
    skip_space_and_comments(ps);
    bool string_next = ps->p < ps->end && (*ps->p == '"' || *ps->p == '\'');
    return advance(ps, string_next ? field : NULL);
}

static pbtxt_node *node_new(const char *name, size_t name_len, int line) {
    pbtxt_node *node = calloc(1, sizeof(*node));
    char *copy = malloc(name_len + 1);
    if (!node || !copy) {
        free(node);
        free(copy);
        return NULL;
    }
    memcpy(copy, name, name_len);
    copy[name_len] = '\0';
    node->name = copy;
    node->line = line;
    return node;
}

static void node_append(pbtxt_node *msg, pbtxt_node *child) {
    if (msg->last_child)
        msg->last_child->next = child;
    else
        msg->first_child = child;
    msg->last_child = child;
}

static const char *token_desc(const token *t, char *buf, size_t cap) {
    switch (t->type) {
    case TOK_EOF:
        return "end of input";
    case TOK_STRING:
        return "a string";
    case TOK_NUMBER:
        return "a number";
    case TOK_IDENT:
        snprintf(buf, cap, "'%.*s'", (int)(t->len > 32 ? 32 : t->len),
                 t->start);
        return buf;
    case TOK_PUNCT:
        snprintf(buf, cap, "'%c'", t->punct);
        return buf;
    }
    return "?";
}

/* Converts the number token into node (INT or FLOAT). */
static osp_error *convert_number(parser *ps, const char *field, bool negative,
                                 pbtxt_node *node) {
    const token *t = &ps->tok;
    if (t->len > PBTXT_MAX_NUMBER_LEN)
        return syntax_error(ps, t->line, field, "number too long");
    if (t->is_float) {
        char buf[PBTXT_MAX_NUMBER_LEN + 1];
        size_t n = t->len;
        if (t->start[n - 1] == 'f' || t->start[n - 1] == 'F')
            n--;
        memcpy(buf, t->start, n);
        buf[n] = '\0';
        node->kind = PBTXT_FLOAT;
        node->fval = strtod(buf, NULL);
        if (negative)
            node->fval = -node->fval;
        return NULL;
    }

    const char *s = t->start, *e = t->start + t->len;
    unsigned base = 10;
    if (t->len > 1 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
        base = 16;
        s += 2;
    } else if (t->len > 1 && s[0] == '0') {
        base = 8;
        s++;
    }
    uint64_t v = 0;
    for (; s < e; s++) {
        unsigned d = (unsigned)xdigit_value(*s);
        if (d >= base)
            return syntax_error(ps, t->line, field, "invalid octal number");
        if (v > (UINT64_MAX - d) / base)
            return syntax_error(ps, t->line, field, "integer out of range");
        v = v * base + d;
    }
    node->kind = PBTXT_INT;
    node->negative = negative;
    node->magnitude = v;
    return NULL;
}

/* Parses one scalar value (string run, number, -number, identifier) at the
 * current token into node, consuming it. `field` names it in errors. */
static osp_error *parse_scalar(parser *ps, const char *field,
                               pbtxt_node *node) {
    osp_error *err = NULL;
    token *t = &ps->tok;
    char desc[48];

    if (t->type == TOK_STRING) {
        node->kind = PBTXT_STRING;
        node->str = t->str;
        node->str_len = t->str_len;
        t->str = NULL;
        if ((err = advance_after_value(ps, field)))
            return err;
        while (t->type == TOK_STRING) { /* "a" "b" == "ab" */
            char *joined = realloc(node->str, node->str_len + t->str_len + 1);
            if (!joined)
                return osp_error_out_of_memory();
            memcpy(joined + node->str_len, t->str, t->str_len + 1);
            node->str = joined;
            node->str_len += t->str_len;
            if ((err = advance_after_value(ps, field)))
                return err;
        }
        return NULL;
    }

    bool negative = false;
    if (is_punct(t, '-')) {
        negative = true;
        if ((err = advance(ps, field)))
            return err;
        if (t->type == TOK_IDENT &&
            ((t->len == 3 && strncasecmp(t->start, "inf", 3) == 0) ||
             (t->len == 8 && strncasecmp(t->start, "infinity", 8) == 0) ||
             (t->len == 3 && strncasecmp(t->start, "nan", 3) == 0))) {
            node->kind = PBTXT_FLOAT;
            node->fval = (t->start[0] == 'n' || t->start[0] == 'N')
                             ? -(double)NAN
                             : -(double)INFINITY;
            return advance_after_value(ps, field);
        }
        if (t->type != TOK_NUMBER)
            return syntax_error(ps, t->line, field,
                                "expected a number after '-', got %s",
                                token_desc(t, desc, sizeof(desc)));
    }
    if (t->type == TOK_NUMBER) {
        if ((err = convert_number(ps, field, negative, node)))
            return err;
        return advance_after_value(ps, field);
    }
    if (t->type == TOK_IDENT) {
        node->kind = PBTXT_IDENT;
        node->str = strndup(t->start, t->len);
        if (!node->str)
            return osp_error_out_of_memory();
        node->str_len = t->len;
        return advance_after_value(ps, field);
    }
    return syntax_error(ps, t->line, field, "expected a value, got %s",
                        token_desc(t, desc, sizeof(desc)));
}

/* Pushes a frame; fails past PBTXT_MAX_DEPTH. */
static osp_error *push_frame(parser *ps, const frame *fr, const char *field) {
    if (ps->depth > PBTXT_MAX_DEPTH)
        return syntax_error(ps, ps->tok.line, field,
                            "nesting deeper than %d levels", PBTXT_MAX_DEPTH);
    ps->stack[ps->depth++] = *fr;
    return NULL;
}

/* Pops the top frame; the enclosing frame has now read one value. */
static void pop_frame(parser *ps) {
    frame *fr = &ps->stack[--ps->depth];
    free(fr->list_name);
    fr->list_name = NULL;
    ps->stack[ps->depth - 1].after_value = true;
}

/* Opens `name { ... }` (or `< ... >`) at the current token: appends a
 * message node to `parent` and pushes its frame. */
static osp_error *open_message(parser *ps, pbtxt_node *parent, const char *name,
                               int line, bool in_list) {
    pbtxt_node *node = node_new(name, strlen(name), line);
    if (!node)
        return osp_error_out_of_memory();
    node->kind = PBTXT_MESSAGE;
    node_append(parent, node);
    frame fr = {
        .msg = node,
        .path_name = in_list ? NULL : node->name,
        .close = ps->tok.punct == '<' ? '>' : '}',
        .open_line = ps->tok.line,
    };
    return push_frame(ps, &fr, in_list ? NULL : name);
}

/* One step inside a list frame: an element, a ',' or the closing ']'. */
static osp_error *list_step(parser *ps, frame *fr) {
    osp_error *err = NULL;
    token *t = &ps->tok;
    char desc[48];

    if (is_punct(t, ']')) {
        if (fr->after_comma)
            return syntax_error(ps, t->line, NULL,
                                "expected a value after ','");
        pop_frame(ps);
        return advance(ps, NULL);
    }
    if (t->type == TOK_EOF)
        return syntax_error(ps, fr->open_line, NULL,
                            "'[' is never closed (end of input at line %d)",
                            t->line);
    if (fr->after_value) {
        if (!is_punct(t, ','))
            return syntax_error(ps, t->line, NULL,
                                "expected ',' or ']' in list, got %s",
                                token_desc(t, desc, sizeof(desc)));
        fr->after_value = false;
        fr->after_comma = true;
        return advance(ps, NULL);
    }
    fr->after_comma = false;
    if (is_punct(t, '{') || is_punct(t, '<')) {
        if ((err = open_message(ps, fr->msg, fr->list_name, t->line, true)))
            return err;
        return advance(ps, NULL);
    }
    pbtxt_node *node = node_new(fr->list_name, strlen(fr->list_name), t->line);
    if (!node)
        return osp_error_out_of_memory();
    node_append(fr->msg, node);
    fr->after_value = true;
    return parse_scalar(ps, NULL, node);
}

/* One step inside a message frame: a field, a separator or the closer.
 * Sets *done at the end of the root message. */
static osp_error *message_step(parser *ps, frame *fr, bool *done) {
    osp_error *err = NULL;
    token *t = &ps->tok;
    char desc[48];
    char *name = NULL;

    if (t->type == TOK_EOF) {
        if (ps->depth == 1) {
            *done = true;
            return NULL;
        }
        return syntax_error(ps, fr->open_line, NULL,
                            "'%c' is never closed (end of input at line %d)",
                            fr->close == '>' ? '<' : '{', t->line);
    }
    if (fr->close && is_punct(t, fr->close)) {
        pop_frame(ps);
        return advance(ps, NULL);
    }
    if (is_punct(t, ',') || is_punct(t, ';')) {
        if (!fr->after_value)
            return syntax_error(ps, t->line, NULL, "unexpected '%c'", t->punct);
        fr->after_value = false;
        return advance(ps, NULL);
    }
    fr->after_value = false;
    if (t->type != TOK_IDENT)
        return syntax_error(ps, t->line, NULL, "expected a field name, got %s",
                            token_desc(t, desc, sizeof(desc)));

    int line = t->line;
    name = strndup(t->start, t->len);
    if (!name)
        return osp_error_out_of_memory();
    if ((err = advance(ps, name)))
        goto out;
    bool colon = is_punct(t, ':');
    if (colon && (err = advance(ps, name)))
        goto out;

    if (is_punct(t, '{') || is_punct(t, '<')) {
        if ((err = open_message(ps, fr->msg, name, line, false)))
            goto out;
        err = advance(ps, NULL);
        goto out;
    }
    if (is_punct(t, '[')) {
        frame list = {
            .is_list = true,
            .msg = fr->msg,
            .list_name = name,
            .path_name = name,
            .close = ']',
            .open_line = t->line,
        };
        if ((err = push_frame(ps, &list, name)))
            goto out;
        name = NULL; /* the frame owns it now */
        err = advance(ps, NULL);
        goto out;
    }
    if (!colon) {
        err = syntax_error(ps, t->line, name,
                           "expected ':' after the field name, got %s",
                           token_desc(t, desc, sizeof(desc)));
        goto out;
    }
    pbtxt_node *node = node_new(name, strlen(name), line);
    if (!node) {
        err = osp_error_out_of_memory();
        goto out;
    }
    node_append(fr->msg, node);
    fr->after_value = true;
    err = parse_scalar(ps, name, node);
out:
    free(name);
    return err;
}

osp_error *pbtxt_parse(const char *text, size_t len, const char *filename,
                       pbtxt_node **root_out) {
    osp_error *err = NULL;
    if (!text && len > 0)
        return osp_error_new(OSP_ERROR_INVALID_ARG, "pbtxt: NULL text");
    if (!text)
        text = "";

    parser ps = {
        .p = text,
        .end = text + len,
        .line = 1,
        .file = filename ? filename : "<config>",
    };
    pbtxt_node *root = node_new("", 0, 1);
    if (!root)
        return osp_error_out_of_memory();
    ps.stack[0] = (frame){.msg = root, .open_line = 1};
    ps.depth = 1;

    if ((err = advance(&ps, NULL)))
        goto out;
    for (bool done = false; !done;) {
        frame *fr = &ps.stack[ps.depth - 1];
        err = fr->is_list ? list_step(&ps, fr) : message_step(&ps, fr, &done);
        if (err)
            goto out;
    }
out:
    free(ps.tok.str);
    for (int i = 0; i < ps.depth; i++)
        free(ps.stack[i].list_name);
    if (err)
        pbtxt_free(root);
    else
        *root_out = root;
    return err;
}

void pbtxt_free(pbtxt_node *root) {
    /* Splice each node's children in front of its siblings, then free it:
     * a flat walk, so depth never reaches the C stack. */
    pbtxt_node *node = root;
    if (node)
        node->next = NULL; /* the root's siblings are not ours */
    while (node) {
        if (node->first_child) {
            node->last_child->next = node->next;
            node->next = node->first_child;
        }
        pbtxt_node *next = node->next;
        free(node->name);
        free(node->str);
        free(node);
        node = next;
    }
}

size_t pbtxt_count(const pbtxt_node *msg, const char *name) {
    size_t n = 0;
    for (const pbtxt_node *f = msg ? msg->first_child : NULL; f; f = f->next)
        n += strcmp(f->name, name) == 0;
    return n;
}
