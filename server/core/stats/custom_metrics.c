/*
 * The custom metrics registry (osprey/custom_metrics.h): families in
 * creation order, each with its series in creation order, under one mutex.
 * Handles point at the shared nodes; a series counts its handles and is
 * freed with the last one. Families are never freed (Triton keeps them in
 * its registry for the process's life).
 */
#include "osprey/custom_metrics.h"

#include <ctype.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bytebuf.h"

typedef struct series {
    char **names, **values; /* sorted by name, as prometheus-cpp's map */
    size_t n_labels;
    size_t refs; /* handles */
    double value; /* counter, gauge */
    /* histogram: bucket bounds and per-bucket (not cumulative) counts */
    double *bounds;
    uint64_t *counts;
    size_t n_bounds;
    uint64_t count;
    double sum;
    struct series *next;
} series;

typedef struct family_node {
    osp_metric_kind kind;
    char *name, *help;
    series *first, *last;
    struct family_node *next;
} family_node;

struct osp_metric_family {
    family_node *node;
    osp_metric *children; /* the metric handles made through this one */
};

struct osp_metric {
    family_node *node;
    series *series; /* NULL once invalidated */
    osp_metric_family *owner;
    osp_metric *next_child, *prev_child;
};

/* Families stay for the process's life (as Triton's): a bound keeps a
 * model that makes them in a loop from taking the server's memory. */
#define MAX_FAMILIES 4096

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static family_node *g_first, *g_last;
static size_t g_families;

/* ---- names ---------------------------------------------------------------- */

/* Prometheus's names: [a-zA-Z_:][a-zA-Z0-9_:]* for metrics, without ':'
 * for labels; neither may start with "__". */
static bool valid_name(const char *s, bool colon) {
    if (!s || !s[0] || isdigit((unsigned char)s[0]) ||
        strncmp(s, "__", 2) == 0)
        return false;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && *s != '_' && !(colon && *s == ':'))
            return false;
    return true;
}

static osp_error *invalid(const char *message) {
    return osp_error_new(OSP_ERROR_INVALID_ARG, "%s", message);
}

/* ---- families ------------------------------------------------------------- */

static family_node *find_family(const char *name) {
    for (family_node *f = g_first; f; f = f->next)
        if (strcmp(f->name, name) == 0)
            return f;
    return NULL;
}

osp_error *osp_metric_family_new(osp_metric_kind kind, const char *name,
                                 const char *description,
                                 osp_metric_family **out) {
    *out = NULL;
    if (kind != OSP_METRIC_COUNTER && kind != OSP_METRIC_GAUGE &&
        kind != OSP_METRIC_HISTOGRAM)
        return invalid("Unsupported kind passed to MetricFamily constructor.");
    if (!valid_name(name, true))
        return invalid("Invalid metric name");
    osp_metric_family *handle = calloc(1, sizeof *handle);
    if (!handle)
        return osp_error_out_of_memory();
    pthread_mutex_lock(&g_lock);
    family_node *node = find_family(name);
    osp_error *err = NULL;
    if (node && node->kind != kind) {
        err = invalid("Family name already exists with different type");
    } else if (!node && g_families >= MAX_FAMILIES) {
        err = osp_error_new(OSP_ERROR_UNAVAILABLE,
                            "too many metric families (at most %d)",
                            MAX_FAMILIES);
    } else if (!node) {
        node = calloc(1, sizeof *node);
        if (node && (!(node->name = strdup(name)) ||
                     !(node->help = strdup(description ? description : "")))) {
            free(node->name);
            free(node);
            node = NULL;
        }
        if (!node) {
            err = osp_error_out_of_memory();
        } else {
            node->kind = kind;
            g_families++;
            if (g_last)
                g_last->next = node;
            else
                g_first = node;
            g_last = node;
        }
    }
    pthread_mutex_unlock(&g_lock);
    if (err) {
        free(handle);
        return err;
    }
    handle->node = node;
    *out = handle;
    return NULL;
}

/* ---- series --------------------------------------------------------------- */

static void series_free(series *s) {
    for (size_t i = 0; i < s->n_labels; i++) {
        free(s->names[i]);
        free(s->values[i]);
    }
    free(s->names);
    free(s->values);
    free(s->bounds);
    free(s->counts);
    free(s);
}

