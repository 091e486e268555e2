/*
 * The CPU device's worker pool (cpu_threads.h).
 *
 * A call hands its job to idle workers through each worker's mailbox: it
 * claims workers by clearing their bits in the pool's idle mask, posts
 * the job (a struct on the caller's stack) to their mailboxes, and runs
 * tasks itself; tasks are claimed one at a time from the job's counter.
 * When the caller runs out of tasks it takes back every post no worker
 * has picked up yet (so a worker that is slow to wake costs nothing) and
 * waits only for the workers that joined. A worker that joined leaves the
 * job by decrementing its count of active workers, the last time it
 * touches the job.
 *
 * Waking: a worker spins on its mailbox for a while after each job, then
 * sleeps on its condition variable, flagging `sleeping` first; a poster
 * signals only a worker it sees sleeping. Both sides use sequentially
 * consistent operations on (mailbox, sleeping), so one of them always
 * sees the other: no lost wake-up.
 */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include "cpu_threads.h"

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#elif defined(__aarch64__)
#define CPU_RELAX() __asm__ __volatile__("yield")
#else
#define CPU_RELAX() ((void)0)
#endif

#define MAX_WORKERS (CPU_THREADS_MAX - 1)

/* Spins of a worker waiting for its next job before it sleeps (a pause
 * is some tens of cycles: a few hundred microseconds in all, longer than
 * the gap between the ops of one inference), yielding the CPU every
 * YIELD_EVERY of them so that a spinning worker never starves a thread
 * that shares its CPU (the caller itself, on a busy machine); and of a
 * caller waiting for its workers before it only yields. */
#define WORKER_SPINS 20000
#define CALLER_SPINS 200
#define YIELD_EVERY 64

typedef struct cpu_job {
    cpu_task_fn fn;
    void *ctx;
    int64_t n_tasks;
    _Atomic int64_t next; /* the next task nobody has claimed */
    _Atomic int active;   /* workers that joined and have not left */
} cpu_job;

typedef struct cpu_worker {
    _Alignas(64) _Atomic(cpu_job *) mailbox; /* a posted job, or NULL */
    _Atomic int sleeping;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    pthread_t thread;
} cpu_worker;

static struct {
    pthread_mutex_t grow_lock; /* creating workers, and joining them */
    _Atomic int n_workers;     /* workers[0 .. n_workers) are running */
    _Atomic uint64_t idle;     /* bit i: worker i may be claimed */
    _Atomic bool stopping;     /* process exit: workers leave */
    bool exit_hook; /* pool_stop and the fork handlers are registered */
    cpu_worker workers[MAX_WORKERS];
} pool = {.grow_lock = PTHREAD_MUTEX_INITIALIZER};

/* ---- default thread count ----------------------------------------------- */

static int default_threads;
static int max_workers; /* the CPUs, or the default if larger, less one */
static pthread_once_t default_once = PTHREAD_ONCE_INIT;

/* A positive count from the environment variable `name`; 0 when unset or
 * not a positive number. */
static int env_threads(const char *name) {
    const char *v = getenv(name);
    if (v == NULL || *v == '\0')
        return 0;
    char *end;
    long n = strtol(v, &end, 10);
    if (*end != '\0' || n <= 0)
        return 0;
    return n > CPU_THREADS_MAX ? CPU_THREADS_MAX : (int)n;
}

static void default_threads_init(void) {
    int cpus = 0;
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0)
        cpus = CPU_COUNT(&set);
    if (cpus <= 0) {
        long online = sysconf(_SC_NPROCESSORS_ONLN);
        cpus = online > 0 ? (int)online : 1;
    }
    int n = env_threads("OSPREY_CPU_THREADS");
    if (n == 0)
        n = env_threads("OPENBLAS_NUM_THREADS");
    if (n == 0)
        n = cpus;
    default_threads = n > CPU_THREADS_MAX ? CPU_THREADS_MAX : n;
    max_workers = (cpus > default_threads ? cpus : default_threads) - 1;
    if (max_workers > MAX_WORKERS)
        max_workers = MAX_WORKERS;
}

int cpu_threads_default(void) {
    pthread_once(&default_once, default_threads_init);
    return default_threads;
}

/* ---- running a job ------------------------------------------------------ */

