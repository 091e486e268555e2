/*
 * bytebuf: the tree's one growable byte buffer (Redis's sds, h2o's
 * h2o_buffer_t in spirit): append bytes, strings, characters or printf
 * output, reserve room to write into directly, take the bytes out.
 *
 * A failed allocation does not stop the caller at each append: `oom` is
 * set, every later append is ignored, and the caller checks once at the
 * end (bytebuf_take returns NULL). The buffer always keeps one byte of
 * room past `len`, so bytebuf_take can end the bytes with a NUL.
 *
 * The JSON writers (server/json: bytebuf is this type) and the trace files
 * (server/core/trace) build on it.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct bytebuf {
    char *data; /* owned; NULL until the first append */
    size_t len;
    size_t cap;
    bool oom; /* sticky: an append failed; the contents are incomplete */
} bytebuf;

void bytebuf_init(bytebuf *b);
/* Frees the bytes; the buffer is empty (and usable) again. */
void bytebuf_free(bytebuf *b);
/* Makes room for `extra` more bytes after len (plus the NUL's byte), to
 * be written at data + len by the caller, who then adds to len. false
 * (and oom set) when it cannot. */
bool bytebuf_reserve(bytebuf *b, size_t extra);
void bytebuf_put(bytebuf *b, const void *s, size_t n);
void bytebuf_puts(bytebuf *b, const char *s);
void bytebuf_putc(bytebuf *b, char c);
void bytebuf_printf(bytebuf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Moves the bytes out, NUL-terminated (*len, when len is not NULL,
 * excludes the NUL), and leaves the buffer empty. The caller frees them.
 * NULL when an append had failed (the buffer is then freed). */
char *bytebuf_take(bytebuf *b, size_t *len);

#ifdef __cplusplus
}
#endif
