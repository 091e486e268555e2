/*
 * Custom metrics (Triton's TRITONSERVER_MetricFamily / TRITONSERVER_Metric,
 * which a python model reaches through pb_utils.MetricFamily): counters,
 * gauges and histograms that backends define, served on the metrics port
 * after the server's own families, in Prometheus's text format as
 * prometheus-cpp writes it.
 *
 * One registry per process, as Triton's. A family, once created, stays
 * listed (its HELP and TYPE lines) until the process ends, as in Triton;
 * creating one again with the same name and kind shares it (the first
 * description stays), with another kind fails. A metric is a family's
 * series for one set of labels; handles of the same labels share it, and
 * it leaves /metrics when its last handle is deleted. Deleting a family
 * handle invalidates the metric handles made through it (later operations
 * on them fail, as Triton's do). At most 4096 families are made (a
 * model making them in a loop is refused). Every function is thread-safe;
 * handles are owned by their creator.
 */
#pragma once

#include <stddef.h>

#include "osprey/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum osp_metric_kind {
    OSP_METRIC_COUNTER,
    OSP_METRIC_GAUGE,
    OSP_METRIC_HISTOGRAM,
} osp_metric_kind;

typedef struct osp_metric_family osp_metric_family;
typedef struct osp_metric osp_metric;

/* A handle of the family `name` (Prometheus's [a-zA-Z_:][a-zA-Z0-9_:]*,
 * not starting with "__"). Errors: INVALID_ARG "Invalid metric name",
 * "Family name already exists with different type". */
osp_error *osp_metric_family_new(osp_metric_kind kind, const char *name,
                                 const char *description,
                                 osp_metric_family **out);
void osp_metric_family_delete(osp_metric_family *family);

/* A handle of the family's series for the labels (n pairs; names as
 * Prometheus's label names, each at most once; "le" is refused on a
 * histogram). A histogram needs its bucket bounds, strictly increasing;
 * the other kinds take none. */
osp_error *osp_metric_new(osp_metric_family *family,
                          const char *const *label_names,
                          const char *const *label_values, size_t n_labels,
                          const double *buckets, size_t n_buckets,
                          osp_metric **out);
void osp_metric_delete(osp_metric *metric);

/* Triton's operations and their refusals: a counter only increments, by
 * a value >= 0; a gauge increments (by any value) and is set; a histogram
 * only observes and has no value. */
osp_error *osp_metric_increment(osp_metric *metric, double value);
osp_error *osp_metric_set(osp_metric *metric, double value);
osp_error *osp_metric_observe(osp_metric *metric, double value);
osp_error *osp_metric_value(osp_metric *metric, double *value);

/* The registry in Prometheus's text format (a NUL-terminated string the
 * caller frees; "" when no family was created; NULL when out of memory). */
char *osp_custom_metrics_text(void);

#ifdef __cplusplus
}
#endif
