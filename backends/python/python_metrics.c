/*
 * A stub's custom metrics (python_metrics.h): a small table from the
 * stub's ids to registry handles, under a mutex, and the METRIC frame's
 * decoder. Every length the stub sends is bounded by the frame.
 */
#include "python_metrics.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "osprey/custom_metrics.h"

/* Labels and buckets one metric may have: far beyond real use, they bound
 * what a stub can make the server allocate for one frame. */
#define MAX_LABELS 64
#define MAX_BUCKETS 4096
/* Families and metrics one stub may hold at once. */
#define MAX_HANDLES 65536

typedef struct handle {
    uint64_t id;
    osp_metric_family *family; /* exactly one of the two */
    osp_metric *metric;
} handle;

struct pymetrics {
    pthread_mutex_t lock;
    handle *handles;
    size_t n, cap;
};

pymetrics *pymetrics_new(void) {
    pymetrics *m = calloc(1, sizeof *m);
    if (m)
        pthread_mutex_init(&m->lock, NULL);
    return m;
}

void pymetrics_free(pymetrics *m) {
    if (!m)
        return;
    for (size_t i = 0; i < m->n; i++) { /* metrics first, then families */
        osp_metric_delete(m->handles[i].metric);
    }
    for (size_t i = 0; i < m->n; i++)
        osp_metric_family_delete(m->handles[i].family);
    free(m->handles);
    pthread_mutex_destroy(&m->lock);
    free(m);
}

/* ---- the table (lock held) ---- */

static handle *find(pymetrics *m, uint64_t id) {
    for (size_t i = 0; i < m->n; i++)
        if (m->handles[i].id == id)
            return &m->handles[i];
    return NULL;
}

static bool add(pymetrics *m, handle h) {
    if (m->n >= MAX_HANDLES)
        return false;
    if (m->n == m->cap) {
        size_t cap = m->cap ? 2 * m->cap : 16;
        handle *grown = realloc(m->handles, cap * sizeof *grown);
        if (!grown)
            return false;
        m->handles = grown;
        m->cap = cap;
    }
    m->handles[m->n++] = h;
    return true;
}

static void remove_handle(pymetrics *m, handle *h) {
    osp_metric_delete(h->metric);
    osp_metric_family_delete(h->family);
    *h = m->handles[--m->n];
}

/* ---- the frame ---- */

typedef struct cursor {
    const uint8_t *p;
    size_t left;
} cursor;

static bool get(cursor *c, void *dst, size_t n) {
    if (c->left < n)
        return false;
    memcpy(dst, c->p, n);
    c->p += n;
    c->left -= n;
    return true;
}

/* A string of a u16 or u32 length, copied NUL-terminated into *out. */
static bool get_string(cursor *c, size_t width, char **out) {
    uint32_t n = 0;
    if (!get(c, &n, width) || c->left < n || !(*out = malloc((size_t)n + 1)))
        return false;
    memcpy(*out, c->p, n);
    (*out)[n] = '\0';
    c->p += n;
    c->left -= n;
    return true;
}

static osp_error *malformed(const char *what) {
    return osp_error_new(OSP_ERROR_INTERNAL,
                         "python backend: malformed METRIC frame (%s)", what);
}

/* A handle the table cannot take (out of memory, or MAX_HANDLES). */
static osp_error *too_many(void) {
    return osp_error_new(OSP_ERROR_UNAVAILABLE,
                         "a python model holds at most %d metric families "
                         "and metrics at once",
                         MAX_HANDLES);
}

/* An error of the registry as Triton's python backend words it. */
static osp_error *wrapped(const char *prefix, osp_error *err) {
    if (!err)
        return NULL;
    osp_error *out = osp_error_new(osp_error_get_code(err), "%s%s", prefix,
                                   osp_error_message(err));
    osp_error_free(err);
    return out;
}

static osp_error *family_new(pymetrics *m, uint64_t id, cursor *c,
                             osp_error **refused) {
    uint8_t kind = 0;
    char *name = NULL, *help = NULL;
    osp_error *err = NULL;
    if (!get(c, &kind, 1) || !get_string(c, 2, &name) ||
        !get_string(c, 4, &help)) {
        err = malformed("family");
    } else if (find(m, id)) {
        err = malformed("an id used twice");
    } else {
        osp_metric_family *f = NULL;
        *refused = wrapped("Error when creating MetricFamily: ",
                           osp_metric_family_new((osp_metric_kind)kind, name,
                                                 help, &f));
        if (f && !add(m, (handle){.id = id, .family = f})) {
            osp_metric_family_delete(f);
            *refused = too_many();
        }
    }
    free(name);
    free(help);
    return err;
}

