/*
 * S3 requests on libcurl (see s3_client.h): one easy handle per request,
 * a retry loop around each, and S3's error codes turned into messages a
 * user can act on. No message carries a secret: only the location, the
 * key, S3's error code and where the credentials came from.
 */
#include "s3_client.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "osprey/log.h"
#include "s3_sign.h"

#define CONNECT_TIMEOUT_SECS 5L
#define STALL_TIMEOUT_SECS 10L      /* no byte moved for this long: give up */
#define MAX_REPLY_BYTES (16u << 20) /* a list page or an error body */
#define RANGE_BYTES ((uint64_t)64 << 20) /* one GetObject of a large file */
#define DEFAULT_ATTEMPTS 3
#define MAX_ATTEMPTS 10

struct s3_client {
    s3_location loc;
    s3_credentials creds;
    char *ca_file;
    int attempts;
    char where[S3_MAX_PREFIX + 400]; /* the location, for messages */
};

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_result;

static void curl_init_once(void) {
    curl_init_result = curl_global_init(CURL_GLOBAL_DEFAULT);
}

/* AWS_MAX_ATTEMPTS, as the AWS SDKs read it. */
static int attempts_from_env(void) {
    const char *v = getenv("AWS_MAX_ATTEMPTS");
    if (!v || !v[0])
        return DEFAULT_ATTEMPTS;
    char *end;
    long n = strtol(v, &end, 10);
    if (*end || n < 1)
        return DEFAULT_ATTEMPTS;
    return n > MAX_ATTEMPTS ? MAX_ATTEMPTS : (int)n;
}

static bool region_ok(const char *r) {
    if (!r[0] || strlen(r) > 64)
        return false;
    for (; *r; r++)
        if (!((*r >= 'a' && *r <= 'z') || (*r >= '0' && *r <= '9') ||
              *r == '-'))
            return false;
    return true;
}

osp_error *s3_client_new(const s3_location *loc, s3_credentials *creds,
                         const char *ca_file, s3_client **out) {
    pthread_once(&curl_once, curl_init_once);
    if (curl_init_result != CURLE_OK)
        return osp_error_new(OSP_ERROR_INTERNAL, "libcurl: %s",
                             curl_easy_strerror(curl_init_result));
    if (!region_ok(creds->region))
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "AWS region '%.64s' is not a region name",
                             creds->region);
    s3_client *c = calloc(1, sizeof *c);
    if (!c)
        return osp_error_out_of_memory();
    if (ca_file && !(c->ca_file = strdup(ca_file))) {
        free(c);
        return osp_error_out_of_memory();
    }
    c->loc = *loc;
    c->creds = *creds;
    memset(creds, 0, sizeof *creds);
    c->attempts = attempts_from_env();
    s3_location_describe(loc, c->where, sizeof c->where);
    *out = c;
    return NULL;
}

void s3_client_free(s3_client *c) {
    if (!c)
        return;
    s3_credentials_destroy(&c->creds);
    free(c->ca_file);
    free(c);
}

const char *s3_client_credentials_source(const s3_client *c) {
    return c->creds.source;
}

const char *s3_client_region(const s3_client *c) {
    return c->creds.region;
}

/* ---- one transfer --------------------------------------------------------
 * The body goes to `reply` (a list page, or any error body), or, for a
 * 2xx download, to `fd` at offset `written` with the MD5 updated. */

typedef struct transfer {
    CURL *curl;
    char *reply;
    size_t reply_len;
    int fd;            /* -1: no file */
    uint64_t written;  /* bytes in the file */
    EVP_MD_CTX *md5;   /* NULL: not checked */
    bool write_failed; /* the file could not be written (errno kept) */
    int write_errno;
    bool reply_too_big;
    uint64_t size;     /* the file's listed size: never written past */
    bool too_long;     /* the body went past `size` */
    bool body_started; /* a byte of this attempt's body has arrived */
} transfer;

/* A 200 where a range was asked for (a store that ignores ranges): the
 * body is the whole object, so the file starts over. */
static bool restart_file(transfer *t) {
    t->written = 0;
    if (ftruncate(t->fd, 0) != 0) {
        t->write_failed = true;
        t->write_errno = errno;
        return false;
    }
    return !t->md5 || EVP_DigestInit_ex(t->md5, EVP_md5(), NULL);
}

