/* The growable byte buffer (bytebuf.h) and array growth (array_grow.h). */
#include "bytebuf.h"

#include "array_grow.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void bytebuf_init(bytebuf *b) {
    memset(b, 0, sizeof *b);
}

void bytebuf_free(bytebuf *b) {
    free(b->data);
    memset(b, 0, sizeof *b);
}

bool bytebuf_reserve(bytebuf *b, size_t extra) {
    if (b->oom)
        return false;
    /* Strictly less: one byte stays free for bytebuf_take's NUL. */
    if (extra < b->cap - b->len)
        return true;
    if (extra > SIZE_MAX / 2 - b->len) {
        b->oom = true;
        return false;
    }
    size_t cap = b->cap ? b->cap : 256;
    while (cap - b->len <= extra)
        cap *= 2;
    char *grown = realloc(b->data, cap);
    if (grown == NULL) {
        b->oom = true;
        return false;
    }
    b->data = grown;
    b->cap = cap;
    return true;
}

void bytebuf_put(bytebuf *b, const void *s, size_t n) {
    if (n == 0 || !bytebuf_reserve(b, n))
        return;
    memcpy(b->data + b->len, s, n);
    b->len += n;
}

void bytebuf_puts(bytebuf *b, const char *s) {
    bytebuf_put(b, s, strlen(s));
}

void bytebuf_putc(bytebuf *b, char c) {
    if (!bytebuf_reserve(b, 1))
        return;
    b->data[b->len++] = c;
}

void bytebuf_printf(bytebuf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->oom = true;
        return;
    }
    /* vsnprintf writes a NUL after the text: the byte reserve keeps. */
    if (!bytebuf_reserve(b, (size_t)n))
        return;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

char *bytebuf_take(bytebuf *b, size_t *len) {
    if (!bytebuf_reserve(b, 0)) {
        bytebuf_free(b);
        return NULL;
    }
    b->data[b->len] = '\0';
    char *p = b->data;
    if (len)
        *len = b->len;
    memset(b, 0, sizeof *b);
    return p;
}

bool array_grow(void **array, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap)
        return true;
    size_t new_cap = *cap ? *cap : 16;
    while (new_cap < need) {
        if (new_cap > SIZE_MAX / 2)
            return false;
        new_cap *= 2;
    }
    if (elem != 0 && new_cap > SIZE_MAX / elem)
        return false;
    void *grown = realloc(*array, new_cap * elem);
    if (grown == NULL)
        return false;
    *array = grown;
    *cap = new_cap;
    return true;
}
