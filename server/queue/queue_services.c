/*
 * The queue services registry (see queue_services.h). One thread follows
 * the core: every POLL_MS it lists the ready models, starts a worker for
 * each new one, stops the workers of models that went away, and retries
 * the workers' failed sink puts. Only that thread (and new/quiesce, before
 * and after it runs) changes the worker list.
 */
#include "queue_services.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cond_deadline.h"
#include "osprey/log.h"
#include "queue_worker.h"

#define POLL_MS 250

typedef struct service_worker {
    queue_worker *worker; /* one reference */
    struct service_worker *next;
} service_worker;

struct queue_services {
    osp_server *core;
    osp_tracer *tracer;
    osp_queue_store *store;
    char **queue_only;
    size_t n_queue_only;
    unsigned window;
    char *uid;
    size_t max_input;

    pthread_mutex_t mu; /* the fields below */
    pthread_cond_t wake;
    service_worker *workers;
    size_t n_ready_models;
    bool stop;     /* the thread ends */
    bool quiesced; /* workers stopped */
    pthread_t thread;
    bool thread_started;
};

osp_queue_store *queue_services_store(queue_services *qs) {
    return qs->store;
}

/* ---- following the models ---- */

static bool name_listed(const osp_repository_entry *e, size_t n,
                        const char *name) {
    for (size_t i = 0; i < n; i++)
        if (strcmp(e[i].name, name) == 0)
            return true;
    return false;
}

static bool has_worker(queue_services *qs, const char *name) {
    for (service_worker *s = qs->workers; s; s = s->next)
        if (strcmp(queue_worker_model(s->worker), name) == 0)
            return true;
    return false;
}

static void start_worker(queue_services *qs, const char *model) {
    char sink_name[512];
    snprintf(sink_name, sizeof sink_name, "%s/sink", model);
    osp_queue *input = NULL, *sink = NULL;
    osp_error *err = osp_queue_store_queue(qs->store, model, &input);
    if (!err)
        err = osp_queue_store_queue(qs->store, sink_name, &sink);
    queue_worker *w = NULL;
    if (!err) {
        queue_worker_options o = {.model = model,
                                  .core = qs->core,
                                  .tracer = qs->tracer,
                                  .input = input,
                                  .sink = sink,
                                  .uid = qs->uid,
                                  .window = qs->window,
                                  .max_input = qs->max_input};
        err = queue_worker_start(&o, &w);
    }
    service_worker *s = err ? NULL : calloc(1, sizeof *s);
    if (!err && s == NULL) {
        queue_worker_stop(w, 0);
        queue_worker_release(w);
        err = osp_error_out_of_memory();
    }
    if (err) { /* tried again on the next round */
        OSP_LOG_WARN("queue service '%s': %s", model, osp_error_message(err));
        osp_error_free(err);
        return;
    }
    s->worker = w;
    pthread_mutex_lock(&qs->mu);
    s->next = qs->workers;
    qs->workers = s;
    pthread_mutex_unlock(&qs->mu);
    OSP_LOG_VERBOSE("queue service '%s': worker started", model);
}

