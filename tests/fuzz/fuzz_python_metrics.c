/*
 * libFuzzer target for the METRIC frames a python stub sends
 * (backends/python/python_metrics.c: pb_utils.MetricFamily and Metric
 * operations; the stub runs user code, so its frames are untrusted). The
 * input is a sequence of frames, each a u16 length and that many bytes,
 * served on one stub's table so that later frames find the families and
 * metrics earlier ones made. A frame that decodes must get an answer that
 * names its call; the table is freed at the end (the leak check of
 * libFuzzer's ASan sees what a frame forgot).
 * Build: see README.md.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "python_metrics.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    pymetrics *m = pymetrics_new();
    if (!m)
        return 0;
    while (size >= 2) {
        uint16_t len;
        memcpy(&len, data, 2);
        data += 2;
        size -= 2;
        if (len > size)
            len = (uint16_t)size;
        pyproto_text answer = {0};
        osp_error *err = pymetrics_serve(m, data, len, &answer);
        if (err) {
            osp_error_free(err);
        } else if (answer.len) {
            uint64_t call;
            if (answer.len < 24 || len < 8)
                abort();
            memcpy(&call, answer.data, 8);
            if (memcmp(&call, data, 8) != 0)
                abort(); /* the answer names the frame's call */
        }
        pyproto_text_free(&answer);
        data += len;
        size -= len;
    }
    pymetrics_free(m);
    return 0;
}
