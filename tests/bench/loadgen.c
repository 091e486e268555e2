/*
 * loadgen: the options, tensor values, threads, results and report that
 * load_client.c and grpc_load_client.c share (see loadgen.h).
 */
#define _GNU_SOURCE
#include "loadgen.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- command line ----------------------------------------------------- */

int loadgen_parse_long(const char *s, long min, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < min)
        return -1;
    *out = v;
    return 0;
}

/* Applies the shared option name with value. Returns 0 when applied, 1
   when name is not a shared option, -1 when the value is bad. */
static int options_apply(loadgen_options *lo, const char *name,
                         const char *value) {
    long n = 0;
    if (strcmp(name, "--url") == 0) {
        lo->url = value;
    } else if (strcmp(name, "--model") == 0) {
        lo->model = value;
    } else if (strcmp(name, "--elements") == 0) {
        if (loadgen_parse_long(value, 1, &lo->elements) ||
            lo->elements > (1L << 28))
            return -1;
    } else if (strcmp(name, "--concurrency") == 0) {
        if (loadgen_parse_long(value, 1, &n) || n > 65536)
            return -1;
        lo->concurrency = (int)n;
    } else if (strcmp(name, "--threads") == 0) {
        if (loadgen_parse_long(value, 1, &n) || n > LOADGEN_MAX_THREADS)
            return -1;
        lo->threads = (int)n;
    } else if (strcmp(name, "--verify-every") == 0) {
        if (loadgen_parse_long(value, 0, &lo->verify_every))
            return -1;
    } else if (strcmp(name, "--duration") == 0 ||
               strcmp(name, "--warmup") == 0) {
        char *end;
        double s = strtod(value, &end);
        if (end == value || *end || !(s >= 0) || s > 86400)
            return -1;
        if (strcmp(name, "--duration") == 0)
            lo->duration_s = s;
        else
            lo->warmup_s = s;
    } else {
        return 1;
    }
    return 0;
}

/* Reads the option at argv[*i] into *lo when it is a shared one, else
   splits --name=value or --name value into name (name_size bytes at most)
   and *value for the client; advances *i past a value given as its own
   argument. Returns 0 when applied, 1 when name and *value are the
   client's, -1 when argv[*i] is no option or its value is bad. */
static int option_next(loadgen_options *lo, int argc, char **argv, int *i,
                       char *name, size_t name_size, const char **value) {
    const char *arg = argv[*i];
    if (strcmp(arg, "--json") == 0) {
        lo->json_output = 1;
        return 0;
    }
    /* All other options take a value: --name=value or --name value. */
    const char *eq = strchr(arg, '=');
    if (strncmp(arg, "--", 2) != 0)
        return -1;
    if (eq) {
        size_t n = (size_t)(eq - arg);
        if (n >= name_size)
            return -1;
        memcpy(name, arg, n);
        name[n] = '\0';
        *value = eq + 1;
    } else {
        if (*i + 1 >= argc || strlen(arg) >= name_size)
            return -1;
        strcpy(name, arg);
        *value = argv[++*i];
    }
    return options_apply(lo, name, *value);
}

int loadgen_parse_args(loadgen_options *lo, int argc, char **argv,
                       const loadgen_cli *cli) {
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0)
            return 1;
        char name[64];
        const char *value;
        int mine = option_next(lo, argc, argv, &i, name, sizeof name, &value);
        if (mine < 0 || (mine > 0 && cli->apply(cli->ctx, name, value))) {
            fprintf(stderr, "%s: bad option '%s'\n", cli->prog, arg);
            return -1;
        }
    }
    if (!lo->url || cli->use_url(cli->ctx, lo->url)) {
        fprintf(stderr, "%s: --url HOST:PORT is required\n", cli->prog);
        return -1;
    }
    if (lo->duration_s <= 0) {
        fprintf(stderr, "%s: --duration must be > 0\n", cli->prog);
        return -1;
    }
    if (lo->threads > lo->concurrency)
        lo->threads = lo->concurrency;
    return 0;
}

/* ---- requests --------------------------------------------------------- */

float loadgen_fp32_value(int variant, long i) {
    return (float)((variant * 7919L + i) % 4096) * 0.25f;
}

int32_t loadgen_simple_input(int variant, int input, int i) {
    return input == 0 ? 1000 + (variant * 37 + i * 11) % 8000
                      : 1000 + (variant * 53 + i * 7) % 8000;
}

/* ---- the run ---------------------------------------------------------- */