/* One round: workers for new models, none for models gone, retries. */
static void sync_workers(queue_services *qs) {
    osp_repository_entry *entries = NULL;
    size_t n = 0;
    osp_error *err = osp_server_repository_index(qs->core, true, &entries, &n);
    if (err) {
        osp_error_free(err);
        return;
    }
    size_t distinct = 0;
    for (size_t i = 0; i < n; i++) {
        if (i > 0 && strcmp(entries[i].name, entries[i - 1].name) == 0)
            continue;
        distinct++;
        if (!has_worker(qs, entries[i].name))
            start_worker(qs, entries[i].name);
    }
    /* Unlink the workers of models that are no longer ready. */
    service_worker *gone = NULL;
    pthread_mutex_lock(&qs->mu);
    qs->n_ready_models = distinct;
    for (service_worker **p = &qs->workers; *p;) {
        service_worker *s = *p;
        if (name_listed(entries, n, queue_worker_model(s->worker))) {
            p = &s->next;
            continue;
        }
        *p = s->next;
        s->next = gone;
        gone = s;
    }
    service_worker *list = qs->workers;
    pthread_mutex_unlock(&qs->mu);
    osp_repository_index_free(entries, n);
    while (gone) {
        service_worker *next = gone->next;
        OSP_LOG_VERBOSE("queue service '%s': worker stopped",
                        queue_worker_model(gone->worker));
        queue_worker_stop(gone->worker, 0);
        queue_worker_release(gone->worker);
        free(gone);
        gone = next;
    }
    /* Only this thread frees list entries, so walking it unlocked is
     * safe. */
    for (service_worker *s = list; s; s = s->next)
        queue_worker_retry(s->worker);
}

static void *follow_models(void *arg) {
    queue_services *qs = arg;
    pthread_mutex_lock(&qs->mu);
    while (!qs->stop) {
        pthread_mutex_unlock(&qs->mu);
        sync_workers(qs);
        pthread_mutex_lock(&qs->mu);
        uint64_t next_poll = deadline_after_ns(POLL_MS * 1000000ull);
        while (!qs->stop && cond_wait_until(&qs->wake, &qs->mu, next_poll))
            ;
    }
    pthread_mutex_unlock(&qs->mu);
    return NULL;
}

/* ---- life ---- */

osp_error *queue_services_new(const queue_services_options *o,
                              queue_services **out) {
    queue_services *qs = calloc(1, sizeof *qs);
    if (qs == NULL)
        return osp_error_out_of_memory();
    qs->core = o->core;
    qs->tracer = o->tracer;
    qs->window = o->worker_window ? o->worker_window : 1;
    qs->max_input = o->max_input;
    pthread_mutex_init(&qs->mu, NULL);
    cond_init_monotonic(&qs->wake);
    osp_error *err = NULL;
    char uid[300];
    if (o->worker_uid && o->worker_uid[0]) {
        snprintf(uid, sizeof uid, "%s", o->worker_uid);
    } else {
        char host[256] = "localhost";
        gethostname(host, sizeof host - 1);
        snprintf(uid, sizeof uid, "%s:%ld", host, (long)getpid());
    }
    qs->uid = strdup(uid);
    qs->queue_only =
        calloc(o->n_queue_only ? o->n_queue_only : 1, sizeof *qs->queue_only);
    if (qs->uid == NULL || qs->queue_only == NULL) {
        err = osp_error_out_of_memory();
        goto fail;
    }
    for (size_t i = 0; i < o->n_queue_only; i++) {
        size_t len = strlen(o->queue_only[i]);
        if (len == 0 || len > 200 || strstr(o->queue_only[i], "/sink")) {
            err = osp_error_new(OSP_ERROR_INVALID_ARG,
                                "--queue-service '%s': a name has 1 to 200 "
                                "bytes and no '/sink'",
                                o->queue_only[i]);
            goto fail;
        }
        if ((qs->queue_only[qs->n_queue_only] = strdup(o->queue_only[i])) ==
            NULL) {
            err = osp_error_out_of_memory();
            goto fail;
        }
        qs->n_queue_only++;
    }
    if ((err = osp_queue_store_open(&o->store, &qs->store)))
        goto fail;
    for (size_t i = 0; i < qs->n_queue_only; i++) { /* created at start */
        osp_queue *q;
        char sink[256];
        snprintf(sink, sizeof sink, "%s/sink", qs->queue_only[i]);
        if ((err = osp_queue_store_queue(qs->store, qs->queue_only[i], &q)) ||
            (err = osp_queue_store_queue(qs->store, sink, &q)))
            goto fail;
    }
    sync_workers(qs);
    if (pthread_create(&qs->thread, NULL, follow_models, qs) != 0) {
        err = osp_error_new(OSP_ERROR_INTERNAL,
                            "cannot start the queue services thread");
        goto fail;
    }
    qs->thread_started = true;
    *out = qs;
    return NULL;
fail:
    queue_services_quiesce(qs, 0);
    queue_services_free(qs);
    return err;
}

