/*
 * Triton's generate extension (POST .../generate and .../generate_stream)
 * mapped onto and from an inference request, without a transport.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "bytebuf.h"
#include "osprey/error.h"
#include "osprey/infer.h"
#include "osprey/model_config.h"
#include "osprey/server.h"

/* A request for `model_name`/`version` from the generate body text[0..len)
 * (text NUL-terminated at len): members naming one of config's inputs
 * (borrowed) become tensors, held in buffers from core, whose expanded
 * bytes together stay within max_input; the rest become parameters.
 * Triton's messages on failure. Caller owns *out. */
osp_error *kserve_generate_request_decode(osp_server *core,
                                          const osp_model_config *config,
                                          const char *model_name,
                                          int64_t version, const char *text,
                                          size_t len, size_t max_input,
                                          osp_infer_request **out);

/* Appends response r (borrowed) as generate's JSON object. */
osp_error *kserve_generate_response_encode(bytebuf *b,
                                           const osp_infer_response *r);
