/*
 * S3's XML replies on expat (see s3_list_xml.h). A small element stack
 * tells where character data belongs; values are collected into a fixed
 * buffer and the parse stops at the first value over its bound.
 */
#include "s3_list_xml.h"

#include <expat.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 16
#define MAX_VALUE 1024

typedef struct list_parser {
    XML_Parser xml;
    s3_list_page *page;
    int depth;
    const char *path[MAX_DEPTH]; /* interned names of the open elements */
    char value[MAX_VALUE + 1];
    size_t value_len;
    bool value_too_long;
    bool root_ok;
    s3_object current;
    osp_error *err;
} list_parser;

static const char *const known_names[] = {"ListBucketResult",
                                          "Contents",
                                          "Key",
                                          "Size",
                                          "ETag",
                                          "IsTruncated",
                                          "NextContinuationToken",
                                          "Error",
                                          "Code",
                                          "Message",
                                          "Region"};

/* The static copy of `name` when it is one of known_names, else "". */
static const char *intern(const char *name) {
    /* Namespaced documents name elements "uri|local" (see parser_new). */
    const char *bar = strrchr(name, '|');
    if (bar)
        name = bar + 1;
    for (size_t i = 0; i < sizeof known_names / sizeof *known_names; i++)
        if (strcmp(name, known_names[i]) == 0)
            return known_names[i];
    return "";
}

static void fail(list_parser *p, osp_error *err) {
    if (!p->err)
        p->err = err;
    XML_StopParser(p->xml, XML_FALSE);
}

/* Whether the open elements are exactly <ListBucketResult><parent><self>
 * (parent NULL: <ListBucketResult><self>). */
static bool at(const list_parser *p, const char *parent, const char *self) {
    int want = parent ? 3 : 2;
    return p->depth == want && strcmp(p->path[want - 1], self) == 0 &&
           (!parent || strcmp(p->path[1], parent) == 0);
}

static void XMLCALL on_start(void *user, const XML_Char *name,
                             const XML_Char **attrs) {
    (void)attrs;
    list_parser *p = user;
    if (p->depth >= MAX_DEPTH) {
        fail(p, osp_error_new(OSP_ERROR_INVALID_ARG,
                              "S3 list reply nests deeper than %d", MAX_DEPTH));
        return;
    }
    const char *n = intern(name);
    if (p->depth == 0)
        p->root_ok = strcmp(n, "ListBucketResult") == 0;
    p->path[p->depth++] = n;
    p->value_len = 0;
    p->value_too_long = false;
    if (at(p, NULL, "Contents")) {
        if (p->page->n_objects >= S3_LIST_MAX_OBJECTS) {
            fail(p, osp_error_new(OSP_ERROR_INVALID_ARG,
                                  "S3 list reply has more than %d objects",
                                  S3_LIST_MAX_OBJECTS));
            return;
        }
        free(p->current.key);
        free(p->current.etag);
        memset(&p->current, 0, sizeof p->current);
    }
}

static void XMLCALL on_text(void *user, const XML_Char *s, int len) {
    list_parser *p = user;
    if (p->value_len + (size_t)len > MAX_VALUE) {
        p->value_too_long = true;
        return;
    }
    memcpy(p->value + p->value_len, s, (size_t)len);
    p->value_len += (size_t)len;
}

static char *take_value(list_parser *p) {
    if (p->value_too_long) {
        fail(p, osp_error_new(OSP_ERROR_INVALID_ARG,
                              "S3 list reply: a value is longer than %d bytes",
                              MAX_VALUE));
        return NULL;
    }
    p->value[p->value_len] = '\0';
    char *v = strdup(p->value);
    if (!v)
        fail(p, osp_error_out_of_memory());
    return v;
}

static bool parse_size(const char *s, uint64_t *out) {
    uint64_t v = 0;
    if (!*s)
        return false;
    for (; *s; s++) {
        uint64_t digit = (uint64_t)(*s - '0');
        if (*s < '0' || *s > '9' || v > (UINT64_MAX - digit) / 10)
            return false;
        v = v * 10 + digit;
    }
    *out = v;
    return true;
}

/* Keeps an object's field, or the page's, as its element closes. */
static void XMLCALL on_end(void *user, const XML_Char *name) {
    (void)name;
    list_parser *p = user;
    s3_object *o = &p->current;
    s3_list_page *page = p->page;
    if (at(p, "Contents", "Key")) {
        free(o->key);
        o->key = take_value(p);
    } else if (at(p, "Contents", "ETag")) {
        char *v = take_value(p);
        if (v) {
            size_t n = strlen(v);
            if (n >= 2 && v[0] == '"' && v[n - 1] == '"') {
                memmove(v, v + 1, n - 2);
                v[n - 2] = '\0';
            }
            free(o->etag);
            o->etag = v;
        }
    } else if (at(p, "Contents", "Size")) {
        p->value[p->value_len] = '\0';
        if (p->value_too_long || !parse_size(p->value, &o->size))
            fail(p, osp_error_new(OSP_ERROR_INVALID_ARG,
                                  "S3 list reply: a Size is not a number"));
    } else if (at(p, NULL, "IsTruncated")) {
        p->value[p->value_len] = '\0';
        page->truncated = strcmp(p->value, "true") == 0;
    } else if (at(p, NULL, "NextContinuationToken")) {
        free(page->next_token);
        page->next_token = take_value(p);
    } else if (at(p, NULL, "Contents")) {
        if (!o->key) {
            fail(p, osp_error_new(OSP_ERROR_INVALID_ARG,
                                  "S3 list reply: an object has no Key"));
        } else if (!o->etag && !(o->etag = strdup(""))) {
            fail(p, osp_error_out_of_memory());
        } else {
            if (page->n_objects % 64 == 0) {
                s3_object *grown = realloc(
                    page->objects, (page->n_objects + 64) * sizeof *grown);
                if (!grown) {
                    fail(p, osp_error_out_of_memory());
                    goto out;
                }
                page->objects = grown;
            }
            page->objects[page->n_objects++] = *o;
            memset(o, 0, sizeof *o);
        }
    }
out:
    p->depth--;
    p->value_len = 0;
}

