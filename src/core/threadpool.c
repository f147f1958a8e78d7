/* threadpool.c - persistent pool; see threadpool.h for the invariants.
 * Work is split into chunks claimed with an atomic counter, so threads that
 * finish early take more (dynamic scheduling). */
#define _GNU_SOURCE
#include "threadpool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <unistd.h>

struct threadpool {
    int n;                 /* threads including the caller */
    pthread_t *th;
    pthread_mutex_t job_lock;  /* serialises callers (invariant 3) */
    pthread_mutex_t mu;
    pthread_cond_t wake, done;
    uint64_t generation;   /* bumped per job; workers wait for a change */
    int pending;           /* workers still running the current job */
    bool quit;
    /* current job */
    tp_fn fn;
    void *ctx;
    int64_t n_items, chunk;
    atomic_llong next;
};

static _Thread_local int tls_in_job;

static void run_chunks(struct threadpool *tp, int ith)
{
    for (;;) {
        int64_t b = atomic_fetch_add(&tp->next, tp->chunk);
        if (b >= tp->n_items) break;
        int64_t e = b + tp->chunk < tp->n_items ? b + tp->chunk : tp->n_items;
        tp->fn(tp->ctx, b, e, ith);
    }
}

struct worker_arg { struct threadpool *tp; int ith; };

static void *worker(void *p)
{
    struct worker_arg wa = *(struct worker_arg *)p;
    free(p);
    struct threadpool *tp = wa.tp;
    uint64_t seen = 0;
    tls_in_job = 1;
    pthread_mutex_lock(&tp->mu);
    for (;;) {
        while (!tp->quit && tp->generation == seen) pthread_cond_wait(&tp->wake, &tp->mu);
        if (tp->quit) break;
        seen = tp->generation;
        pthread_mutex_unlock(&tp->mu);
        run_chunks(tp, wa.ith);
        pthread_mutex_lock(&tp->mu);
        if (--tp->pending == 0) pthread_cond_signal(&tp->done);
    }
    pthread_mutex_unlock(&tp->mu);
    return NULL;
}

int tp_default_threads(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

struct threadpool *tp_create(int n_threads)
{
    if (n_threads < 1) n_threads = 1;
    struct threadpool *tp = calloc(1, sizeof *tp);
    if (!tp) return NULL;
    tp->n = n_threads;
    pthread_mutex_init(&tp->job_lock, NULL);
    pthread_mutex_init(&tp->mu, NULL);
    pthread_cond_init(&tp->wake, NULL);
    pthread_cond_init(&tp->done, NULL);
    atomic_init(&tp->next, 0);
    if (n_threads > 1) {
        tp->th = calloc((size_t)n_threads - 1, sizeof *tp->th);
        if (!tp->th) { tp_free(tp); return NULL; }
    }
    for (int i = 1; i < n_threads; i++) {
        struct worker_arg *wa = malloc(sizeof *wa);
        if (wa) { wa->tp = tp; wa->ith = i; }
        if (!wa || pthread_create(&tp->th[i - 1], NULL, worker, wa) != 0) {
            free(wa);
            tp->n = i; /* threads 1..i-1 exist */
            tp_free(tp);
            return NULL;
        }
    }
    return tp;
}

void tp_free(struct threadpool *tp)
{
    if (!tp) return;
    pthread_mutex_lock(&tp->mu);
    tp->quit = true;
    pthread_cond_broadcast(&tp->wake);
    pthread_mutex_unlock(&tp->mu);
    for (int i = 1; i < tp->n; i++) pthread_join(tp->th[i - 1], NULL);
    free(tp->th);
    pthread_cond_destroy(&tp->wake);
    pthread_cond_destroy(&tp->done);
    pthread_mutex_destroy(&tp->mu);
    pthread_mutex_destroy(&tp->job_lock);
    free(tp);
}

int tp_n_threads(const struct threadpool *tp) { return tp ? tp->n : 1; }

void tp_parallel_for(struct threadpool *tp, int64_t n, int64_t grain,
                     tp_fn fn, void *ctx)
{
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    if (!tp || tp->n == 1 || tls_in_job || n <= grain) {
        fn(ctx, 0, n, 0);
        return;
    }
    pthread_mutex_lock(&tp->job_lock);
    /* about 4 chunks per thread for balance, never below the grain */
    int64_t chunk = (n + 4 * tp->n - 1) / (4 * tp->n);
    if (chunk < grain) chunk = grain;
    pthread_mutex_lock(&tp->mu);
    tp->fn = fn;
    tp->ctx = ctx;
    tp->n_items = n;
    tp->chunk = chunk;
    atomic_store(&tp->next, 0);
    tp->pending = tp->n - 1;
    tp->generation++;
    pthread_cond_broadcast(&tp->wake);
    pthread_mutex_unlock(&tp->mu);

    tls_in_job = 1;
    run_chunks(tp, 0);
    tls_in_job = 0;

    pthread_mutex_lock(&tp->mu);
    while (tp->pending > 0) pthread_cond_wait(&tp->done, &tp->mu);
    pthread_mutex_unlock(&tp->mu);
    pthread_mutex_unlock(&tp->job_lock);
}
