/*
 * Host-to-device copy bandwidth from a pinned-pool buffer
 * (osp_device_alloc_host) and from pageable memory (osp_buffer_new_host),
 * 4 KiB to 256 MiB, through osp_memcpy_async on one stream. Wall-clock time
 * over a burst of copies, stream synchronised at the end, so the pageable
 * path's host-side staging is counted.
 *
 * Prints a table, then one "RESULT h2d ..." line per size for check.sh.
 */
#include <string.h>

#include "bench_common.h"

#define MAX_BYTES ((size_t)256 << 20)

/* GB/s of `reps` copies of `size` bytes from src to dst. */
static double copy_gbps(osp_stream *s, void *dst, const void *src, size_t size,
                        int reps) {
    BENCH_CHECK(osp_memcpy_async(s, dst, src, size, OSP_COPY_HOST_TO_DEVICE));
    BENCH_CHECK(osp_stream_synchronize(s)); /* warm-up */
    double t0 = bench_now_s();
    for (int i = 0; i < reps; i++)
        BENCH_CHECK(
            osp_memcpy_async(s, dst, src, size, OSP_COPY_HOST_TO_DEVICE));
    BENCH_CHECK(osp_stream_synchronize(s));
    double seconds = bench_now_s() - t0;
    return (double)size * reps / seconds / 1e9;
}

int main(void) {
    /* Room for the largest buffer, with slack for alignment. */
    osp_device *dev = bench_gpu0(MAX_BYTES + ((size_t)4 << 20));
    osp_stream *s = NULL;
    BENCH_CHECK(osp_stream_new(dev, &s));

    osp_buffer *pinned = NULL, *device = NULL;
    BENCH_CHECK(osp_device_alloc_host(dev, MAX_BYTES, &pinned));
    if (pinned->kind != OSP_MEMORY_HOST_PINNED) {
        fprintf(stderr, "pinned pool unavailable: host buffer is pageable\n");
        return 1;
    }
    osp_buffer *pageable = osp_buffer_new_host(MAX_BYTES);
    if (pageable == NULL) {
        fprintf(stderr, "out of host memory\n");
        return 1;
    }
    BENCH_CHECK(osp_device_alloc(dev, MAX_BYTES, &device));
    /* Touch every page so first-touch faults are not timed. */
    memset(pinned->data, 1, MAX_BYTES);
    memset(pageable->data, 1, MAX_BYTES);

    printf("%10s %14s %14s %8s\n", "bytes", "pinned GB/s", "pageable GB/s",
           "ratio");
    for (size_t size = 4096; size <= MAX_BYTES; size *= 4) {
        /* About 1 GiB per measurement, at least 20 copies. */
        int reps = (int)(((size_t)1 << 30) / size);
        if (reps < 20)
            reps = 20;
        if (reps > 2000)
            reps = 2000;
        double pin = copy_gbps(s, device->data, pinned->data, size, reps);
        double page = copy_gbps(s, device->data, pageable->data, size, reps);
        printf("%10zu %14.2f %14.2f %7.2fx\n", size, pin, page, pin / page);
        printf("RESULT h2d bytes=%zu pinned_gbps=%.2f pageable_gbps=%.2f "
               "ratio=%.2f\n",
               size, pin, page, pin / page);
    }
    osp_buffer_free(device);
    osp_buffer_free(pageable);
    osp_buffer_free(pinned);
    osp_stream_free(s);
    osp_devices_shutdown();
    return 0;
}
