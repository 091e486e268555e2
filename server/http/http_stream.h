/*
 * A reply body written piece by piece (http_server.h: http_reply_stream):
 * the transport's side. The stream is shared by the handler that writes it
 * and the libmicrohttpd response that sends it; each holds a reference.
 */
#pragma once

#include <microhttpd.h>

#include "http_server.h"

/* A new stream with two references: the writer's and the reply's. */
http_stream *http__stream_new(void);
/* The MHD response that sends s on `conn` (chunked, until the end); the
 * reply's reference moves to it on success. NULL on OOM (the reply keeps
 * its reference). */
struct MHD_Response *http__stream_response(http_stream *s,
                                           struct MHD_Connection *conn);
/* The reply's reference, when no response took it: the client is gone. */
void http__stream_drop(http_stream *s);