static void job_run(cpu_job *job) {
    for (;;) {
        int64_t t =
            atomic_fetch_add_explicit(&job->next, 1, memory_order_relaxed);
        if (t >= job->n_tasks)
            return;
        job->fn(job->ctx, t);
    }
}

/* The next job posted to w, or NULL once the pool is stopping. */
static cpu_job *worker_wait(cpu_worker *w) {
    for (int spin = 0; spin < WORKER_SPINS; spin++) {
        if (atomic_load_explicit(&w->mailbox, memory_order_relaxed) != NULL) {
            cpu_job *job = atomic_exchange(&w->mailbox, NULL);
            if (job != NULL)
                return job;
        }
        if (atomic_load_explicit(&pool.stopping, memory_order_relaxed))
            return NULL;
        if (spin % YIELD_EVERY == YIELD_EVERY - 1)
            sched_yield();
        else
            CPU_RELAX();
    }
    cpu_job *job;
    pthread_mutex_lock(&w->lock);
    atomic_store(&w->sleeping, 1);
    while ((job = atomic_exchange(&w->mailbox, NULL)) == NULL &&
           !atomic_load(&pool.stopping))
        pthread_cond_wait(&w->wake, &w->lock);
    atomic_store(&w->sleeping, 0);
    pthread_mutex_unlock(&w->lock);
    return job;
}

static void *worker_main(void *arg) {
    cpu_worker *w = arg;
    uint64_t bit = (uint64_t)1 << (w - pool.workers);
    cpu_job *job;
    while ((job = worker_wait(w)) != NULL) {
        job_run(job);
        atomic_fetch_or(&pool.idle, bit);
        /* the last touch of job: the caller may return once it sees 0 */
        atomic_fetch_sub_explicit(&job->active, 1, memory_order_release);
    }
    return NULL;
}

static void worker_post(cpu_worker *w, cpu_job *job) {
    atomic_store(&w->mailbox, job);
    if (atomic_load(&w->sleeping)) {
        pthread_mutex_lock(&w->lock);
        pthread_cond_signal(&w->wake);
        pthread_mutex_unlock(&w->lock);
    }
}

/* ---- the pool's lifetime ------------------------------------------------ */

/* At process exit: every worker finishes its job, if any, and is joined,
 * so that no thread outlives the process's static state. */
static void pool_stop(void) {
    pthread_mutex_lock(&pool.grow_lock);
    atomic_store(&pool.stopping, true);
    int n = atomic_load(&pool.n_workers);
    for (int i = 0; i < n; i++) {
        cpu_worker *w = &pool.workers[i];
        pthread_mutex_lock(&w->lock);
        pthread_cond_signal(&w->wake);
        pthread_mutex_unlock(&w->lock);
    }
    for (int i = 0; i < n; i++)
        pthread_join(pool.workers[i].thread, NULL);
    atomic_store(&pool.idle, 0);
    pthread_mutex_unlock(&pool.grow_lock);
}

/* fork: the child has none of the workers, so it starts with an empty
 * pool (and grows its own if it runs ops); grow_lock is held across the
 * fork so that the child's copy of it is consistent. */
static void pool_before_fork(void) {
    pthread_mutex_lock(&pool.grow_lock);
}

static void pool_after_fork_parent(void) {
    pthread_mutex_unlock(&pool.grow_lock);
}

static void pool_after_fork_child(void) {
    atomic_store(&pool.n_workers, 0);
    atomic_store(&pool.idle, 0);
    pthread_mutex_unlock(&pool.grow_lock);
}

/* Starts workers until there are `want`, but no more than the CPUs less
 * one (more would only take turns on them) unless the default thread
 * count asks for more; returns how many there are, fewer when a thread
 * could not be created. Workers block every signal: the process's
 * signals go to the threads that wait for them. */
