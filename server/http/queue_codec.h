/*
 * The queue API's reply bodies (PAI-EAS wire format, docs/queue.md): queue
 * items as protobuf (DataFrameProto frames, DataFrameListProto lists, from
 * proto/queueservice.proto through protoc-c) or as the Go SDK's JSON
 * shape, and attributes as protobuf (AttributesProto) or a flat JSON
 * object with string values. No transport: server/http/queue_api.c and the
 * WebSocket watch send what these build.
 *
 * Every function returns NULL with *out (malloc'd, caller owns; NULL with
 * *len 0 for an empty protobuf message) or UNAVAILABLE when out of memory.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "osprey/error.h"
#include "osprey/queue.h"

/* One DataFrameProto: index, every tag (requestId included), data (left
 * out when index_only). item borrowed. */
osp_error *queue_encode_frame(const osp_queue_item *item, bool index_only,
                              uint8_t **out, size_t *len);

/* A DataFrameListProto of items[0..n) (borrowed). */
osp_error *queue_encode_list_proto(osp_queue_item *const *items, size_t n,
                                   uint8_t **out, size_t *len);

/* [{"index":N,"tags":{..},"data":"<base64>","message":""},...] (the Go
 * SDK's JSON codec). */
osp_error *queue_encode_list_json(osp_queue_item *const *items, size_t n,
                                  char **out, size_t *len);

/* AttributesProto / {"key":"value",...} of attrs[0..n) (borrowed). */
osp_error *queue_encode_attributes_proto(const osp_queue_attribute *attrs,
                                         size_t n, uint8_t **out, size_t *len);
osp_error *queue_encode_attributes_json(const osp_queue_attribute *attrs,
                                        size_t n, char **out, size_t *len);

/* Standard base64 (RFC 4648 §4, '=' padded) of data[0..len) into jb. */
struct bytebuf;
void queue_base64_append(struct bytebuf *jb, const void *data, size_t len);
