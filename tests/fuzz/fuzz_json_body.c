/*
 * libFuzzer target for the request-body JSON path (server/http/json_util.c):
 * json_scan's depth pre-scan and inputs[i].data span finder, then json-c
 * parsing bounded by that depth (with and without the spans skipped), then
 * the iterative json_free. Any input must give a tree or an error without
 * crashing, leaking or reading out of bounds. json_scan alone must not look
 * at text[len]: it is run first with a digit there, and must agree with the
 * run with a NUL there. Build: see README.md.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "json_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_error(osp_error *err) {
    osp_error_code code = osp_error_get_code(err);
    if (code != OSP_ERROR_INTERNAL && code != OSP_ERROR_INVALID_ARG &&
        code != OSP_ERROR_UNAVAILABLE)
        abort();
    if (code == OSP_ERROR_INTERNAL &&
        strncmp(osp_error_message(err),
                "failed to parse the request JSON buffer: ", 41) != 0)
        abort();
    osp_error_free(err);
}

static bool is_ws(char c) {
    return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* The HTTP layer hands over the body with a NUL after it (json_parse
     * needs it); the copy is exact otherwise, so ASan catches overreads. */
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);

    /* json_scan reads text[0..len) only (it needs no NUL): a digit after
     * the text must change nothing (it once let strtod run on). */
    text[size] = '9';
    json_scan_info plain = {0};
    osp_error *plain_err = json_scan(text, size, &plain);
    bool plain_ok = plain_err == NULL;
    osp_error_free(plain_err);
    text[size] = '\0';

    /* The path of the small endpoints (kserve.c: body_json). */
    struct json_object *root = NULL;
    osp_error *err = json_parse_body(text, size, &root);
    bool body_ok = err == NULL;
    if (err)
        check_error(err);
    else
        json_free(root);

    /* The infer path (kserve_infer.c: parse_header). */
    json_scan_info info = {0};
    info.want_data_spans = true;
    err = json_scan(text, size, &info);
    if (err) {
        if (info.spans || info.n_spans)
            abort(); /* spans are freed on error */
        check_error(err);
        if (body_ok || plain_ok)
            abort(); /* the scans must agree */
        free(text);
        return 0;
    }
    if (!plain_ok || plain.max_depth != info.max_depth)
        abort();
    if (info.max_depth > JSON_MAX_PARSE_DEPTH || info.max_depth > size)
        abort();
    size_t prev_end = 0;
    for (size_t i = 0; i < info.n_spans; i++) {
        const json_span *sp = &info.spans[i];
        if (sp->start < prev_end || sp->start >= sp->end || sp->end > size)
            abort(); /* sorted, non-overlapping, inside the text */
        if (is_ws(text[sp->start]) || is_ws(text[sp->end - 1]))
            abort(); /* the value's own text, no spaces around it */
        prev_end = sp->end;
    }
    root = NULL;
    err =
        json_parse(text, size, info.max_depth, info.spans, info.n_spans, &root);
    if (err)
        check_error(err);
    else
        json_free(root);
    free(info.spans);
    free(text);
    return 0;
}
