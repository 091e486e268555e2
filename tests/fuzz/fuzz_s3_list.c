/*
 * libFuzzer target for the readers of S3's XML replies
 * (server/s3/s3_list_xml.c, on expat): the input is one reply body,
 * read as a ListObjectsV2 page and as an <Error> document. A page that
 * parses must hold what the reader promises: at most S3_LIST_MAX_OBJECTS
 * objects, each with a key and an ETag, and a token when truncated.
 * Build: see README.md.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "s3_list_xml.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *xml = (const char *)data;
    s3_list_page page;
    osp_error *err = s3_list_page_parse(xml, size, &page);
    if (err) {
        osp_error_free(err);
        if (page.objects || page.n_objects || page.next_token)
            abort(); /* a failed parse leaves nothing behind */
    } else {
        if (page.n_objects > S3_LIST_MAX_OBJECTS ||
            (page.truncated && !page.next_token))
            abort();
        for (size_t i = 0; i < page.n_objects; i++)
            if (!page.objects[i].key || !page.objects[i].etag ||
                strlen(page.objects[i].key) > 1024)
                abort();
        s3_list_page_destroy(&page);
    }
    s3_error_reply reply;
    if (s3_error_parse(xml, size, &reply) &&
        (strlen(reply.code) >= sizeof reply.code ||
         strlen(reply.message) >= sizeof reply.message))
        abort();
    return 0;
}
