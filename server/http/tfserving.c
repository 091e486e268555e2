/*
 * The /v1 surface (see tfserving.h): TF Serving's dispatch (§1 of the
 * protocol reference), the status and metadata replies, error rendering.
 *
 * Dispatch order, as TF Serving's server: OPTIONS is the CORS preflight
 * and never reaches the handler; everything else gets Content-Type
 * application/json, and its path *with the query string* is matched
 * against the GET or POST regular expression (so ":predict?x=1" is
 * malformed, as there). Names and labels are percent-decoded after
 * matching, '+' kept.
 */
#include "tfserving_internal.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http_compress.h"
#include "json_util.h"
#include "osprey/log.h"
#include "tfs_codec.h"

/* ---- errors ---- */

/* TF Serving's HTTP status of a code (ToHTTPStatusCode over the codes
 * Osprey's errors stand for). */
static unsigned status_of(osp_error_code code) {
    switch (code) {
    case OSP_ERROR_INVALID_ARG:
        return 400;
    case OSP_ERROR_NOT_FOUND:
        return 404;
    case OSP_ERROR_ALREADY_EXISTS:
        return 409;
    case OSP_ERROR_CANCELLED:
        return 499;
    case OSP_ERROR_UNSUPPORTED:
        return 501;
    case OSP_ERROR_UNAVAILABLE:
        return 503;
    default:
        return 500;
    }
}

static void add_cors_headers(http_request *req) {
    const tfserving_context *ctx = http_request_surface_ctx(req);
    if (!ctx || !ctx->cors)
        return;
    http_reply_header(req, "Access-Control-Allow-Origin", "*");
    http_reply_header(req, "Access-Control-Allow-Methods", "POST, GET");
    http_reply_header(req, "Access-Control-Allow-Headers", "Content-Type");
}

void tfserving_reply_error(http_request *req, osp_error *err) {
    bytebuf b;
    bytebuf_init(&b);
    tfs_write_error(osp_error_message(err), &b);
    size_t len;
    char *body = bytebuf_take(&b, &len);
    http_reply(req, status_of(osp_error_get_code(err)), "application/json",
               body, body ? len : 0);
    add_cors_headers(req);
}

void tfserving_reply_json(http_request *req, bytebuf *b) {
    size_t len;
    char *body = bytebuf_take(b, &len);
    if (!body) {
        osp_error *err = osp_error_out_of_memory();
        tfserving_reply_error(req, err);
        osp_error_free(err);
        return;
    }
    http_reply(req, 200, "application/json", body, len);
    add_cors_headers(req);
}

/* ---- the regular expressions of http_rest_api_util.cc ---- */

/* Case-insensitive prefix match; advances *p past it. */
static bool eat(const char **p, const char *prefix) {
    size_t n = strlen(prefix);
    if (strncasecmp(*p, prefix, n) != 0)
        return false;
    *p += n;
    return true;
}

/* [^/:]+ at *p (greedy): its length, 0 when none. */
static size_t segment(const char *p) {
    size_t n = 0;
    while (p[n] && p[n] != '/' && p[n] != ':')
        n++;
    return n;
}

static size_t digits(const char *p) {
    size_t n = 0;
    while (p[n] >= '0' && p[n] <= '9')
        n++;
    return n;
}

/* The spans one match captured (pointers into the path). */
typedef struct match {
    const char *name, *version, *label, *verb;
    size_t name_len, version_len, label_len, verb_len;
} match;

/* (?:(?:/versions/(\d+))|(?:/labels/([^/:]+)))? at *p, leftmost-first:
 * the alternatives in order, then the empty match. `rest` decides whether
 * what follows matches; returns its result. */
static bool version_or_label(const char *p, match *m,
                             bool (*rest)(const char *, match *)) {
    const char *q = p;
    if (eat(&q, "/versions/")) {
        size_t n = digits(q);
        if (n > 0) {
            m->version = q;
            m->version_len = n;
            if (rest(q + n, m))
                return true;
            m->version = NULL;
            m->version_len = 0;
        }
    }
    q = p;
    if (eat(&q, "/labels/")) {
        size_t n = segment(q);
        if (n > 0) {
            m->label = q;
            m->label_len = n;
            if (rest(q + n, m))
                return true;
            m->label = NULL;
            m->label_len = 0;
        }
    }
    return rest(p, m);
}