static size_t on_body(char *data, size_t size, size_t n, void *user) {
    transfer *t = user;
    size_t len = size * n;
    long status = 0;
    curl_easy_getinfo(t->curl, CURLINFO_RESPONSE_CODE, &status);
    if (t->fd >= 0 && status >= 200 && status < 300) {
        if (!t->body_started && status == 200 && t->written > 0 &&
            !restart_file(t))
            return 0;
        t->body_started = true;
        if (len > t->size - t->written) {
            t->too_long = true;
            return 0;
        }
        for (size_t done = 0; done < len;) {
            ssize_t w = pwrite(t->fd, data + done, len - done,
                               (off_t)(t->written + done));
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0) {
                t->write_failed = true;
                t->write_errno = w < 0 ? errno : ENOSPC;
                return 0;
            }
            done += (size_t)w;
        }
        if (t->md5)
            EVP_DigestUpdate(t->md5, data, len);
        t->written += len;
        return len;
    }
    if (t->reply_len + len > MAX_REPLY_BYTES) {
        t->reply_too_big = true;
        return 0;
    }
    char *grown = realloc(t->reply, t->reply_len + len + 1);
    if (!grown)
        return 0;
    memcpy(grown + t->reply_len, data, len);
    t->reply = grown;
    t->reply_len += len;
    grown[t->reply_len] = '\0';
    return len;
}

/* Performs one GET of `url` with `range` (NULL: none). *status is the HTTP
 * status (0 when none arrived); the curl result is returned. */
static CURLcode perform_once(s3_client *c, const char *url, const char *range,
                             transfer *t, long *status, char *curl_error) {
    *status = 0;
    curl_error[0] = '\0';
    struct curl_slist *headers = NULL;
    CURL *curl = curl_easy_init();
    if (!curl)
        return CURLE_OUT_OF_MEMORY;
    t->curl = curl;
    CURLcode rc = CURLE_OUT_OF_MEMORY;
    if (!s3_sign_request(curl, &c->creds, url, range, NULL, &headers))
        goto out;
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT, CONNECT_TIMEOUT_SECS);
    curl_easy_setopt(curl, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(curl, CURLOPT_LOW_SPEED_TIME, STALL_TIMEOUT_SECS);
    curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, curl_error);
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, t);
    curl_easy_setopt(curl, CURLOPT_USERAGENT, "osprey");
    if (c->ca_file)
        curl_easy_setopt(curl, CURLOPT_CAINFO, c->ca_file);
    rc = curl_easy_perform(curl);
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, status);
out:
    curl_slist_free_all(headers);
    curl_easy_cleanup(curl);
    t->curl = NULL;
    return rc;
}

static bool transport_error_is_transient(CURLcode rc) {
    switch (rc) {
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_CONNECT:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_PARTIAL_FILE:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
        return true;
    default:
        return false;
    }
}

/* 5xx, throttling (429, SlowDown) and S3's own "try again" codes. */
static bool status_is_transient(long status, const char *code) {
    return status >= 500 || status == 429 || !strcmp(code, "SlowDown") ||
           !strcmp(code, "RequestTimeout") || !strcmp(code, "InternalError");
}

/* Sleeps before attempt `attempt` (2, 3, ...): 200 ms doubled each time,
 * at most 5 s, with jitter so that replicas do not retry in step. */
