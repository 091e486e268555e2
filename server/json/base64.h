/* Base64 as the load API's "file:" parameters carry file contents. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

/* Decodes standard base64 (RFC 4648 section 4: '+' '/', '=' padding to a
 * multiple of 4 characters, nothing else). False on malformed input or out
 * of memory. On success the caller frees *out (*out_len bytes; never NULL,
 * even when empty). */
#ifdef __cplusplus
extern "C" {
#endif

bool base64_decode(const char *in, size_t len, unsigned char **out,
                   size_t *out_len);

/* The 6-bit value of a standard base64 character ('+' '/'), or -1. For
 * decoders with other rules (TF Serving's absl-style unescaping). */
int base64_sextet(char c);

#ifdef __cplusplus
}
#endif