/* POST tail: :(classify|regress|predict) to the end. */
static bool post_verb(const char *p, match *m) {
    if (*p != ':')
        return false;
    p++;
    static const char *const verbs[] = {"classify", "regress", "predict"};
    for (size_t i = 0; i < 3; i++) {
        size_t n = strlen(verbs[i]);
        if (strncasecmp(p, verbs[i], n) == 0 && p[n] == '\0') {
            m->verb = p;
            m->verb_len = n;
            return true;
        }
    }
    return false;
}

/* GET tail: (?:\/(metadata))? to the end. */
static bool get_subresource(const char *p, match *m) {
    const char *q = p;
    if (eat(&q, "/metadata") && *q == '\0') {
        m->verb = p + 1;
        m->verb_len = 8;
        return true;
    }
    return *p == '\0';
}

/* (?i)/v1/models/([^/:]+)(?:versions|labels)?:(classify|regress|predict) */
static bool match_post(const char *path, match *m) {
    const char *p = path;
    if (!eat(&p, "/v1/models/"))
        return false;
    size_t n = segment(p);
    if (n == 0)
        return false;
    m->name = p;
    m->name_len = n;
    return version_or_label(p + n, m, post_verb);
}

/* (?i)/v1/models(?:/([^/:]+))?(?:versions|labels)?(?:\/(metadata))? */
static bool match_get(const char *path, match *m) {
    const char *p = path;
    if (!eat(&p, "/v1/models"))
        return false;
    if (*p == '/') {
        size_t n = segment(p + 1);
        if (n > 0) {
            m->name = p + 1;
            m->name_len = n;
            if (version_or_label(p + 1 + n, m, get_subresource))
                return true;
            memset(m, 0, sizeof *m);
        }
    }
    return version_or_label(p, m, get_subresource);
}

/* A decoded copy of s[0..n) (%XX only, as curl_easy_unescape). */
static char *decoded(const char *s, size_t n) {
    char *copy = malloc(n + 1);
    if (copy) {
        memcpy(copy, s, n);
        http_percent_decode(copy, n, false);
    }
    return copy;
}

static osp_error *malformed(const http_request *req, const char *uri) {
    return osp_error_new(OSP_ERROR_INVALID_ARG, "Malformed request: %s %s",
                         http_request_method_name(req), uri);
}

/* Fills t from the request line (ParseModelInfo + the handler's dispatch):
 * the errors of §1.2/§1.3 otherwise. */
static osp_error *parse_target(const http_request *req, const char *uri,
                               tfserving_target *t) {
    match m;
    memset(&m, 0, sizeof m);
    http_method method = http_request_method(req);
    bool matched = method == HTTP_METHOD_POST  ? match_post(uri, &m)
                   : method == HTTP_METHOD_GET ? match_get(uri, &m)
                                               : false;
    if (!matched)
        return malformed(req, uri);
    if (m.version) {
        char text[32];
        errno = 0;
        char *end = NULL;
        unsigned long long v = 0;
        if (m.version_len < sizeof text) {
            memcpy(text, m.version, m.version_len);
            text[m.version_len] = '\0';
            v = strtoull(text, &end, 10);
        }
        if (m.version_len >= sizeof text || errno == ERANGE ||
            v > (unsigned long long)INT64_MAX)
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "Failed to convert version: %.*s to numeric.",
                                 (int)m.version_len, m.version);
        t->has_version = true;
        t->version = (int64_t)v;
    }
    if (method == HTTP_METHOD_GET && m.name_len == 0)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "Missing model name in request.");
    /* The verb was matched case-insensitively but is compared exactly. */
    if (method == HTTP_METHOD_POST) {
        if (strncmp(m.verb, "predict", m.verb_len) == 0 && m.verb_len == 7)
            t->action = TFSERVING_PREDICT;
        else if (strncmp(m.verb, "classify", m.verb_len) == 0 &&
                 m.verb_len == 8)
            t->action = TFSERVING_CLASSIFY;
        else if (strncmp(m.verb, "regress", m.verb_len) == 0 && m.verb_len == 7)
            t->action = TFSERVING_REGRESS;
        else
            return malformed(req, uri);
    } else {
        t->action = m.verb && strncmp(m.verb, "metadata", 8) == 0
                        ? TFSERVING_METADATA
                        : TFSERVING_STATUS;
    }
    t->name = decoded(m.name, m.name_len);
    if (m.label)
        t->label = decoded(m.label, m.label_len);
    if (!t->name || (m.label && !t->label))
        return osp_error_out_of_memory();
    return NULL;
}

