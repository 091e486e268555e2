/*
 * Stream entries of the Redis Streams queue store into items: every field
 * is checked (type, size, number) before use, since the reply comes from
 * another process (queue_redis_internal.h).
 */
#include <stdlib.h>
#include <string.h>

#include "queue_redis_internal.h"

/* Tags an item may carry; more in one entry means it was not written by
 * this store. */
#define MAX_ENTRY_TAGS 1024

uint64_t redis_id_index(const char *id, size_t len) {
    uint64_t v = 0;
    size_t i = 0;
    for (; i < len && id[i] >= '0' && id[i] <= '9'; i++) {
        if (v > (UINT64_MAX - 9) / 10)
            return 0;
        v = v * 10 + (uint64_t)(id[i] - '0');
    }
    if (i == 0 || i + 2 != len || id[i] != '-' || id[i + 1] != '0')
        return 0;
    return v;
}

/* A NUL-terminated copy of a string reply (caller frees); NULL when it is
 * not a string or memory ran out. */
static char *reply_strdup(const redisReply *r) {
    if (!redis_reply_is_string(r))
        return NULL;
    char *s = malloc(r->len + 1);
    if (s == NULL)
        return NULL;
    if (r->len > 0)
        memcpy(s, r->str, r->len);
    s[r->len] = '\0';
    return s;
}

osp_queue_item *redis_entry_item(const redisReply *entry, bool *malformed) {
    *malformed = true;
    if (!redis_reply_is_array(entry, 2) ||
        !redis_reply_is_string(entry->element[0]) ||
        !redis_reply_is_array(entry->element[1], 0))
        return NULL;
    const redisReply *fields = entry->element[1];
    if (fields->elements % 2 != 0 || fields->elements / 2 > MAX_ENTRY_TAGS + 5)
        return NULL;
    uint64_t index =
        redis_id_index(entry->element[0]->str, entry->element[0]->len);
    if (index == 0)
        return NULL;

    long long priority = 0, put_ns = 0;
    const redisReply *data = NULL, *rid = NULL;
    size_t n_tags = 0;
    for (size_t i = 0; i < fields->elements; i += 2) {
        const redisReply *k = fields->element[i], *v = fields->element[i + 1];
        if (!redis_reply_is_string(k) || !redis_reply_is_string(v) ||
            k->len == 0)
            return NULL;
        if (k->str[0] == 'T')
            n_tags++;
        else if (redis_reply_equals(k, "p")) {
            if (!redis_reply_int(v, &priority) || priority < -1000000000 ||
                priority > 1000000000)
                return NULL;
        } else if (redis_reply_equals(k, "t")) {
            if (!redis_reply_int(v, &put_ns))
                return NULL;
        } else if (redis_reply_equals(k, "d"))
            data = v;
        else if (redis_reply_equals(k, "r"))
            rid = v;
    }
    if (data == NULL || rid == NULL || rid->len == 0)
        return NULL;

    osp_queue_item *item = NULL;
    osp_queue_tag *tags = calloc(n_tags + 1, sizeof *tags);
    char **strings = calloc(2 * n_tags + 2, sizeof *strings);
    size_t n_strings = 0, t = 0;
    bool ok = tags != NULL && strings != NULL;
    for (size_t i = 0; ok && i < fields->elements; i += 2) {
        const redisReply *k = fields->element[i], *v = fields->element[i + 1];
        if (k->str[0] != 'T')
            continue;
        char *key = reply_strdup(k);
        char *value = reply_strdup(v);
        if (key != NULL)
            strings[n_strings++] = key;
        if (value != NULL)
            strings[n_strings++] = value;
        if (key == NULL || value == NULL) {
            ok = false;
            break;
        }
        tags[t].key = key + 1; /* past the 'T' */
        tags[t].value = value;
        t++;
    }
    char *request_id = ok ? reply_strdup(rid) : NULL;
    if (request_id != NULL) {
        strings[n_strings++] = request_id;
        *malformed = false;
        item = queue_item_new(index, (int)priority, request_id, tags, t,
                              data->str, data->len, (int64_t)put_ns);
    } else if (ok) {
        *malformed = false; /* out of memory */
    } else {
        *malformed = false;
    }
    for (size_t i = 0; strings != NULL && i < n_strings; i++)
        free(strings[i]);
    free(strings);
    free(tags);
    return item;
}
