/*
 * The KServe surface's context: what its handlers reach through the request
 * instead of transport globals. main.c builds one and lists it as the
 * surface_ctx of the "kserve" http_surface.
 */
#pragma once

#include "http_server.h"
#include "osprey/server.h"
#include "osprey/trace.h"

typedef struct kserve_context {
    osp_server *server; /* borrowed for the HTTP server's lifetime */
    osp_tracer *tracer; /* borrowed likewise; may be NULL */
} kserve_context;

/* The core of the request's KServe surface (req must have been claimed by
 * a surface whose surface_ctx is a kserve_context; routing counts). */
osp_server *kserve_core(const http_request *req);
/* The tracer of the request's KServe surface (NULL when none). */
osp_tracer *kserve_tracer(const http_request *req);
