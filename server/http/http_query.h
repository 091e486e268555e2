/*
 * A request's query string, parsed once when the request starts (see the
 * query accessors in http_server.h for the decoding rules). Internal to
 * the transport.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "http_server.h"

typedef struct http_query {
    char *raw;                /* after '?', before '#', not decoded */
    char *store;              /* the decoded keys and values, one block */
    http_query_param *params; /* point into store */
    size_t n;
    bool truncated; /* more than HTTP_MAX_QUERY_PARAMS parameters */
} http_query;

/* Parses the query of the request-target `uri` (borrowed) into *q (raw
 * NULL when there is no '?'). false on OOM; release with http_query_free
 * in either case. */
bool http_query_parse(http_query *q, const char *uri);
/* The decoded value of the first parameter named key, or NULL. */
const char *http_query_get(const http_query *q, const char *key);
void http_query_free(http_query *q);
