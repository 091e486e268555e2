/*
 * Items, tags, request ids and attribute lists: the pieces both stores
 * build their answers from (queue_store_impl.h).
 */
#define _GNU_SOURCE /* vasprintf */
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "queue_store_impl.h"

/* Bytes a string takes in an item block, terminator included. */
static size_t string_bytes(const char *s) {
    return strlen(s) + 1;
}

static char *copy_into(char **cursor, const char *s) {
    size_t n = string_bytes(s);
    char *dst = *cursor;
    memcpy(dst, s, n);
    *cursor += n;
    return dst;
}

/* Layout of the block: the item, its tag array, the data, then every
 * string. The data comes right after the tags so it stays 8-byte aligned. */
osp_queue_item *queue_item_new(uint64_t index, int priority,
                               const char *request_id,
                               const osp_queue_tag *tags, size_t n_tags,
                               const void *data, size_t size,
                               int64_t put_unix_ns) {
    const char *tagged_id = queue_tags_find(tags, n_tags, "requestId");
    if (request_id == NULL)
        request_id = tagged_id;
    if (request_id == NULL)
        return NULL;
    bool add_id_tag = tagged_id == NULL;
    size_t total_tags = n_tags + (add_id_tag ? 1 : 0);

    size_t strings = string_bytes(request_id);
    for (size_t i = 0; i < n_tags; i++)
        strings += string_bytes(tags[i].key) + string_bytes(tags[i].value);
    if (add_id_tag)
        strings += sizeof "requestId" + string_bytes(request_id);
    size_t tags_bytes = total_tags * sizeof(osp_queue_tag);
    size_t data_bytes = (size + 7) & ~(size_t)7;
    if (size > SIZE_MAX / 2 || strings > SIZE_MAX / 4)
        return NULL;
    osp_queue_item *item =
        malloc(sizeof *item + tags_bytes + data_bytes + strings);
    if (item == NULL)
        return NULL;

    osp_queue_tag *tag_array = (osp_queue_tag *)(item + 1);
    char *data_copy = (char *)tag_array + tags_bytes;
    char *cursor = data_copy + data_bytes;
    if (size > 0)
        memcpy(data_copy, data, size);
    item->index = index;
    item->priority = priority;
    item->request_id = copy_into(&cursor, request_id);
    for (size_t i = 0; i < n_tags; i++) {
        tag_array[i].key = copy_into(&cursor, tags[i].key);
        tag_array[i].value = copy_into(&cursor, tags[i].value);
    }
    if (add_id_tag) {
        tag_array[n_tags].key = copy_into(&cursor, "requestId");
        tag_array[n_tags].value = item->request_id;
    }
    item->tags = tag_array;
    item->n_tags = total_tags;
    item->data = data_copy;
    item->size = size;
    item->put_unix_ns = put_unix_ns;
    return item;
}

osp_queue_item *queue_item_clone(const osp_queue_item *item) {
    return queue_item_new(item->index, item->priority, item->request_id,
                          item->tags, item->n_tags, item->data, item->size,
                          item->put_unix_ns);
}

void osp_queue_item_free(osp_queue_item *item) {
    free(item);
}

void osp_queue_items_free(osp_queue_item **items, size_t n) {
    if (items == NULL)
        return;
    for (size_t i = 0; i < n; i++)
        free(items[i]);
    free(items);
}

const char *queue_tags_find(const osp_queue_tag *tags, size_t n,
                            const char *key) {
    for (size_t i = 0; i < n; i++)
        if (strcmp(tags[i].key, key) == 0)
            return tags[i].value;
    return NULL;
}

bool queue_item_matches(const osp_queue_item *item,
                        const osp_queue_tag *filters, size_t n_filters) {
    for (size_t i = 0; i < n_filters; i++) {
        const char *value =
            queue_tags_find(item->tags, item->n_tags, filters[i].key);
        if (value == NULL || strcmp(value, filters[i].value) != 0)
            return false;
    }
    return true;
}

/* Random bytes for request ids, taken from the kernel 16 ids at a time:
 * one getrandom(2) per put was a syscall on every put for 16 bytes. Each
 * thread has its own buffer (no lock); no byte is handed out twice. */
#define REQUEST_ID_POOL_BYTES 256

static _Thread_local struct {
    unsigned char bytes[REQUEST_ID_POOL_BYTES];
    size_t used; /* bytes handed out since the last refill */
    bool filled;
} rid_pool;

static void request_id_random(unsigned char out[16]) {
    if (!rid_pool.filled || rid_pool.used == REQUEST_ID_POOL_BYTES) {
        size_t got = 0;
        while (got < REQUEST_ID_POOL_BYTES) {
            ssize_t r =
                getrandom(rid_pool.bytes + got, REQUEST_ID_POOL_BYTES - got, 0);
            if (r <= 0) { /* no entropy source (never on Linux >= 3.17) */
                for (; got < REQUEST_ID_POOL_BYTES; got++)
                    rid_pool.bytes[got] = (unsigned char)rand();
                break;
            }
            got += (size_t)r;
        }
        rid_pool.used = 0;
        rid_pool.filled = true;
    }
    memcpy(out, rid_pool.bytes + rid_pool.used, 16);
    rid_pool.used += 16;
}

void queue_request_id_new(char out[37]) {
    static const char hex[] = "0123456789abcdef";
    unsigned char b[16];
    request_id_random(b);
    b[6] = (unsigned char)((b[6] & 0x0f) | 0x40); /* version 4 */
    b[8] = (unsigned char)((b[8] & 0x3f) | 0x80); /* RFC 4122 variant */
    /* 8-4-4-4-12 hex digits; snprintf's 16 conversions cost more than the
     * rest of a put's store work. */
    char *p = out;
    for (int i = 0; i < 16; i++) {
        if (i == 4 || i == 6 || i == 8 || i == 10)
            *p++ = '-';
        *p++ = hex[b[i] >> 4];
        *p++ = hex[b[i] & 15];
    }
    *p = '\0';
}

bool queue_attributes_add(osp_queue_attribute **attrs, size_t *n,
                          const char *key, const char *value_fmt, ...) {
    va_list ap;
    va_start(ap, value_fmt);
    char *value = NULL;
    int len = vasprintf(&value, value_fmt, ap);
    va_end(ap);
    if (len < 0)
        return false;
    char *key_copy = strdup(key);
    osp_queue_attribute *grown =
        key_copy ? realloc(*attrs, (*n + 1) * sizeof **attrs) : NULL;
    if (grown == NULL) {
        free(key_copy);
        free(value);
        return false;
    }
    grown[*n].key = key_copy;
    grown[*n].value = value;
    *attrs = grown;
    (*n)++;
    return true;
}