/* Drops a handle's reference; the last one takes the series out of its
 * family. Lock held. */
static void series_release(family_node *node, series *s) {
    if (--s->refs > 0)
        return;
    series **link = &node->first;
    series *prev = NULL;
    while (*link != s) {
        prev = *link;
        link = &(*link)->next;
    }
    *link = s->next;
    if (node->last == s)
        node->last = prev;
    series_free(s);
}

/* Orders label pairs by name (an insertion sort: label sets are small). */
static void sort_labels(series *s) {
    for (size_t i = 1; i < s->n_labels; i++)
        for (size_t j = i; j > 0 && strcmp(s->names[j - 1], s->names[j]) > 0;
             j--) {
            char *n = s->names[j], *v = s->values[j];
            s->names[j] = s->names[j - 1];
            s->values[j] = s->values[j - 1];
            s->names[j - 1] = n;
            s->values[j - 1] = v;
        }
}

/* A new series of the labels and buckets, checked; NULL with *err set. */
static series *series_new(osp_metric_kind kind, const char *const *names,
                          const char *const *values, size_t n,
                          const double *buckets, size_t n_buckets,
                          osp_error **err) {
    *err = NULL;
    for (size_t i = 0; i < n; i++) {
        if (!valid_name(names[i], false) ||
            (kind == OSP_METRIC_HISTOGRAM && strcmp(names[i], "le") == 0)) {
            *err = invalid("Invalid label name");
            return NULL;
        }
        for (size_t j = 0; j < i; j++)
            if (strcmp(names[i], names[j]) == 0) {
                *err = invalid("Duplicate label name");
                return NULL;
            }
    }
    if (kind == OSP_METRIC_HISTOGRAM && !buckets) {
        *err = invalid("Bucket boundaries not found in Metric args.");
        return NULL;
    }
    if (kind != OSP_METRIC_HISTOGRAM && buckets) {
        *err = invalid(kind == OSP_METRIC_COUNTER
                           ? "Unexpected args found in counter Metric "
                             "constructor."
                           : "Unexpected args found in gauge Metric "
                             "constructor.");
        return NULL;
    }
    for (size_t i = 1; i < n_buckets; i++)
        if (!(buckets[i - 1] < buckets[i])) {
            *err = invalid("Bucket Boundaries must be strictly sorted");
            return NULL;
        }
    series *s = calloc(1, sizeof *s);
    bool ok = s && (s->names = calloc(n + 1, sizeof *s->names)) &&
              (s->values = calloc(n + 1, sizeof *s->values));
    for (size_t i = 0; ok && i < n; i++) {
        s->n_labels = i + 1;
        ok = (s->names[i] = strdup(names[i])) &&
             (s->values[i] = strdup(values[i] ? values[i] : ""));
    }
    if (ok && kind == OSP_METRIC_HISTOGRAM) {
        s->n_bounds = n_buckets;
        ok = (s->bounds = malloc((n_buckets + 1) * sizeof *s->bounds)) &&
             (s->counts = calloc(n_buckets + 1, sizeof *s->counts));
        if (ok && n_buckets)
            memcpy(s->bounds, buckets, n_buckets * sizeof *buckets);
    }
    if (!ok) {
        if (s)
            series_free(s);
        *err = osp_error_out_of_memory();
        return NULL;
    }
    sort_labels(s);
    return s;
}

static bool same_labels(const series *a, const series *b) {
    if (a->n_labels != b->n_labels)
        return false;
    for (size_t i = 0; i < a->n_labels; i++)
        if (strcmp(a->names[i], b->names[i]) != 0 ||
            strcmp(a->values[i], b->values[i]) != 0)
            return false;
    return true;
}