static void backoff(int attempt) {
    long ms = 200L << (attempt - 2 < 5 ? attempt - 2 : 5);
    if (ms > 5000)
        ms = 5000;
    ms = ms / 2 + rand() % (ms / 2 + 1);
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* The error a user can act on for S3's reply `e` (HTTP `status`) to a
 * request for object `key` (NULL: the listing). */
static osp_error *reply_error(const s3_client *c, long status,
                              const s3_error_reply *e, const char *key) {
    const char *what = key ? key : "the listing";
    const char *code = e->code, *message = e->message, *region = e->region;
    const char *src = c->creds.source;
    if (!strcmp(code, "NoSuchBucket") || (status == 404 && !code[0] && !key))
        return osp_error_new(OSP_ERROR_NOT_FOUND,
                             "S3 bucket '%s' does not exist (%s)",
                             c->loc.bucket, c->where);
    if (!strcmp(code, "NoSuchKey") || status == 404)
        return osp_error_new(OSP_ERROR_NOT_FOUND,
                             "S3 object '%s' is gone from %s", what, c->where);
    if (!strcmp(code, "InvalidAccessKeyId"))
        return osp_error_new(OSP_ERROR_UNAVAILABLE,
                             "access denied by %s (%s): the access key id "
                             "from %s is not known there",
                             c->where, code, src);
    if (!strcmp(code, "SignatureDoesNotMatch"))
        return osp_error_new(OSP_ERROR_UNAVAILABLE,
                             "access denied by %s (%s): the secret access "
                             "key from %s does not match its key id",
                             c->where, code, src);
    if (!strcmp(code, "AuthorizationHeaderMalformed") ||
        !strcmp(code, "PermanentRedirect") || status == 301) {
        return osp_error_new(OSP_ERROR_UNAVAILABLE,
                             "%s: wrong region '%s'%s%s%s: set AWS_REGION",
                             c->where, c->creds.region,
                             region[0] ? " (the bucket is in '" : "", region,
                             region[0] ? "')" : "");
    }
    if (status == 403)
        return osp_error_new(OSP_ERROR_UNAVAILABLE,
                             "access denied by %s (%s): the credentials from "
                             "%s may not read '%s'",
                             c->where, code[0] ? code : "HTTP 403", src, what);
    return osp_error_new(OSP_ERROR_UNAVAILABLE,
                         "%s answered HTTP %ld%s%s%s%s to a request for '%s'",
                         c->where, status, code[0] ? " " : "", code,
                         message[0] ? ": " : "", message, what);
}

/* One request for object `key` (NULL: a listing), tried up to `attempts`
 * times while its failures are transient; *transient says whether the
 * last one was. On success the caller owns t->reply. */
static osp_error *perform(s3_client *c, const char *url, const char *range,
                          int attempts, transfer *t, const char *key,
                          bool *transient) {
    char curl_error[CURL_ERROR_SIZE];
    osp_error *err = NULL;
    *transient = false;
    for (int attempt = 1; attempt <= attempts; attempt++) {
        if (attempt > 1)
            backoff(attempt);
        osp_error_free(err);
        err = NULL;
        free(t->reply);
        t->reply = NULL;
        t->reply_len = 0;
        t->reply_too_big = false;
        t->body_started = false;
        long status;
        CURLcode rc = perform_once(c, url, range, t, &status, curl_error);
        if (t->write_failed)
            return osp_error_new(OSP_ERROR_INTERNAL,
                                 "cannot write the model cache: %s",
                                 strerror(t->write_errno));
        if (t->too_long)
            return osp_error_new(OSP_ERROR_UNAVAILABLE,
                                 "S3 object '%s' from %s is larger than "
                                 "listed (did it change?)",
                                 key, c->where);
        if (rc == CURLE_OK && status >= 200 && status < 300)
            return NULL;
        if (rc == CURLE_OK || (rc == CURLE_WRITE_ERROR && t->reply_too_big)) {
            s3_error_reply e;
            s3_error_parse(t->reply ? t->reply : "", t->reply_len, &e);
            err = reply_error(c, status, &e, key);
            *transient = status_is_transient(status, e.code);
        } else {
            err = osp_error_new(
                OSP_ERROR_UNAVAILABLE, "cannot reach %s: %s", c->where,
                curl_error[0] ? curl_error : curl_easy_strerror(rc));
            *transient = transport_error_is_transient(rc);
        }
        if (!*transient)
            return err;
        if (attempt < attempts)
            OSP_LOG_WARN("%s (attempt %d of %d; retrying)",
                         osp_error_message(err), attempt, attempts);
    }
    return err;
}

/* ---- ListObjectsV2 --------------------------------------------------------
 */

/* The canonical query of one page: keys sorted, values encoded. */
static bool list_query(const char *prefix, const char *token, char *buf,
                       size_t cap) {
    size_t len = 0;
    buf[0] = '\0';
    if (token) {
        len = (size_t)snprintf(buf, cap, "continuation-token=");
        if (!s3_url_encode(token, false, buf, &len, cap))
            return false;
        buf[len++] = '&';
    }
    int n = snprintf(buf + len, cap - len, "list-type=2&prefix=");
    if (n < 0 || (size_t)n >= cap - len)
        return false;
    len += (size_t)n;
    return s3_url_encode(prefix, false, buf, &len, cap);
}

osp_error *s3_client_list(s3_client *c, const char *prefix, size_t max_objects,
                          s3_object **objects_out, size_t *n_out) {
    s3_object *all = NULL;
    size_t n = 0;
    char *token = NULL;
    osp_error *err = NULL;
    char query[3 * 2048 + 64];
    do {
        if (!list_query(prefix, token, query, sizeof query)) {
            err = osp_error_new(OSP_ERROR_INVALID_ARG,
                                "S3 listing: prefix or token too long");
            break;
        }
        char *url = s3_location_url(&c->loc, c->creds.region, NULL, query);
        if (!url) {
            err = osp_error_out_of_memory();
            break;
        }
        transfer t = {.fd = -1};
        bool transient;
        err = perform(c, url, NULL, c->attempts, &t, NULL, &transient);
        free(url);
        s3_list_page page = {0};
        if (!err)
            err =
                s3_list_page_parse(t.reply ? t.reply : "", t.reply_len, &page);
        free(t.reply);
        if (err)
            break;
        if (n + page.n_objects > max_objects) {
            err = osp_error_new(OSP_ERROR_INVALID_ARG,
                                "%s holds more than %zu objects", c->where,
                                max_objects);
            s3_list_page_destroy(&page);
            break;
        }
        s3_object *grown = realloc(all, (n + page.n_objects + 1) * sizeof *all);
        if (!grown) {
            err = osp_error_out_of_memory();
            s3_list_page_destroy(&page);
            break;
        }
        all = grown;
        memcpy(all + n, page.objects, page.n_objects * sizeof *all);
        n += page.n_objects;
        free(page.objects);
        free(token);
        token = page.truncated ? page.next_token : NULL;
        if (!page.truncated)
            free(page.next_token);
    } while (token);
    free(token);
    if (err) {
        s3_objects_free(all, n);
        return err;
    }
    *objects_out = all;
    *n_out = n;
    return NULL;
}

/* ---- GetObject --------------------------------------------------------- */

/* Whether S3's ETag is the object's MD5 (a single-part upload, not
 * encrypted with KMS): 32 hex digits. */
static bool etag_is_md5(const char *etag) {
    if (strlen(etag) != 32)
        return false;
    for (const char *p = etag; *p; p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
            return false;
    return true;
}

static osp_error *check_md5(const s3_client *c, const s3_object *obj,
                            EVP_MD_CTX *md5) {
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    char hex[2 * EVP_MAX_MD_SIZE + 1];
    EVP_DigestFinal_ex(md5, digest, &len);
    for (unsigned int i = 0; i < len; i++)
        snprintf(hex + 2 * i, 3, "%02x", digest[i]);
    hex[2 * len] = '\0';
    if (strcmp(hex, obj->etag) == 0)
        return NULL;
    return osp_error_new(OSP_ERROR_UNAVAILABLE,
                         "S3 object '%s' from %s does not match its ETag "
                         "(MD5 %s, ETag %s)",
                         obj->key, c->where, hex, obj->etag);
}

osp_error *s3_client_download(s3_client *c, const s3_object *obj,
                              const char *path) {
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
        return osp_error_new(OSP_ERROR_INTERNAL,
                             "cannot create a file in the model cache: %s",
                             strerror(errno));
    osp_error *err = NULL;
    transfer t = {.fd = fd, .size = obj->size};
    if (etag_is_md5(obj->etag) &&
        (!(t.md5 = EVP_MD_CTX_new()) ||
         !EVP_DigestInit_ex(t.md5, EVP_md5(), NULL))) {
        err = osp_error_out_of_memory();
        goto out;
    }
    char *url = s3_location_url(&c->loc, c->creds.region, obj->key, NULL);
    if (!url) {
        err = osp_error_out_of_memory();
        goto out;
    }
    /* Ranges of RANGE_BYTES; a broken transfer resumes where the file
     * ends, and each range gets c->attempts tries. */
    int failures = 0;
    while (!err && (t.written < obj->size || obj->size == 0)) {
        char range[64];
        uint64_t last = t.written + RANGE_BYTES - 1;
        if (last >= obj->size)
            last = obj->size - 1;
        snprintf(range, sizeof range, "bytes=%llu-%llu",
                 (unsigned long long)t.written, (unsigned long long)last);
        uint64_t before = t.written;
        bool transient;
        err = perform(c, url, obj->size ? range : NULL, 1, &t, obj->key,
                      &transient);
        free(t.reply);
        t.reply = NULL;
        if (obj->size == 0)
            break;
        if (!err && t.written == before) {
            err = osp_error_new(OSP_ERROR_UNAVAILABLE,
                                "%s sent no bytes of '%s'", c->where, obj->key);
            transient = true;
        }
        if (err && transient && ++failures < c->attempts) {
            OSP_LOG_WARN("%s (resuming at byte %llu, attempt %d of %d)",
                         osp_error_message(err), (unsigned long long)t.written,
                         failures + 1, c->attempts);
            osp_error_free(err);
            err = NULL;
            backoff(failures + 1);
        } else if (!err && t.written > before) {
            failures = 0;
        }
    }
    free(url);
    if (!err && t.written != obj->size)
        err = osp_error_new(OSP_ERROR_UNAVAILABLE,
                            "S3 object '%s' from %s: got %llu bytes, listed "
                            "%llu",
                            obj->key, c->where, (unsigned long long)t.written,
                            (unsigned long long)obj->size);
    if (!err && t.md5)
        err = check_md5(c, obj, t.md5);
out:
    EVP_MD_CTX_free(t.md5);
    if (close(fd) != 0 && !err)
        err =
            osp_error_new(OSP_ERROR_INTERNAL,
                          "cannot write the model cache: %s", strerror(errno));
    return err;
}
