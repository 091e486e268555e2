/*
 * Query values of the queue API (see queue_params.h).
 */
#include "queue_params.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "http_server.h"

bool queue_key_is_reserved(const char *key) {
    size_t n = strlen(key);
    return n >= 2 && key[0] == '_' && key[n - 1] == '_';
}

static const char *const known_keys[] = {
    "_index_",      "_length_",      "_timeout_",  "_raw_",   "_auto_delete_",
    "_attrs_",      "_search_",      "_count_",    "_watch_", "_window_",
    "_index_only_", "_auto_commit_", "_indexes_",  "_trunc_", "_eos_",
    "_force_",      "_negative_",    "_priority_",
};

bool queue_key_is_known(const char *key) {
    for (size_t i = 0; i < sizeof known_keys / sizeof known_keys[0]; i++)
        if (strcmp(key, known_keys[i]) == 0)
            return true;
    return false;
}

osp_error *queue_parse_bool(const char *key, const char *value, bool *out) {
    if (strcasecmp(value, "true") == 0 || strcmp(value, "1") == 0) {
        *out = true;
        return NULL;
    }
    if (strcasecmp(value, "false") == 0 || strcmp(value, "0") == 0) {
        *out = false;
        return NULL;
    }
    return osp_error_new(OSP_ERROR_INVALID_ARG,
                         "%s must be true or false, got '%.64s'", key, value);
}

/* Decimal digits s[0..n) into *out, false on overflow past max or a
 * non-digit. */
static bool digits_value(const char *s, size_t n, uint64_t max, uint64_t *out) {
    uint64_t v = 0;
    if (n == 0)
        return false;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        unsigned d = (unsigned)(s[i] - '0');
        if (v > (max - d) / 10)
            return false;
        v = v * 10 + d;
    }
    *out = v;
    return true;
}

osp_error *queue_parse_uint(const char *key, const char *value, uint64_t max,
                            uint64_t *out) {
    if (!digits_value(value, strlen(value), max, out))
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "%s must be a whole number from 0 to %llu, got "
                             "'%.64s'",
                             key, (unsigned long long)max, value);
    return NULL;
}

osp_error *queue_parse_start_index(const char *value, int64_t *out) {
    uint64_t v;
    if (strcmp(value, "-1") == 0) {
        *out = -1;
        return NULL;
    }
    if (!digits_value(value, strlen(value), INT64_MAX, &v))
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "_index_ must be -1, 0 or an index, got '%.64s'",
                             value);
    *out = (int64_t)v;
    return NULL;
}

/* Nanoseconds per unit of a Go duration; 0 when unit[0..n) is none. */
static uint64_t duration_unit(const char *unit, size_t n) {
    static const struct {
        const char *name;
        uint64_t ns;
    } units[] = {{"ns", 1},
                 {"us", 1000},
                 {"\xc2\xb5s", 1000}, /* µs, U+00B5 */
                 {"\xce\xbcs", 1000}, /* μs, U+03BC */
                 {"ms", 1000000},
                 {"s", 1000000000ull},
                 {"m", 60000000000ull},
                 {"h", 3600000000000ull}};
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (strlen(units[i].name) == n && memcmp(units[i].name, unit, n) == 0)
            return units[i].ns;
    return 0;
}

osp_error *queue_parse_timeout(const char *value, uint64_t *ns) {
    const char *p = value;
    bool negative = false;
    if (*p == '-' || *p == '+')
        negative = *p++ == '-';
    if (strcmp(p, "0") == 0) {
        *ns = 0;
        return NULL;
    }
    /* Sum of <number>[.<fraction>]<unit> terms; a lone number is seconds. */
    double total = 0;
    bool any = false;
    while (*p) {
        const char *start = p;
        while (isdigit((unsigned char)*p))
            p++;
        size_t int_len = (size_t)(p - start);
        const char *frac = NULL;
        size_t frac_len = 0;
        if (*p == '.') {
            frac = ++p;
            while (isdigit((unsigned char)*p))
                p++;
            frac_len = (size_t)(p - frac);
        }
        if (int_len == 0 && frac_len == 0)
            goto bad;
        if (int_len > 18 || frac_len > 18)
            goto bad;
        double number = 0;
        for (size_t i = 0; i < int_len; i++)
            number = number * 10 + (start[i] - '0');
        double scale = 0.1;
        for (size_t i = 0; i < frac_len; i++, scale /= 10)
            number += (frac[i] - '0') * scale;
        const char *unit = p;
        while (*p && !isdigit((unsigned char)*p) && *p != '.')
            p++;
        size_t unit_len = (size_t)(p - unit);
        uint64_t per;
        if (unit_len == 0) {
            if (any || *p) /* only a lone number may omit its unit */
                goto bad;
            per = 1000000000ull;
        } else if ((per = duration_unit(unit, unit_len)) == 0) {
            goto bad;
        }
        total += number * (double)per;
        if (total > (double)QUEUE_MAX_TIMEOUT_NS && !negative)
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "_timeout_ '%.64s' is longer than one hour",
                                 value);
        any = true;
    }
    if (!any)
        goto bad;
    *ns = negative ? 0 : (uint64_t)total;
    return NULL;