/* A namespace-aware parser (S3 replies carry xmlns) with expat's
 * protection against entity expansion. */
static XML_Parser parser_new(void *user) {
    XML_Parser xml = XML_ParserCreateNS(NULL, '|');
    if (!xml)
        return NULL;
    XML_SetUserData(xml, user);
    XML_SetElementHandler(xml, on_start, on_end);
    XML_SetCharacterDataHandler(xml, on_text);
    XML_SetParamEntityParsing(xml, XML_PARAM_ENTITY_PARSING_NEVER);
    return xml;
}

void s3_objects_free(s3_object *objects, size_t n) {
    for (size_t i = 0; i < n; i++) {
        free(objects[i].key);
        free(objects[i].etag);
    }
    free(objects);
}

void s3_list_page_destroy(s3_list_page *page) {
    s3_objects_free(page->objects, page->n_objects);
    free(page->next_token);
    memset(page, 0, sizeof *page);
}

osp_error *s3_list_page_parse(const char *xml, size_t len, s3_list_page *page) {
    memset(page, 0, sizeof *page);
    if (len > (size_t)INT32_MAX)
        return osp_error_new(OSP_ERROR_INVALID_ARG, "S3 list reply too large");
    list_parser p = {.page = page};
    if (!(p.xml = parser_new(&p)))
        return osp_error_out_of_memory();
    if (XML_Parse(p.xml, xml, (int)len, XML_TRUE) == XML_STATUS_ERROR && !p.err)
        p.err = osp_error_new(OSP_ERROR_INVALID_ARG,
                              "S3 list reply is not XML: %s (line %lu)",
                              XML_ErrorString(XML_GetErrorCode(p.xml)),
                              (unsigned long)XML_GetCurrentLineNumber(p.xml));
    if (!p.err && !p.root_ok)
        p.err = osp_error_new(OSP_ERROR_INVALID_ARG,
                              "S3 list reply is not a ListBucketResult");
    if (!p.err && page->truncated && !page->next_token)
        p.err = osp_error_new(OSP_ERROR_INVALID_ARG,
                              "S3 list reply is truncated without a "
                              "NextContinuationToken");
    free(p.current.key);
    free(p.current.etag);
    XML_ParserFree(p.xml);
    if (p.err)
        s3_list_page_destroy(page);
    return p.err;
}

typedef struct error_parser {
    int depth;
    const char *path[MAX_DEPTH];
    s3_error_reply *out;
    bool root_ok;
} error_parser;

static void XMLCALL error_on_start(void *user, const XML_Char *name,
                                   const XML_Char **attrs) {
    (void)attrs;
    error_parser *p = user;
    const char *n = intern(name);
    if (p->depth == 0)
        p->root_ok = strcmp(n, "Error") == 0;
    if (p->depth < MAX_DEPTH)
        p->path[p->depth] = n;
    p->depth++;
}

static void XMLCALL error_on_end(void *user, const XML_Char *name) {
    (void)name;
    ((error_parser *)user)->depth--;
}

static void XMLCALL error_on_text(void *user, const XML_Char *s, int len) {
    error_parser *p = user;
    if (p->depth != 2 || strcmp(p->path[0], "Error") != 0)
        return;
    const char *n = p->path[1];
    char *to = NULL;
    size_t cap = 0;
    if (!strcmp(n, "Code")) {
        to = p->out->code;
        cap = sizeof p->out->code;
    } else if (!strcmp(n, "Message")) {
        to = p->out->message;
        cap = sizeof p->out->message;
    } else if (!strcmp(n, "Region")) {
        to = p->out->region;
        cap = sizeof p->out->region;
    } else {
        return;
    }
    size_t have = strlen(to);
    size_t room = cap - 1 - have;
    size_t take = (size_t)len < room ? (size_t)len : room;
    memcpy(to + have, s, take);
    to[have + take] = '\0';
}

bool s3_error_parse(const char *xml, size_t len, s3_error_reply *out) {
    memset(out, 0, sizeof *out);
    if (len > (size_t)INT32_MAX)
        return false;
    error_parser p = {.out = out};
    XML_Parser parser = XML_ParserCreateNS(NULL, '|');
    if (!parser)
        return false;
    XML_SetUserData(parser, &p);
    XML_SetElementHandler(parser, error_on_start, error_on_end);
    XML_SetCharacterDataHandler(parser, error_on_text);
    XML_SetParamEntityParsing(parser, XML_PARAM_ENTITY_PARSING_NEVER);
    bool ok = XML_Parse(parser, xml, (int)len, XML_TRUE) == XML_STATUS_OK &&
              p.root_ok;
    XML_ParserFree(parser);
    return ok;
}
