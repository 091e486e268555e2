#include "base64.h"

#include <stdint.h>
#include <stdlib.h>

int base64_sextet(char c) {
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

bool base64_decode(const char *in, size_t len, unsigned char **out,
                   size_t *out_len) {
    if (len % 4 != 0)
        return false;
    size_t pad = 0;
    if (len > 0 && in[len - 1] == '=')
        pad = len > 1 && in[len - 2] == '=' ? 2 : 1;
    unsigned char *buf = malloc(len / 4 * 3 + 1);
    if (!buf)
        return false;
    size_t n = 0;
    for (size_t i = 0; i < len; i += 4) {
        bool last = i + 4 == len;
        uint32_t v = 0;
        for (size_t j = 0; j < 4; j++) {
            int s = last && j >= 4 - pad ? 0 : base64_sextet(in[i + j]);
            if (s < 0) {
                free(buf);
                return false;
            }
            v = v << 6 | (uint32_t)s;
        }
        size_t bytes = last ? 3 - pad : 3;
        for (size_t j = 0; j < bytes; j++)
            buf[n++] = (unsigned char)(v >> (16 - 8 * j));
    }
    *out = buf;
    *out_len = n;
    return true;
}