static osp_error *metric_new(pymetrics *m, uint64_t id, cursor *c,
                             osp_error **refused) {
    uint64_t family_id = 0;
    uint32_t n_labels = 0, n_buckets = 0;
    char *names[MAX_LABELS] = {0}, *values[MAX_LABELS] = {0};
    double *buckets = NULL;
    osp_error *err = NULL;
    if (!get(c, &family_id, 8) || !get(c, &n_labels, 4) ||
        n_labels > MAX_LABELS) {
        err = malformed("labels");
        goto done;
    }
    for (uint32_t i = 0; i < n_labels; i++)
        if (!get_string(c, 2, &names[i]) || !get_string(c, 4, &values[i])) {
            err = malformed("label");
            goto done;
        }
    if (!get(c, &n_buckets, 4) ||
        (n_buckets != UINT32_MAX && n_buckets > MAX_BUCKETS)) {
        err = malformed("buckets");
        goto done;
    }
    if (n_buckets != UINT32_MAX) {
        if (!(buckets = malloc(((size_t)n_buckets + 1) * sizeof *buckets)) ||
            !get(c, buckets, (size_t)n_buckets * sizeof *buckets)) {
            err = malformed("buckets");
            goto done;
        }
    }
    handle *family = find(m, family_id);
    if (!family || !family->family || find(m, id)) {
        err = malformed("an unknown family or an id used twice");
        goto done;
    }
    osp_metric *metric = NULL;
    *refused = wrapped(
        "Error when creating Metric: ",
        osp_metric_new(family->family, (const char *const *)names,
                       (const char *const *)values, n_labels, buckets,
                       n_buckets == UINT32_MAX ? 0 : n_buckets, &metric));
    if (metric && !add(m, (handle){.id = id, .metric = metric})) {
        osp_metric_delete(metric);
        *refused = too_many();
    }
done:
    for (uint32_t i = 0; i < n_labels && i < MAX_LABELS; i++) {
        free(names[i]);
        free(values[i]);
    }
    free(buckets);
    return err;
}

/* Ops 3-6 on a metric. */
static osp_error *operate(pymetrics *m, uint8_t op, uint64_t id, cursor *c,
                          double *value, osp_error **refused) {
    double arg = 0;
    if (op != 6 && !get(c, &arg, 8))
        return malformed("value");
    handle *h = find(m, id);
    if (!h || !h->metric)
        return malformed("an unknown metric");
    switch (op) {
    case 3:
        *refused = wrapped("Failed to increment metric value: ",
                           osp_metric_increment(h->metric, arg));
        break;
    case 4:
        *refused = wrapped("Failed to set metric value: ",
                           osp_metric_set(h->metric, arg));
        break;
    case 5:
        *refused = wrapped("Failed to observe metric value: ",
                           osp_metric_observe(h->metric, arg));
        break;
    default:
        *refused = wrapped("Failed to get metric value: ",
                           osp_metric_value(h->metric, value));
    }
    return NULL;
}

osp_error *pymetrics_serve(pymetrics *m, const uint8_t *payload, size_t len,
                           pyproto_text *answer) {
    cursor c = {payload, len};
    uint64_t call = 0, id = 0;
    uint8_t op = 0;
    if (!get(&c, &call, 8) || !get(&c, &op, 1) || !get(&c, &id, 8))
        return malformed("header");
    osp_error *err = NULL, *refused = NULL;
    double value = 0;
    pthread_mutex_lock(&m->lock);
    switch (op) {
    case 0:
        err = family_new(m, id, &c, &refused);
        break;
    case 1:
        err = metric_new(m, id, &c, &refused);
        break;
    case 2: {
        handle *h = find(m, id);
        if (h)
            remove_handle(m, h);
        break;
    }
    case 3:
    case 4:
    case 5:
    case 6:
        err = operate(m, op, id, &c, &value, &refused);
        break;
    default:
        err = malformed("unknown operation");
    }
    pthread_mutex_unlock(&m->lock);
    if (!err && c.left)
        err = malformed("trailing bytes");
    if (err || call == 0) {
        osp_error_free(refused);
        return err;
    }
    pyproto_append_call_answer(answer, call, refused, value);
    osp_error_free(refused);
    return answer->failed ? osp_error_out_of_memory() : NULL;
}
