/*
 * Query strings (see http_query.h): the raw text after '?', split into
 * parameters and decoded as application/x-www-form-urlencoded.
 */
#include "http_query.h"

#include <stdlib.h>
#include <string.h>

#include "json_util.h"

size_t http_percent_decode(char *s, size_t len, bool plus_as_space) {
    size_t w = 0;
    for (size_t r = 0; r < len; r++) {
        char c = s[r];
        if (c == '%' && r + 2 < len) {
            int hi = json_hex_value(s[r + 1]), lo = json_hex_value(s[r + 2]);
            if (hi >= 0 && lo >= 0) {
                s[w++] = (char)(hi * 16 + lo);
                r += 2;
                continue;
            }
        } else if (c == '+' && plus_as_space) {
            c = ' ';
        }
        s[w++] = c;
    }
    s[w] = '\0';
    return w;
}

/* Splits q->raw into decoded parameters. false on OOM. */
static bool split_params(http_query *qs) {
    const char *q = qs->raw;
    size_t n = strlen(q);
    if (n == 0)
        return true;
    size_t pieces = 1;
    for (size_t i = 0; i < n; i++)
        pieces += q[i] == '&';
    if (pieces > HTTP_MAX_QUERY_PARAMS)
        pieces = HTTP_MAX_QUERY_PARAMS; /* empty pieces may free room */
    /* Each piece needs room for two terminators: key and value. */
    qs->store = malloc(n + 2 * pieces + 1);
    qs->params = calloc(pieces, sizeof *qs->params);
    if (!qs->store || !qs->params)
        return false;
    char *w = qs->store;
    const char *p = q, *end = q + n;
    while (p < end) {
        const char *amp = memchr(p, '&', (size_t)(end - p));
        const char *stop = amp ? amp : end;
        if (stop > p) {
            if (qs->n == HTTP_MAX_QUERY_PARAMS) {
                qs->truncated = true;
                break;
            }
            const char *eq = memchr(p, '=', (size_t)(stop - p));
            const char *key_end = eq ? eq : stop;
            http_query_param *qp = &qs->params[qs->n++];
            size_t klen = (size_t)(key_end - p);
            memcpy(w, p, klen);
            qp->key = w;
            qp->key_len = http_percent_decode(w, klen, true);
            w += qp->key_len + 1;
            qp->has_value = eq != NULL;
            size_t vlen = eq ? (size_t)(stop - eq - 1) : 0;
            if (vlen)
                memcpy(w, eq + 1, vlen);
            qp->value = w;
            qp->value_len = http_percent_decode(w, vlen, true);
            w += qp->value_len + 1;
        }
        p = amp ? amp + 1 : end;
    }
    return true;
}

bool http_query_parse(http_query *q, const char *uri) {
    memset(q, 0, sizeof *q);
    const char *mark = strchr(uri, '?');
    if (!mark)
        return true;
    const char *hash = strchr(mark, '#');
    size_t n = hash ? (size_t)(hash - mark - 1) : strlen(mark + 1);
    q->raw = strndup(mark + 1, n);
    return q->raw && split_params(q);
}

const char *http_query_get(const http_query *q, const char *key) {
    for (size_t i = 0; i < q->n; i++)
        if (strcmp(q->params[i].key, key) == 0)
            return q->params[i].value;
    return NULL;
}

void http_query_free(http_query *q) {
    free(q->raw);
    free(q->store);
    free(q->params);
    memset(q, 0, sizeof *q);
}