bad:
    return osp_error_new(OSP_ERROR_INVALID_ARG,
                         "_timeout_ must be a duration such as 500ms, 5s, "
                         "1m30s or a number of seconds, got '%.64s'",
                         value);
}

osp_error *queue_parse_indexes(const char *value, uint64_t **out, size_t *n) {
    size_t cap = 1;
    for (const char *p = value; *p; p++)
        cap += *p == ',';
    if (cap > QUEUE_MAX_INDEXES)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "_indexes_ lists more than %d indexes",
                             QUEUE_MAX_INDEXES);
    uint64_t *list = malloc(cap * sizeof *list);
    if (list == NULL)
        return osp_error_out_of_memory();
    size_t count = 0;
    const char *p = value;
    for (;;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        while (len > 0 && *p == ' ') {
            p++;
            len--;
        }
        while (len > 0 && p[len - 1] == ' ')
            len--;
        uint64_t v;
        if (!digits_value(p, len, UINT64_MAX, &v) || v == 0) {
            free(list);
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "_indexes_ must be a comma-separated list of "
                                 "indexes (whole numbers above 0), got "
                                 "'%.64s'",
                                 value);
        }
        list[count++] = v;
        if (!end)
            break;
        p = end + 1;
    }
    *out = list;
    *n = count;
    return NULL;
}

/* s[0..n) is ([A-Z][a-z]*)+: an upper-case letter, then letters. */
static bool camel_words(const char *s, size_t n) {
    if (n == 0 || !isupper((unsigned char)s[0]))
        return false;
    for (size_t i = 1; i < n; i++)
        if (!isalpha((unsigned char)s[i]))
            return false;
    return true;
}

/* s[0..n) is [A-Z][a-z]*: one upper-case letter, then lower-case. */
static bool camel_word(const char *s, size_t n) {
    if (n == 0 || !isupper((unsigned char)s[0]))
        return false;
    for (size_t i = 1; i < n; i++)
        if (!islower((unsigned char)s[i]))
            return false;
    return true;
}

bool queue_negative_code_valid(const char *code) {
    size_t n = strlen(code);
    if (n == 0 || n > QUEUE_MAX_CODE_BYTES)
        return false;
    bool all_digits = true;
    for (size_t i = 0; i < n; i++)
        all_digits = all_digits && isdigit((unsigned char)code[i]);
    if (all_digits || camel_words(code, n))
        return true;
    /* words, any one character, then one more word */
    for (size_t split = 1; split + 2 <= n; split++)
        if (camel_words(code, split) &&
            camel_word(code + split + 1, n - split - 1))
            return true;
    return false;
}

osp_error *queue_parse_negative_form(const char *body, size_t len, char **code,
                                     char **reason) {
    *code = NULL;
    *reason = NULL;
    const char *p = body, *end = body + len;
    while (p < end) {
        const char *amp = memchr(p, '&', (size_t)(end - p));
        const char *stop = amp ? amp : end;
        const char *eq = memchr(p, '=', (size_t)(stop - p));
        const char *key_end = eq ? eq : stop;
        const char *val = eq ? eq + 1 : stop;
        size_t key_len = (size_t)(key_end - p);
        char **slot = NULL;
        if (key_len == 6 && memcmp(p, "_code_", 6) == 0)
            slot = code;
        else if (key_len == 8 && memcmp(p, "_reason_", 8) == 0)
            slot = reason;
        if (slot != NULL && *slot == NULL) {
            size_t vlen = (size_t)(stop - val);
            if (vlen > 3 * QUEUE_MAX_REASON_BYTES)
                goto too_long;
            char *copy = malloc(vlen + 1);
            if (copy == NULL) {
                free(*code);
                free(*reason);
                *code = *reason = NULL;
                return osp_error_out_of_memory();
            }
            memcpy(copy, val, vlen);
            http_percent_decode(copy, vlen, true);
            *slot = copy;
        }
        p = amp ? amp + 1 : end;
    }
    if (*reason != NULL && strlen(*reason) > QUEUE_MAX_REASON_BYTES)
        goto too_long;
    if (*code == NULL || !queue_negative_code_valid(*code)) {
        free(*code);
        free(*reason);
        *code = *reason = NULL;
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "a negative commit needs a form body with "
                             "_code_ matching ^([A-Z][a-z]*)+(.[A-Z][a-z]*)?$ "
                             "or ^[0-9]+$, at most %d characters",
                             QUEUE_MAX_CODE_BYTES);
    }
    if (*reason == NULL && (*reason = strdup("")) == NULL) {
        free(*code);
        *code = NULL;
        return osp_error_out_of_memory();
    }
    return NULL;
too_long:
    free(*code);
    free(*reason);
    *code = *reason = NULL;
    return osp_error_new(OSP_ERROR_INVALID_ARG,
                         "_reason_ is longer than %d bytes",
                         QUEUE_MAX_REASON_BYTES);
}