osp_error *osp_metric_new(osp_metric_family *family,
                          const char *const *label_names,
                          const char *const *label_values, size_t n_labels,
                          const double *buckets, size_t n_buckets,
                          osp_metric **out) {
    *out = NULL;
    osp_error *err = NULL;
    series *fresh = series_new(family->node->kind, label_names, label_values,
                               n_labels, buckets, n_buckets, &err);
    if (!fresh)
        return err;
    osp_metric *m = calloc(1, sizeof *m);
    if (!m) {
        series_free(fresh);
        return osp_error_out_of_memory();
    }
    family_node *node = family->node;
    pthread_mutex_lock(&g_lock);
    series *s = node->first;
    while (s && !same_labels(s, fresh))
        s = s->next;
    if (s) { /* prometheus-cpp's Family::Add gives the existing series */
        series_free(fresh);
    } else {
        s = fresh;
        if (node->last)
            node->last->next = s;
        else
            node->first = s;
        node->last = s;
    }
    s->refs++;
    m->node = node;
    m->series = s;
    m->owner = family;
    m->next_child = family->children;
    if (family->children)
        family->children->prev_child = m;
    family->children = m;
    pthread_mutex_unlock(&g_lock);
    *out = m;
    return NULL;
}

void osp_metric_delete(osp_metric *m) {
    if (!m)
        return;
    pthread_mutex_lock(&g_lock);
    if (m->series)
        series_release(m->node, m->series);
    if (m->owner) {
        if (m->prev_child)
            m->prev_child->next_child = m->next_child;
        else
            m->owner->children = m->next_child;
        if (m->next_child)
            m->next_child->prev_child = m->prev_child;
    }
    pthread_mutex_unlock(&g_lock);
    free(m);
}

void osp_metric_family_delete(osp_metric_family *family) {
    if (!family)
        return;
    pthread_mutex_lock(&g_lock);
    for (osp_metric *m = family->children; m; m = m->next_child) {
        series_release(m->node, m->series);
        m->series = NULL;
        m->owner = NULL;
    }
    pthread_mutex_unlock(&g_lock);
    free(family);
}

/* ---- operations ----------------------------------------------------------- */

static const char *kind_name(osp_metric_kind kind) {
    switch (kind) {
    case OSP_METRIC_COUNTER:
        return "TRITONSERVER_METRIC_KIND_COUNTER";
    case OSP_METRIC_GAUGE:
        return "TRITONSERVER_METRIC_KIND_GAUGE";
    default:
        return "TRITONSERVER_METRIC_KIND_HISTOGRAM";
    }
}

static osp_error *unsupported(osp_metric_kind kind, const char *op) {
    return osp_error_new(OSP_ERROR_UNSUPPORTED, "%s does not support %s",
                         kind_name(kind), op);
}

static osp_error *invalidated(const char *what) {
    return osp_error_new(OSP_ERROR_INTERNAL,
                         "Could not %s. Metric has been invalidated.", what);
}

osp_error *osp_metric_increment(osp_metric *m, double value) {
    osp_error *err = NULL;
    pthread_mutex_lock(&g_lock);
    if (!m->series)
        err = invalidated("increment metric value");
    else if (m->node->kind == OSP_METRIC_HISTOGRAM)
        err = unsupported(m->node->kind, "Increment");
    else if (m->node->kind == OSP_METRIC_COUNTER && value < 0)
        err = invalid("TRITONSERVER_METRIC_KIND_COUNTER can only be "
                      "incremented monotonically by non-negative values.");
    else
        m->series->value += value;
    pthread_mutex_unlock(&g_lock);
    return err;
}

osp_error *osp_metric_set(osp_metric *m, double value) {
    osp_error *err = NULL;
    pthread_mutex_lock(&g_lock);
    if (!m->series)
        err = invalidated("set metric value");
    else if (m->node->kind != OSP_METRIC_GAUGE)
        err = unsupported(m->node->kind, "Set");
    else
        m->series->value = value;
    pthread_mutex_unlock(&g_lock);
    return err;
}

osp_error *osp_metric_observe(osp_metric *m, double value) {
    osp_error *err = NULL;
    pthread_mutex_lock(&g_lock);
    if (!m->series) {
        err = invalidated("set metric value");
    } else if (m->node->kind != OSP_METRIC_HISTOGRAM) {
        err = unsupported(m->node->kind, "Observe");
    } else {
        series *s = m->series;
        size_t b = 0; /* the first bucket whose bound is >= value */
        while (b < s->n_bounds && value > s->bounds[b])
            b++;
        s->counts[b]++;
        s->count++;
        s->sum += value;
    }
    pthread_mutex_unlock(&g_lock);
    return err;
}