/* ---- servables ---- */

osp_error *tfserving_servable(osp_server *server, const tfserving_target *t,
                              osp_model **model, tfs_model_view **view) {
    osp_model *m = NULL;
    tfs_model_view *v = NULL;
    osp_error *err = NULL;
    int64_t version = t->has_version ? t->version : -1;
    if (t->label) {
        /* Labels are part of the model's config: read them from the
         * latest version, which is usually the one the label names. */
        osp_error *lookup = osp_server_model_get(server, t->name, -1, &m);
        if (lookup) /* TF Serving resolves the label first: unknown too */
            osp_error_free(lookup);
        else
            err = tfs_model_view_new(osp_model_get_config(m), &v);
        bool known = m && !err && tfs_model_view_label(v, t->label, &version);
        if (known && version == osp_model_get_version(m)) {
            *model = m;
            *view = v;
            return NULL;
        }
        osp_model_unref(m);
        tfs_model_view_free(v);
        m = NULL;
        v = NULL;
        if (err)
            return err;
        if (!known)
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "Unrecognized servable version label: %s",
                                 t->label);
    }
    osp_error *lookup = osp_server_model_get(server, t->name, version, &m);
    if (lookup) {
        osp_error_free(lookup);
        goto not_found;
    }
    if ((err = tfs_model_view_new(osp_model_get_config(m), &v))) {
        osp_model_unref(m);
        return err;
    }
    *model = m;
    *view = v;
    return NULL;
not_found:
    if (version < 0)
        return osp_error_new_reason(
            OSP_ERROR_NOT_FOUND, OSP_REASON_MODEL_NOT_FOUND,
            "Servable not found for request: Latest(%s)", t->name);
    return osp_error_new_reason(
        OSP_ERROR_NOT_FOUND, OSP_REASON_VERSION_NOT_FOUND,
        "Servable not found for request: Specific(%s, %lld)", t->name,
        (long long)version);
}

/* ---- status and metadata ---- */

static osp_error *reply_status(http_request *req, const tfserving_target *t) {
    const tfserving_context *ctx = http_request_surface_ctx(req);
    bytebuf b;
    bytebuf_init(&b);
    /* A label is ignored here, as GetModelStatusWithModelSpec does. */
    osp_error *err = tfs_write_model_status(ctx->server, t->name,
                                            t->has_version, t->version, &b);
    if (err) {
        bytebuf_free(&b);
        return err;
    }
    tfserving_reply_json(req, &b);
    return NULL;
}

static osp_error *reply_metadata(http_request *req, const tfserving_target *t) {
    const tfserving_context *ctx = http_request_surface_ctx(req);
    osp_model *model = NULL;
    tfs_model_view *view = NULL;
    osp_error *err = tfserving_servable(ctx->server, t, &model, &view);
    if (err)
        return err;
    bytebuf b;
    bytebuf_init(&b);
    tfs_write_model_metadata(t->name, osp_model_get_version(model), view, &b);
    tfs_model_view_free(view);
    osp_model_unref(model);
    tfserving_reply_json(req, &b);
    return NULL;
}

/* ---- the handler ---- */

typedef struct tfs_request {
    tfserving_target target;
    bytebuf inflated; /* a gzip body, decompressed */
    size_t max_inflated;
    void *infer; /* tfserving_infer.c's state */
} tfs_request;

static void tfs_request_free(void *p) {
    tfs_request *r = p;
    if (!r)
        return;
    free(r->target.name);
    free(r->target.label);
    bytebuf_free(&r->inflated);
    tfserving_infer_free(r->infer);
    free(r);
}

static osp_error *collect_inflated(void *ctx, const char *data, size_t len) {
    tfs_request *r = ctx;
    if (r->inflated.len + len > r->max_inflated)
        return osp_error_new(OSP_ERROR_INVALID_ARG, "too large");
    bytebuf_put(&r->inflated, data, len);
    return r->inflated.oom ? osp_error_new(OSP_ERROR_UNAVAILABLE, "oom") : NULL;
}

/* The request body as the handler sees it: a gzip body is decompressed
 * (up to TFSERVING_MAX_INFLATED and the body limit), and one that fails to
 * decompress is empty, as in TF Serving's server. */