bool queue_services_quiesce(queue_services *qs, int timeout_ms) {
    pthread_mutex_lock(&qs->mu);
    qs->stop = true;
    pthread_cond_broadcast(&qs->wake);
    bool started = qs->thread_started;
    qs->thread_started = false;
    pthread_mutex_unlock(&qs->mu);
    if (started)
        pthread_join(qs->thread, NULL);
    /* Close every consumer first, so all workers stop taking items at
     * once, then wait for the items in flight. */
    bool idle = true;
    for (service_worker *s = qs->workers; s; s = s->next)
        queue_worker_stop(s->worker, 0);
    for (service_worker *s = qs->workers; s; s = s->next)
        if (!queue_worker_stop(s->worker, timeout_ms))
            idle = false;
    pthread_mutex_lock(&qs->mu);
    qs->quiesced = true;
    pthread_mutex_unlock(&qs->mu);
    return idle;
}

void queue_services_free(queue_services *qs) {
    if (qs == NULL)
        return;
    if (!qs->quiesced)
        queue_services_quiesce(qs, 0);
    while (qs->workers) {
        service_worker *s = qs->workers;
        qs->workers = s->next;
        queue_worker_release(s->worker);
        free(s);
    }
    osp_queue_store_free(qs->store);
    for (size_t i = 0; i < qs->n_queue_only; i++)
        free(qs->queue_only[i]);
    free(qs->queue_only);
    free(qs->uid);
    pthread_mutex_destroy(&qs->mu);
    pthread_cond_destroy(&qs->wake);
    free(qs);
}

/* ---- lookups ---- */

static bool is_queue_only(const queue_services *qs, const char *name) {
    for (size_t i = 0; i < qs->n_queue_only; i++)
        if (strcmp(qs->queue_only[i], name) == 0)
            return true;
    return false;
}

osp_error *queue_services_find(queue_services *qs, const char *name, bool sink,
                               osp_queue **out) {
    bool known = is_queue_only(qs, name);
    if (!known) {
        osp_model *m = NULL;
        osp_error *err = osp_server_model_get(qs->core, name, -1, &m);
        if (err)
            osp_error_free(err);
        else
            osp_model_unref(m);
        known = err == NULL;
    }
    if (!known)
        return osp_error_new(OSP_ERROR_NOT_FOUND,
                             "unknown queue service '%.200s'", name);
    if (!sink)
        return osp_queue_store_queue(qs->store, name, out);
    char sink_name[300];
    snprintf(sink_name, sizeof sink_name, "%s/sink", name);
    return osp_queue_store_queue(qs->store, sink_name, out);
}

bool queue_services_lone(queue_services *qs, char *buf, size_t cap) {
    pthread_mutex_lock(&qs->mu);
    bool lone = qs->n_queue_only == 1 && qs->n_ready_models == 0;
    pthread_mutex_unlock(&qs->mu);
    if (lone)
        snprintf(buf, cap, "%s", qs->queue_only[0]);
    return lone;
}

void queue_services_foreach_worker(queue_services *qs,
                                   void (*fn)(void *ctx,
                                              const queue_service_stats *s),
                                   void *ctx) {
    pthread_mutex_lock(&qs->mu);
    for (service_worker *s = qs->workers; s; s = s->next) {
        queue_service_stats st = {.name = queue_worker_model(s->worker)};
        queue_worker_counts(s->worker, &st.processed, &st.failed,
                            &st.wait_count, &st.wait_us);
        fn(ctx, &st);
    }
    pthread_mutex_unlock(&qs->mu);
}