osp_error *osp_metric_value(osp_metric *m, double *value) {
    osp_error *err = NULL;
    pthread_mutex_lock(&g_lock);
    if (!m->series)
        err = invalidated("get metric value");
    else if (m->node->kind == OSP_METRIC_HISTOGRAM)
        err = unsupported(m->node->kind, "Value");
    else
        *value = m->series->value;
    pthread_mutex_unlock(&g_lock);
    return err;
}

/* ---- text format ---------------------------------------------------------- */

/* A double as prometheus-cpp writes it (16 significant digits). */
static void put_double(bytebuf *b, double v) {
    if (isnan(v))
        bytebuf_puts(b, "Nan");
    else if (isinf(v))
        bytebuf_puts(b, v < 0 ? "-Inf" : "+Inf");
    else
        bytebuf_printf(b, "%.16g", v);
}

static void put_escaped(bytebuf *b, const char *s) {
    for (; *s; s++) {
        if (*s == '\n')
            bytebuf_puts(b, "\\n");
        else if (*s == '\\' || *s == '"')
            bytebuf_printf(b, "\\%c", *s);
        else
            bytebuf_putc(b, *s);
    }
}

/* name[suffix]{labels[,le="bound"]} followed by a space. le: NULL for
 * none; "" for +Inf; else the bound at *bound. */
static void put_head(bytebuf *b, const family_node *f, const series *s,
                     const char *suffix, const double *bound, bool inf) {
    bytebuf_printf(b, "%s%s", f->name, suffix);
    if (s->n_labels || bound || inf) {
        bytebuf_putc(b, '{');
        for (size_t i = 0; i < s->n_labels; i++) {
            bytebuf_printf(b, "%s%s=\"", i ? "," : "", s->names[i]);
            put_escaped(b, s->values[i]);
            bytebuf_putc(b, '"');
        }
        if (bound || inf) {
            bytebuf_printf(b, "%sle=\"", s->n_labels ? "," : "");
            if (inf)
                bytebuf_puts(b, "+Inf");
            else
                put_double(b, *bound);
            bytebuf_putc(b, '"');
        }
        bytebuf_putc(b, '}');
    }
    bytebuf_putc(b, ' ');
}

static void put_histogram(bytebuf *b, const family_node *f, const series *s) {
    put_head(b, f, s, "_count", NULL, false);
    bytebuf_printf(b, "%" PRIu64 "\n", s->count);
    put_head(b, f, s, "_sum", NULL, false);
    put_double(b, s->sum);
    bytebuf_putc(b, '\n');
    uint64_t cumulative = 0;
    for (size_t i = 0; i < s->n_bounds; i++) {
        cumulative += s->counts[i];
        put_head(b, f, s, "_bucket", &s->bounds[i], false);
        bytebuf_printf(b, "%" PRIu64 "\n", cumulative);
    }
    /* prometheus-cpp adds the +Inf bucket unless the bounds end with it */
    if (!s->n_bounds || !isinf(s->bounds[s->n_bounds - 1])) {
        put_head(b, f, s, "_bucket", NULL, true);
        bytebuf_printf(b, "%" PRIu64 "\n", s->count);
    }
}

char *osp_custom_metrics_text(void) {
    static const char *const types[] = {"counter", "gauge", "histogram"};
    bytebuf b;
    bytebuf_init(&b);
    pthread_mutex_lock(&g_lock);
    for (const family_node *f = g_first; f; f = f->next) {
        if (f->help[0])
            bytebuf_printf(&b, "# HELP %s %s\n", f->name, f->help);
        bytebuf_printf(&b, "# TYPE %s %s\n", f->name, types[f->kind]);
        for (const series *s = f->first; s; s = s->next) {
            if (f->kind == OSP_METRIC_HISTOGRAM) {
                put_histogram(&b, f, s);
                continue;
            }
            put_head(&b, f, s, "", NULL, false);
            put_double(&b, s->value);
            bytebuf_putc(&b, '\n');
        }
    }
    pthread_mutex_unlock(&g_lock);
    return bytebuf_take(&b, NULL);
}
