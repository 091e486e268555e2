/*
 * loadgen: what tests/bench's two closed-loop load generators share,
 * load_client.c (HTTP/1.1) and grpc_load_client.c (gRPC): the options they
 * both take, the tensor values they both send, their worker threads, the
 * results each worker records, and the report (text, or one JSON object
 * whose keys the Python benchmarks in tests/bench read), so both report
 * alike.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#define LOADGEN_MAX_THREADS 256
#define LOADGEN_ERROR_TEXT 512
#define LOADGEN_STATUS_CODES 600 /* HTTP's 0..599; gRPC uses 0..16 */

/* ---- command line ----------------------------------------------------- */

/* The options both clients take (see loadgen_parse_args). */
typedef struct {
    const char *url;   /* --url as given (borrowed from argv); NULL: none */
    const char *model; /* NULL: the mode's model */
    long elements;     /* fp32 tensor length */
    int concurrency;   /* requests in flight */
    int threads;       /* worker threads */
    double duration_s;
    double warmup_s;
    long verify_every; /* check every Nth response; 0 = never */
    int json_output;
} loadgen_options;

#define LOADGEN_OPTIONS_DEFAULT                                                \
    {                                                                          \
        .elements = 16, .concurrency = 1, .threads = 1, .duration_s = 3,       \
        .verify_every = 1                                                      \
    }

/* What a client adds to the shared command line. ctx is the client's, for
   both callbacks; every string they get is borrowed from argv. */
typedef struct {
    const char *prog; /* prefixes each complaint: "prog: bad option ..." */
    /* Applies one of the client's own options (name is "--mode" and the
       like). Returns 0, or -1 when name is not the client's or value is
       bad. */
    int (*apply)(void *ctx, const char *name, const char *value);
    /* Takes --url once every option is read. Returns 0, or -1 when url is
       not a HOST:PORT the client can use. */
    int (*use_url)(void *ctx, const char *url);
    void *ctx;
} loadgen_cli;

/* Reads argv: --json and --name value (or --name=value) for the shared
   options (--url, --model, --elements, --concurrency, --threads,
   --duration, --warmup, --verify-every) into *lo, every other one through
   cli->apply. Stops at the first --help or -h and returns 1: the caller
   prints its usage. Then hands --url to cli->use_url and checks
   --duration > 0, and caps threads at concurrency. Returns 0, or -1 with
   why on stderr (prefixed with cli->prog) at the first bad argument, a
   missing or refused --url, or a zero duration. cli is borrowed for the
   call. */
int loadgen_parse_args(loadgen_options *lo, int argc, char **argv,
                       const loadgen_cli *cli);

/* Parses a base-10 long of at least min into *out (written on success
   only). Returns -1 when s is not one, in full. */
int loadgen_parse_long(const char *s, long min, long *out);

/* ---- requests --------------------------------------------------------- */

/* Element i of FP32 tensor variant `variant`: distinct per variant, exact
   in binary and short in text (multiples of 0.25 below 1024). */
float loadgen_fp32_value(int variant, long i);

/* Element i of INPUT0 (input 0) or INPUT1 of the `simple` model, variant
   `variant`: four digits each, so every variant's JSON body has the same
   length. */
int32_t loadgen_simple_input(int variant, int input, int i);

/* ---- the run ---------------------------------------------------------- */

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t loadgen_now_ns(void);

/* The measured window of a run that starts now: it opens after the
   warm-up and closes duration_s later (loadgen_now_ns times). */
void loadgen_window(const loadgen_options *lo, uint64_t *measure_start,
                    uint64_t *end);

/* How many of the lo->concurrency requests in flight thread t of
   lo->threads carries (the first ones carry one more when it does not
   divide evenly). */
int loadgen_thread_share(const loadgen_options *lo, int t);

/* Runs run(worker) on a thread of its own for each of the n workers, the
   elements (worker_size bytes each, borrowed) of the array workers, and
   waits for them. Returns -1, with "prog: cannot start threads" on
   stderr, when a thread could not be started (those that were are
   waited for), else 0. */
int loadgen_run_threads(void *(*run)(void *), void *workers, int n,
                        size_t worker_size, const char *prog);

/* ---- results and report ----------------------------------------------- */

/* What one worker thread saw. */
typedef struct {
    uint64_t ok, status_errors, io_errors, verify_errors;
    uint64_t incomplete, reconnects;
    uint64_t req_bytes, resp_bytes;
    uint64_t status_counts[LOADGEN_STATUS_CODES];
    uint64_t *lat_ns; /* latencies of the ok requests; owned */
    size_t n_lat, cap_lat;
    int lat_truncated; /* a latency was dropped for want of memory */
    char first_error[LOADGEN_ERROR_TEXT];
} loadgen_results;

/* n empty results, one per worker thread (caller owns them; free them with
   loadgen_results_free), or NULL when out of memory. */
loadgen_results *loadgen_results_new(int n);

/* Frees the n results of loadgen_results_new (NULL is fine). */
void loadgen_results_free(loadgen_results *results, int n);

/* Keeps the first error only: later ones are usually its consequences. */
void loadgen_record_error(loadgen_results *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Appends one latency. When memory runs out the latency is dropped and
   lat_truncated set (the text report says so). */
void loadgen_record_latency(loadgen_results *r, uint64_t ns);

/* What the report says was measured: every pointer is borrowed for the
   call to loadgen_report. */
typedef struct {
    const char *mode;
    const char *url;  /* host:port */
    const char *path; /* HTTP path or gRPC method */
    int channels;     /* 0: the client has no such option (not reported) */
    size_t request_body_bytes;
} loadgen_target;

/* Adds up the n workers' results (borrowed, left as they were) and prints
   the report: one JSON object when lo->json_output, else five lines of
   text, on stdout; then the first error, if any, on stderr ("prog: first
   error: ..."). Returns the exit status: 0 when there were no errors and
   at least one request completed, 1 when there were errors or none, 2
   (with "prog: out of memory" on stderr, no report) when the latencies
   cannot be gathered. */
int loadgen_report(const char *prog, const loadgen_options *lo,
                   const loadgen_target *target, const loadgen_results *results,
                   int n);
