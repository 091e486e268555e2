/*
 * How the KServe surface renders errors: {"error":"<message>"} with
 * Triton's HTTP status for each error code.
 */
#pragma once

#include "http_server.h"
#include "osprey/error.h"

/* Triton's HTTP status of an error code: UNKNOWN 400, INTERNAL 500,
 * NOT_FOUND 404, INVALID_ARG 400, UNAVAILABLE 503, UNSUPPORTED 501,
 * ALREADY_EXISTS 400, CANCELLED 400. */
unsigned kserve_error_status(osp_error_code code);

/* The "kserve" http_surface's reply_error: err is borrowed. */
void kserve_reply_error(http_request *req, osp_error *err);
