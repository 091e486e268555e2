/*
 * s3:// URLs (see s3_url.h). The grammar is Triton's: an endpoint form is
 * recognised by its HOST:PORT first component, everything else is a bucket.
 */
#include "s3_url.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool s3_url_is_s3(const char *path) {
    return path && strncmp(path, "s3://", 5) == 0;
}

/* S3's bucket naming rules (3-63 of a-z 0-9 . -, starting and ending with a
 * letter or digit). */
static bool bucket_name_ok(const char *b, size_t n) {
    if (n < 3 || n > 63)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!(islower((unsigned char)b[i]) || isdigit((unsigned char)b[i]) ||
              b[i] == '.' || b[i] == '-'))
            return false;
    return isalnum((unsigned char)b[0]) && isalnum((unsigned char)b[n - 1]);
}

static bool host_char_ok(char c) {
    return isalnum((unsigned char)c) || c == '-' || c == '.';
}

/* Splits "HOST:PORT" of length n into out; false when it is not one. */
static bool parse_host_port(const char *s, size_t n, s3_location *out) {
    const char *colon = memchr(s, ':', n);
    if (!colon || colon == s || (size_t)(colon - s) >= sizeof out->host)
        return false;
    for (const char *p = s; p < colon; p++)
        if (!host_char_ok(*p))
            return false;
    long port = 0;
    const char *p = colon + 1;
    if (p == s + n)
        return false;
    for (; p < s + n; p++) {
        if (!isdigit((unsigned char)*p) ||
            (port = port * 10 + (*p - '0')) > 65535)
            return false;
    }
    if (port == 0)
        return false;
    memcpy(out->host, s, (size_t)(colon - s));
    out->host[colon - s] = '\0';
    out->port = (int)port;
    return true;
}

osp_error *s3_location_parse(const char *url, s3_location *out) {
    memset(out, 0, sizeof *out);
    if (!s3_url_is_s3(url))
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "'%.64s' is not an s3:// URL", url ? url : "");
    const char *rest = url + 5;
    bool scheme_given = false;
    if (strncmp(rest, "https://", 8) == 0) {
        out->https = true;
        scheme_given = true;
        rest += 8;
    } else if (strncmp(rest, "http://", 7) == 0) {
        scheme_given = true;
        rest += 7;
    }
    size_t first = strcspn(rest, "/");
    if (parse_host_port(rest, first, out)) {
        rest += first;
        if (*rest == '/')
            rest++;
        first = strcspn(rest, "/");
    } else if (scheme_given || memchr(rest, ':', first)) {
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "S3 URL '%.256s': expected s3://[http(s)://]"
                             "HOST:PORT/BUCKET/PREFIX",
                             url);
    } else {
        out->https = true; /* AWS */
    }
    if (!bucket_name_ok(rest, first))
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "S3 URL '%.256s': '%.*s' is not a valid bucket "
                             "name (3-63 of a-z, 0-9, '.', '-')",
                             url, (int)(first < 64 ? first : 64), rest);
    memcpy(out->bucket, rest, first);
    out->bucket[first] = '\0';
    rest += first;
    while (*rest == '/')
        rest++;
    size_t n = strlen(rest);
    while (n > 0 && rest[n - 1] == '/')
        n--;
    if (n >= sizeof out->prefix)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "S3 URL: the prefix is longer than %d bytes",
                             S3_MAX_PREFIX - 1);
    memcpy(out->prefix, rest, n);
    out->prefix[n] = '\0';
    return NULL;
}

bool s3_url_encode(const char *s, bool keep_slash, char *buf, size_t *len,
                   size_t cap) {
    static const char hex[] = "0123456789ABCDEF";
    size_t w = *len;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        bool plain = isalnum(*p) || *p == '-' || *p == '_' || *p == '.' ||
                     *p == '~' || (keep_slash && *p == '/');
        if (w + (plain ? 1 : 3) >= cap)
            return false;
        if (plain) {
            buf[w++] = (char)*p;
        } else {
            buf[w++] = '%';
            buf[w++] = hex[*p >> 4];
            buf[w++] = hex[*p & 15];
        }
    }
    buf[w] = '\0';
    *len = w;
    return true;
}

char *s3_location_url(const s3_location *loc, const char *region,
                      const char *key, const char *query) {
    size_t cap = 3 * (key ? strlen(key) : 0) + (query ? strlen(query) : 0) +
                 sizeof loc->host + sizeof loc->bucket + 128 +
                 (region ? strlen(region) : 0);
    char *url = malloc(cap);
    if (!url)
        return NULL;
    int n;
    bool path_style = loc->host[0] || strchr(loc->bucket, '.');
    if (loc->host[0])
        n = snprintf(url, cap, "%s://%s:%d/%s/", loc->https ? "https" : "http",
                     loc->host, loc->port, loc->bucket);
    else if (path_style)
        n = snprintf(url, cap, "https://s3.%s.amazonaws.com/%s/", region,
                     loc->bucket);
    else
        n = snprintf(url, cap, "https://%s.s3.%s.amazonaws.com/", loc->bucket,
                     region);
    size_t len = (size_t)n;
    if (key && !s3_url_encode(key, true, url, &len, cap)) {
        free(url);
        return NULL;
    }
    if (query && query[0])
        snprintf(url + len, cap - len, "?%s", query);
    return url;
}

void s3_location_describe(const s3_location *loc, char *buf, size_t cap) {
    if (loc->host[0])
        snprintf(buf, cap, "s3://%s%s:%d/%s%s%s", loc->https ? "https://" : "",
                 loc->host, loc->port, loc->bucket, loc->prefix[0] ? "/" : "",
                 loc->prefix);
    else
        snprintf(buf, cap, "s3://%s%s%s", loc->bucket,
                 loc->prefix[0] ? "/" : "", loc->prefix);
}