uint64_t loadgen_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void loadgen_window(const loadgen_options *lo, uint64_t *measure_start,
                    uint64_t *end) {
    *measure_start = loadgen_now_ns() + (uint64_t)(lo->warmup_s * 1e9);
    *end = *measure_start + (uint64_t)(lo->duration_s * 1e9);
}

int loadgen_thread_share(const loadgen_options *lo, int t) {
    return lo->concurrency / lo->threads + (t < lo->concurrency % lo->threads);
}

int loadgen_run_threads(void *(*run)(void *), void *workers, int n,
                        size_t worker_size, const char *prog) {
    pthread_t tids[LOADGEN_MAX_THREADS]; /* --threads is at most that */
    int started = 0;
    for (; started < n && started < LOADGEN_MAX_THREADS; started++)
        if (pthread_create(&tids[started], NULL, run,
                           (char *)workers + (size_t)started * worker_size))
            break;
    for (int t = 0; t < started; t++)
        pthread_join(tids[t], NULL);
    if (started < n) {
        fprintf(stderr, "%s: cannot start threads\n", prog);
        return -1;
    }
    return 0;
}

/* ---- results ---------------------------------------------------------- */

void loadgen_record_error(loadgen_results *r, const char *fmt, ...) {
    if (r->first_error[0])
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->first_error, sizeof r->first_error, fmt, ap);
    va_end(ap);
}

void loadgen_record_latency(loadgen_results *r, uint64_t ns) {
    if (r->n_lat == r->cap_lat) {
        size_t cap = r->cap_lat ? r->cap_lat * 2 : 65536;
        uint64_t *grown = cap <= SIZE_MAX / 2 / sizeof *grown
                              ? realloc(r->lat_ns, cap * sizeof *grown)
                              : NULL;
        if (!grown) {
            r->lat_truncated = 1;
            return;
        }
        r->lat_ns = grown;
        r->cap_lat = cap;
    }
    r->lat_ns[r->n_lat++] = ns;
}

loadgen_results *loadgen_results_new(int n) {
    return calloc((size_t)n, sizeof(loadgen_results));
}

void loadgen_results_free(loadgen_results *results, int n) {
    for (int i = 0; results && i < n; i++)
        free(results[i].lat_ns);
    free(results);
}

/* ---- report ----------------------------------------------------------- */

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* Nearest-rank percentile of sorted v[0, n), in milliseconds. */
static double percentile_ms(const uint64_t *v, size_t n, double p) {
    if (n == 0)
        return 0;
    size_t rank = (size_t)ceil(p * (double)n);
    if (rank < 1)
        rank = 1;
    return (double)v[rank - 1] / 1e6;
}

static void print_json_string(const char *s) {
    putchar('"');
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            printf("\\%c", ch);
        else if (ch < 0x20 || ch >= 0x7f)
            printf("\\u%04x", ch);
        else
            putchar(ch);
    }
    putchar('"');
}

/* Adds part's counts, latencies and (if sum has none) first error to sum.
   Returns -1, sum unchanged, when there is no memory for the latencies. */
static int results_add(loadgen_results *sum, const loadgen_results *part) {
    if (part->n_lat) {
        size_t n = sum->n_lat + part->n_lat;
        uint64_t *lat = realloc(sum->lat_ns, n * sizeof *lat);
        if (!lat)
            return -1;
        memcpy(lat + sum->n_lat, part->lat_ns, part->n_lat * sizeof *lat);
        sum->lat_ns = lat;
        sum->n_lat = sum->cap_lat = n;
    }
    sum->ok += part->ok;
    sum->status_errors += part->status_errors;
    sum->io_errors += part->io_errors;
    sum->verify_errors += part->verify_errors;
    sum->incomplete += part->incomplete;
    sum->reconnects += part->reconnects;
    sum->req_bytes += part->req_bytes;
    sum->resp_bytes += part->resp_bytes;
    sum->lat_truncated |= part->lat_truncated;
    for (int s = 0; s < LOADGEN_STATUS_CODES; s++)
        sum->status_counts[s] += part->status_counts[s];
    if (!sum->first_error[0] && part->first_error[0])
        memcpy(sum->first_error, part->first_error, LOADGEN_ERROR_TEXT);
    return 0;
}

