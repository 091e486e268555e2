#include "kserve_params.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>

int kserve_parse_stoi(const char *s, long long *out) {
    const char *p = s;
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r' || *p == '\f' ||
           *p == '\v')
        p++;
    const char *digits = p;
    if (*digits == '+' || *digits == '-')
        digits++;
    if (*digits < '0' || *digits > '9')
        return 1;
    errno = 0;
    long long v = strtoll(p, NULL, 10);
    if (errno == ERANGE || v < INT_MIN || v > INT_MAX)
        return 2;
    *out = v;
    return 0;
}

osp_error *kserve_parse_version(const char *s, int64_t *out) {
    if (s[0] == '\0') {
        *out = -1;
        return NULL;
    }
    /* std::stol: leading blanks, a sign, digits, and whatever follows
     * ignored; no digits or out of range throws. */
    const char *p = s;
    while (*p == ' ' || (*p >= '\t' && *p <= '\r'))
        p++;
    const char *digits = p + (*p == '+' || *p == '-');
    errno = 0;
    long long v = strtoll(p, NULL, 10);
    if (*digits < '0' || *digits > '9' || errno == ERANGE)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "failed to get model version from specified "
                             "version string '%s' (details: stol), version "
                             "should be an integral value > 0",
                             s);
    if (v < 0)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "invalid model version specified '%s' , version "
                             "should be an integral value > 0",
                             s);
    *out = v;
    return NULL;
}
