/*
 * The upgraded connections of one http_server (http_upgrade.c), internal
 * to the transport: http_server.c hands each socket that MHD upgraded to
 * the registry, whose thread serves it until it ends.
 */
#pragma once

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#include <microhttpd.h>

#include "http_server.h"

typedef struct http_upgrades {
    pthread_mutex_t mu;  /* the list and every connection's queue/flags */
    http_upgraded *list; /* connections the thread serves */
    bool stop;           /* the thread ends everything and exits */
    int wake[2];         /* self-pipe that interrupts the thread's poll() */
    pthread_t thread;
    bool started;
} http_upgrades;

/* Initialises *u and starts its thread. On error, call http_upgrades_destroy
 * (nothing else). */
osp_error *http_upgrades_start(http_upgrades *u);
/* Ends every connection (on_close for each, on the thread) and joins the
 * thread; connections adopted later are ended at once. Idempotent. */
void http_upgrades_stop(http_upgrades *u);
/* After http_upgrades_stop (or a failed start): frees the pipe and lock. */
void http_upgrades_destroy(http_upgrades *u);

/* Takes over `sock` (upgraded by MHD; urh its handle) for the surface's
 * handler h (borrowed for the connection's life) and ctx; extra_in
 * (borrowed) are bytes read past the request head, delivered first. On
 * false (out of memory) the socket is closed and ctx stays the caller's. */
bool http_upgrades_adopt(http_upgrades *u, const http_upgrade_handler *h,
                         void *ctx, MHD_socket sock,
                         struct MHD_UpgradeResponseHandle *urh,
                         const char *extra_in, size_t extra_in_size);