/* Prints the report of sum (see loadgen_report). Returns the exit status. */
static int report_print(const char *prog, const loadgen_options *lo,
                        const loadgen_target *target, loadgen_results *sum) {
    const uint64_t *lat = sum->lat_ns;
    size_t n_lat = sum->n_lat;
    if (n_lat)
        qsort(sum->lat_ns, n_lat, sizeof *sum->lat_ns, cmp_u64);
    uint64_t errors = sum->status_errors + sum->io_errors + sum->verify_errors;
    double secs = lo->duration_s;
    double rps = (double)sum->ok / secs;
    double mbps = (double)sum->req_bytes / secs / 1e6;
    double resp_mbps = (double)sum->resp_bytes / secs / 1e6;
    double p50 = percentile_ms(lat, n_lat, 0.50);
    double p90 = percentile_ms(lat, n_lat, 0.90);
    double p99 = percentile_ms(lat, n_lat, 0.99);
    double pmax = n_lat ? (double)lat[n_lat - 1] / 1e6 : 0;

    if (lo->json_output) {
        printf("{\"mode\":");
        print_json_string(target->mode);
        printf(",\"url\":");
        print_json_string(target->url);
        printf(",\"path\":");
        print_json_string(target->path);
        printf(",\"concurrency\":%d,\"threads\":%d,", lo->concurrency,
               lo->threads);
        if (target->channels > 0)
            printf("\"channels\":%d,", target->channels);
        printf("\"duration_s\":%g,"
               "\"warmup_s\":%g,\"request_body_bytes\":%zu,"
               "\"requests\":%" PRIu64 ",\"requests_per_s\":%.2f,"
               "\"request_mb_per_s\":%.3f,\"response_mb_per_s\":%.3f,"
               "\"latency_ms\":{\"p50\":%.4f,\"p90\":%.4f,\"p99\":%.4f,"
               "\"max\":%.4f},\"errors\":%" PRIu64 ",\"status_errors\":%" PRIu64
               ",\"io_errors\":%" PRIu64 ",\"verify_errors\":%" PRIu64
               ",\"incomplete\":%" PRIu64 ",\"reconnects\":%" PRIu64
               ",\"statuses\":{",
               lo->duration_s, lo->warmup_s, target->request_body_bytes,
               sum->ok, rps, mbps, resp_mbps, p50, p90, p99, pmax, errors,
               sum->status_errors, sum->io_errors, sum->verify_errors,
               sum->incomplete, sum->reconnects);
        const char *sep = "";
        for (int s = 0; s < LOADGEN_STATUS_CODES; s++) {
            if (sum->status_counts[s]) {
                printf("%s\"%d\":%" PRIu64, sep, s, sum->status_counts[s]);
                sep = ",";
            }
        }
        printf("},\"first_error\":");
        print_json_string(sum->first_error);
        printf("}\n");
    } else {
        printf("target      %s%s  mode %s  body %zu B\n", target->url,
               target->path, target->mode, target->request_body_bytes);
        printf("load        concurrency %d  threads %d  duration %.2f s  "
               "warmup %.2f s",
               lo->concurrency, lo->threads, lo->duration_s, lo->warmup_s);
        if (target->channels > 0)
            printf("  channels %d", target->channels);
        printf("\n");
        printf("throughput  %.1f req/s  %.2f MB/s request body  %.2f MB/s "
               "response body\n",
               rps, mbps, resp_mbps);
        printf("latency ms  p50 %.3f  p90 %.3f  p99 %.3f  max %.3f%s\n", p50,
               p90, p99, pmax, sum->lat_truncated ? " (truncated)" : "");
        printf("requests    %" PRIu64 " ok  %" PRIu64 " errors (status %" PRIu64
               ", io %" PRIu64 ", content %" PRIu64 ")  %" PRIu64
               " incomplete  %" PRIu64 " reconnects\n",
               sum->ok, errors, sum->status_errors, sum->io_errors,
               sum->verify_errors, sum->incomplete, sum->reconnects);
    }
    if (sum->first_error[0])
        fprintf(stderr, "%s: first error: %s\n", prog, sum->first_error);
    return errors == 0 && sum->ok > 0 ? 0 : 1;
}

int loadgen_report(const char *prog, const loadgen_options *lo,
                   const loadgen_target *target, const loadgen_results *results,
                   int n) {
    loadgen_results sum = {0};
    int result = 2;
    for (int i = 0; i < n; i++) {
        if (results_add(&sum, &results[i])) {
            fprintf(stderr, "%s: out of memory\n", prog);
            goto out;
        }
    }
    result = report_print(prog, lo, target, &sum);
out:
    free(sum.lat_ns);
    return result;
}