static int pool_grow(int want) {
    pthread_once(&default_once, default_threads_init);
    if (want > max_workers)
        want = max_workers;
    int have = atomic_load_explicit(&pool.n_workers, memory_order_acquire);
    if (have >= want)
        return have;
    pthread_mutex_lock(&pool.grow_lock);
    have = atomic_load(&pool.n_workers);
    if (atomic_load(&pool.stopping))
        goto out;
    if (!pool.exit_hook)
        pool.exit_hook =
            pthread_atfork(pool_before_fork, pool_after_fork_parent,
                           pool_after_fork_child) == 0 &&
            atexit(pool_stop) == 0;
    if (!pool.exit_hook)
        goto out; /* workers that could not be joined: run serially */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    for (; have < want; have++) {
        cpu_worker *w = &pool.workers[have];
        atomic_init(&w->mailbox, NULL);
        atomic_init(&w->sleeping, 0);
        if (pthread_mutex_init(&w->lock, NULL) != 0)
            break;
        if (pthread_cond_init(&w->wake, NULL) != 0) {
            pthread_mutex_destroy(&w->lock);
            break;
        }
        if (pthread_create(&w->thread, NULL, worker_main, w) != 0) {
            pthread_cond_destroy(&w->wake);
            pthread_mutex_destroy(&w->lock);
            break;
        }
        atomic_fetch_or(&pool.idle, (uint64_t)1 << have);
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    atomic_store_explicit(&pool.n_workers, have, memory_order_release);
out:
    pthread_mutex_unlock(&pool.grow_lock);
    return have;
}

/* ---- parallel_for ------------------------------------------------------- */

void cpu_parallel_for(int64_t n_tasks, cpu_task_fn fn, void *ctx,
                      int max_threads) {
    if (n_tasks <= 0)
        return;
    int64_t want = (max_threads < n_tasks ? max_threads : n_tasks) - 1;
    if (want <= 0 ||
        atomic_load_explicit(&pool.stopping, memory_order_relaxed)) {
        for (int64_t t = 0; t < n_tasks; t++)
            fn(ctx, t);
        return;
    }
    pool_grow((int)want);

    cpu_job job = {.fn = fn, .ctx = ctx, .n_tasks = n_tasks};
    atomic_init(&job.next, 0);
    atomic_init(&job.active, 0);
    int posted[MAX_WORKERS], n_posted = 0;
    uint64_t idle = atomic_load(&pool.idle);
    while (n_posted < want && idle != 0) {
        int i = __builtin_ctzll(idle);
        uint64_t bit = (uint64_t)1 << i;
        if (atomic_fetch_and(&pool.idle, ~bit) & bit) {
            atomic_fetch_add_explicit(&job.active, 1, memory_order_relaxed);
            worker_post(&pool.workers[i], &job);
            posted[n_posted++] = i;
        }
        idle = atomic_load(&pool.idle);
    }

    job_run(&job);

    /* Take back the posts no worker has picked up: they never will. */
    for (int p = 0; p < n_posted; p++) {
        cpu_job *expected = &job;
        if (atomic_compare_exchange_strong(&pool.workers[posted[p]].mailbox,
                                           &expected, NULL)) {
            atomic_fetch_or(&pool.idle, (uint64_t)1 << posted[p]);
            atomic_fetch_sub_explicit(&job.active, 1, memory_order_relaxed);
        }
    }
    for (int spin = 0;
         atomic_load_explicit(&job.active, memory_order_acquire) > 0; spin++) {
        if (spin < CALLER_SPINS)
            CPU_RELAX();
        else
            sched_yield();
    }
}

/* ---- parallel_range ----------------------------------------------------- */

typedef struct range_job {
    int64_t n;
    int parts;
    cpu_range_fn fn;
    void *ctx;
} range_job;

static void range_task(void *arg, int64_t part) {
    const range_job *job = arg;
    int64_t lo, hi;
    cpu_split_range(job->n, job->parts, part, 1, &lo, &hi);
    if (hi > lo)
        job->fn(job->ctx, lo, hi);
}

void cpu_parallel_range(int64_t n, int64_t item_work, int threads,
                        cpu_range_fn fn, void *ctx) {
    if (n <= 0)
        return;
    double work = (double)n * (double)(item_work > 0 ? item_work : 1);
    int parts = work >= (double)INT64_MAX
                    ? threads
                    : cpu_split_parts((int64_t)work, CPU_GRAIN, threads);
    if (parts > n)
        parts = (int)n;
    if (parts <= 1) {
        fn(ctx, 0, n);
        return;
    }
    range_job job = {n, parts, fn, ctx};
    cpu_parallel_for(parts, range_task, &job, parts);
}
