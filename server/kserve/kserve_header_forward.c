/* Header forwarding (kserve_header_forward.h): one compiled regex, shared
 * read-only by every frontend thread (regexec is thread-safe). */
#include "kserve_header_forward.h"

#include <regex.h>
#include <stdlib.h>
#include <string.h>

struct kserve_header_forward {
    regex_t re;
};

osp_error *kserve_header_forward_new(const char *flag, const char *pattern,
                                     kserve_header_forward **out) {
    *out = NULL;
    if (!pattern || !pattern[0])
        return NULL;
    kserve_header_forward *f = calloc(1, sizeof *f);
    if (!f)
        return osp_error_out_of_memory();
    int rc = regcomp(&f->re, pattern, REG_EXTENDED | REG_NOSUB);
    if (rc != 0) {
        char why[256];
        regerror(rc, &f->re, why, sizeof why);
        free(f);
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "--%s: invalid regular expression '%s': %s", flag,
                             pattern, why);
    }
    *out = f;
    return NULL;
}

void kserve_header_forward_free(kserve_header_forward *f) {
    if (!f)
        return;
    regfree(&f->re);
    free(f);
}

osp_error *kserve_header_forward_apply(const kserve_header_forward *f,
                                       osp_infer_request *req,
                                       const char *name, size_t name_len,
                                       const char *value, size_t value_len) {
    if (!f)
        return NULL;
    char *key = strndup(name, name_len);
    if (!key)
        return osp_error_out_of_memory();
    osp_error *err = NULL;
    if (regexec(&f->re, key, 0, NULL, 0) == 0) {
        osp_parameter p = {.key = key, .type = OSP_PARAM_STRING};
        if (!(p.value.s = strndup(value, value_len)))
            err = osp_error_out_of_memory();
        else
            err = osp_infer_request_add_parameter(req, &p);
        free(p.value.s);
    }
    free(key);
    return err;
}