static const char *request_body(http_request *req, tfs_request *r,
                                size_t *len) {
    const char *body = http_request_body(req, len);
    const char *coding = http_request_header(req, "Content-Encoding");
    if (!coding || !strstr(coding, "gzip"))
        return body;
    size_t limit = http_request_max_input_size(req);
    r->max_inflated =
        limit < TFSERVING_MAX_INFLATED ? limit : TFSERVING_MAX_INFLATED;
    http_inflater *z = http_inflater_new();
    osp_error *err =
        z ? http_inflater_feed(z, body ? body : "", *len, collect_inflated, r)
          : osp_error_new(OSP_ERROR_UNAVAILABLE, "oom");
    bool ok = !err && http_inflater_done(z);
    osp_error_free(err);
    http_inflater_free(z);
    if (!ok || !bytebuf_reserve(&r->inflated, 1)) {
        *len = 0;
        return "";
    }
    r->inflated.data[r->inflated.len] = '\0';
    *len = r->inflated.len;
    return r->inflated.data;
}

/* The path as TF Serving's regexes see it: with "?query" when there is
 * one. Caller frees. */
static char *uri_path(const http_request *req) {
    const char *path = http_request_path(req);
    const char *query = http_request_raw_query(req);
    size_t n = strlen(path) + (query ? strlen(query) + 1 : 0);
    char *uri = malloc(n + 1);
    if (uri)
        snprintf(uri, n + 1, "%s%s%s", path, query ? "?" : "",
                 query ? query : "");
    return uri;
}

static osp_error *tfs_on_complete(http_request *req) {
    tfs_request *r = http_request_handler_ctx(req);
    char *uri = uri_path(req);
    if (!uri)
        return osp_error_out_of_memory();
    osp_error *err = parse_target(req, uri, &r->target);
    free(uri);
    if (err)
        return err;
    switch (r->target.action) {
    case TFSERVING_STATUS:
        return reply_status(req, &r->target);
    case TFSERVING_METADATA:
        return reply_metadata(req, &r->target);
    default: {
        size_t len;
        const char *body = request_body(req, r, &len);
        return tfserving_infer_start(req, &r->target, body, len);
    }
    }
}

static osp_error *tfs_on_resume(http_request *req) {
    return tfserving_infer_finish(req);
}

static const http_handler tfs_handler = {
    .on_body = NULL, /* buffered, up to the surface's limit */
    .on_complete = tfs_on_complete,
    .on_resume = tfs_on_resume,
    .destroy = tfs_request_free,
    .decode_body = false, /* gzip is decoded by the handler, see above */
};

/* OPTIONS: the CORS preflight of TF Serving's server: 200 when Origin
 * partially matches https?:// , else 400; both with an empty body. */
static void reply_preflight(http_request *req) {
    const char *origin = http_request_header(req, "Origin");
    bool ok =
        origin && (strstr(origin, "http://") || strstr(origin, "https://"));
    http_reply(req, ok ? 200 : 400, NULL, NULL, 0);
    if (ok)
        add_cors_headers(req);
}

/* libevent's page for a path TF Serving's REST dispatcher does not take
 * (§1.1): here only "/v1" itself, as every other path of the shared port
 * belongs to another surface or gets the transport's 404. */
static const char not_found_page[] = "<HTML><HEAD>\n<TITLE>404 Not "
                                     "Found</TITLE>\n</HEAD><BODY>\n<H1>Not "
                                     "Found</H1>\n</BODY></HTML>\n";

bool tfserving_route(http_request *req, void *surface_ctx) {
    (void)surface_ctx;
    const char *path = http_request_path(req);
    if (strcasecmp(path, "/v1") == 0) {
        char *body = strdup(not_found_page);
        http_reply(req, 404, "text/html", body, body ? strlen(body) : 0);
        return true;
    }
    if (strncasecmp(path, "/v1/", 4) != 0)
        return false;
    if (strcmp(http_request_method_name(req), "OPTIONS") == 0) {
        reply_preflight(req);
        return true;
    }
    tfs_request *r = calloc(1, sizeof *r);
    if (!r) {
        http_reply_error_status(req, 503, "out of memory");
        return true;
    }
    bytebuf_init(&r->inflated);
    http_request_set_handler(req, &tfs_handler, r);
    return true;
}

/* ---- shared with tfserving_infer.c ---- */

void **tfserving_infer_slot(http_request *req) {
    tfs_request *r = http_request_handler_ctx(req);
    return &r->infer;
}
