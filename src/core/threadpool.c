/* threadpool.c - persistent pool; see threadpool.h for the invariants.
 * Work is split into chunks claimed with an atomic counter, so threads that
 * finish early take more (dynamic scheduling).
 *
 * Waiting is spin-then-sleep on both sides. A worker that finished a job
 * polls the job generation for about SPIN_NS (model code issues many short
 * ops with a little serial work between them, and a futex wake-up costs
 * more than such an op) and only then sleeps on the condition variable;
 * the caller likewise polls the count of workers still in the job before
 * sleeping. The polls use the pause instruction, never sched_yield, and a
 * side signals the condition variable only when the other side sleeps
 * (counted under the mutex), so a dispatch to spinning workers makes no
 * system call. tp_release_cores ends the workers' polling early (before a
 * threaded BLAS call, whose own threads need the cores).
 * Invariants (beyond threadpool.h):
 *  1. generation is bumped (release) after the job fields are written and
 *     before the mutex is taken to count sleepers, and a worker re-reads it
 *     under the mutex before sleeping, so no wake-up is lost.
 *  2. Every worker joins every job (pending = n - 1) and decrements pending
 *     after its last chunk; the caller returns only at pending == 0, so no
 *     worker still reads the fields of a job when the next one is written. */
#define _GNU_SOURCE
#include "threadpool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#elif defined(__aarch64__)
#define cpu_relax() __asm__ __volatile__("yield")
#else
#define cpu_relax() ((void)0)
#endif

/* How long a side polls before it sleeps: long enough to cover the serial
 * work between two ops of a decode step, short enough that an idle pool
 * stops using CPU at once on a human time scale. */
#define SPIN_NS 100000

struct threadpool {
    int n;                 /* threads including the caller */
    pthread_t *th;
    /* the pool's owner (invariant 3): busy while a caller's job runs;
     * callers of a section or urgent ones queue in q by (class, arrival)
     * and are handed the pool in that order; the rest wait on free_cv
     * (a free-for-all, as a mutex: a thread issuing op after op keeps
     * its caches) while the pool is busy, any of q waits, or an urgent
     * caller's last job ended less than URGENT_HOLD_NS ago (so its next
     * op, after the host work between two, finds the pool free) */
    pthread_mutex_t q_mu;
    pthread_cond_t free_cv; /* on CLOCK_MONOTONIC */
    bool busy;
    uint64_t hold_until;    /* after an urgent job: the others wait till then (0: none) */
    int n_free_wait;
    struct tp_waiter *q;
    pthread_mutex_t mu;
    pthread_cond_t wake, done;
    atomic_uint_fast64_t generation; /* bumped per job; workers wait for a change */
    atomic_int pending;    /* workers still running the current job */
    int sleepers;          /* workers waiting on wake (under mu) */
    bool caller_sleeps;    /* the caller waits on done (under mu) */
    atomic_bool quit;
    atomic_bool parked;    /* tp_release_cores: workers stop polling */
    /* current job */
    tp_fn fn;
    void *ctx;
    int64_t n_items, chunk;
    atomic_llong next;
    /* priority sections (threadpool.h invariant 4): prio is set while a
     * thread is inside one; other callers wait on gate (under gate_mu),
     * counted in gate_hit; low_busy / low_last_ns: their jobs running
     * now, and the end of their last one */
    atomic_bool prio;
    atomic_bool had_prio;  /* some section has begun: until then no caller
                            * pays for the bookkeeping of the turns */
    pthread_mutex_t gate_mu;
    pthread_cond_t gate;
    bool gate_hit;
    atomic_int low_busy;
    atomic_uint_fast64_t low_last_ns;
    uint64_t prio_t0;      /* the section's start (its thread's only) */
};

/* A caller queued for the pool (a section's or an urgent one): classes
 * 0 (section) and 1 (urgent, by when it became urgent); on its own stack
 * while it waits. */
struct tp_waiter {
    pthread_cond_t cv;
    int cls;
    uint64_t key;
    bool granted;
    struct tp_waiter *next;
};

static _Thread_local int tls_in_job;
static _Thread_local bool tls_urgent;     /* tp_set_urgent */
static _Thread_local uint64_t tls_urgent_t; /* since when */
static _Thread_local struct threadpool *tls_prio; /* the pool whose section this thread is in */

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Poll until cond(tp) or about SPIN_NS have passed; the clock is read
 * every 64 polls only. Returns cond(tp). */
static bool spin_until(struct threadpool *tp, bool (*cond)(struct threadpool *))
{
    uint64_t t0 = 0;
    for (unsigned i = 1;; i++) {
        if (cond(tp)) return true;
        cpu_relax();
        if ((i & 63) == 0) {
            uint64_t t = now_ns();
            if (!t0) t0 = t;
            else if (t - t0 > SPIN_NS) return cond(tp);
        }
    }
}

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

static _Thread_local uint64_t tls_seen; /* a worker's last generation */

static bool job_ready(struct threadpool *tp)
{
    return atomic_load_explicit(&tp->generation, memory_order_acquire) != tls_seen ||
           atomic_load_explicit(&tp->quit, memory_order_acquire);
}

/* a polling worker's stop condition: a job, or the cores were released */
static bool job_or_parked(struct threadpool *tp)
{
    return job_ready(tp) || atomic_load_explicit(&tp->parked, memory_order_relaxed);
}

static bool job_done(struct threadpool *tp)
{
    return atomic_load_explicit(&tp->pending, memory_order_acquire) == 0;
}

static void *worker(void *p)
{
    struct worker_arg wa = *(struct worker_arg *)p;
    free(p);
    struct threadpool *tp = wa.tp;
    tls_in_job = 1;
    tls_seen = 0;
    for (;;) {
        spin_until(tp, job_or_parked);
        if (!job_ready(tp)) {
            pthread_mutex_lock(&tp->mu);
            tp->sleepers++;
            while (!job_ready(tp)) pthread_cond_wait(&tp->wake, &tp->mu); /* invariant 1 */
            tp->sleepers--;
            pthread_mutex_unlock(&tp->mu);
        }
        if (atomic_load(&tp->quit)) break;
        tls_seen = atomic_load_explicit(&tp->generation, memory_order_acquire);
        run_chunks(tp, wa.ith);
        if (atomic_fetch_sub_explicit(&tp->pending, 1, memory_order_acq_rel) == 1) {
            pthread_mutex_lock(&tp->mu);
            if (tp->caller_sleeps) pthread_cond_signal(&tp->done);
            pthread_mutex_unlock(&tp->mu);
        }
    }
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
    pthread_mutex_init(&tp->q_mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&tp->free_cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&tp->mu, NULL);
    pthread_mutex_init(&tp->gate_mu, NULL);
    pthread_cond_init(&tp->wake, NULL);
    pthread_cond_init(&tp->done, NULL);
    pthread_cond_init(&tp->gate, NULL);
    atomic_init(&tp->prio, false);
    atomic_init(&tp->had_prio, false);
    atomic_init(&tp->low_busy, 0);
    atomic_init(&tp->low_last_ns, 0);
    atomic_init(&tp->generation, 0);
    atomic_init(&tp->pending, 0);
    atomic_init(&tp->quit, false);
    atomic_init(&tp->parked, false);
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
    atomic_store(&tp->quit, true);
    pthread_mutex_lock(&tp->mu);
    pthread_cond_broadcast(&tp->wake);
    pthread_mutex_unlock(&tp->mu);
    for (int i = 1; i < tp->n; i++) pthread_join(tp->th[i - 1], NULL);
    free(tp->th);
    pthread_cond_destroy(&tp->wake);
    pthread_cond_destroy(&tp->done);
    pthread_cond_destroy(&tp->gate);
    pthread_mutex_destroy(&tp->gate_mu);
    pthread_mutex_destroy(&tp->mu);
    pthread_cond_destroy(&tp->free_cv);
    pthread_mutex_destroy(&tp->q_mu);
    free(tp);
}

int tp_n_threads(const struct threadpool *tp) { return tp ? tp->n : 1; }

void tp_release_cores(struct threadpool *tp)
{
    if (tp) atomic_store_explicit(&tp->parked, true, memory_order_relaxed);
}

/* Take the pool for one job (invariant 3): at once when it is free and
 * no queued caller waits, else queued (cls 0, 1) or among the free-for-all
 * (cls 2). */
static void job_acquire(struct threadpool *tp, int cls)
{
    pthread_mutex_lock(&tp->q_mu);
    if (cls == 2) {
        tp->n_free_wait++;
        for (;;) {
            if (tp->busy || tp->q) {
                pthread_cond_wait(&tp->free_cv, &tp->q_mu);
                continue;
            }
            if (!tp->hold_until || now_ns() >= tp->hold_until) break;
            const struct timespec till = {(time_t)(tp->hold_until / 1000000000u),
                                          (long)(tp->hold_until % 1000000000u)};
            pthread_cond_timedwait(&tp->free_cv, &tp->q_mu, &till);
        }
        tp->n_free_wait--;
        tp->hold_until = 0; /* passed */
        tp->busy = true;
    } else if (!tp->busy) {
        tp->busy = true;
    } else {
        struct tp_waiter w = {.cls = cls, .key = cls == 1 ? tls_urgent_t : 0};
        pthread_cond_init(&w.cv, NULL);
        struct tp_waiter **at = &tp->q; /* after every waiter of a lower class or key, or the same */
        while (*at && ((*at)->cls < cls || ((*at)->cls == cls && (*at)->key <= w.key))) at = &(*at)->next;
        w.next = *at;
        *at = &w;
        while (!w.granted) pthread_cond_wait(&w.cv, &tp->q_mu);
        pthread_cond_destroy(&w.cv);
    }
    pthread_mutex_unlock(&tp->q_mu);
}

/* How long the pool stays an urgent caller's after its job (the host
 * work between two ops is far shorter; a caller that waits for something
 * else, e.g. T3's tokens, leaves it to the others after that). */
#define URGENT_HOLD_NS 1000000

/* Hand the pool to the first queued caller, else free it (cls: the
 * releasing caller's). */
static void job_release(struct threadpool *tp, int cls)
{
    pthread_mutex_lock(&tp->q_mu);
    struct tp_waiter *w = tp->q;
    if (w) {
        tp->q = w->next;
        w->granted = true; /* busy stays set: the pool is w's now */
        pthread_cond_signal(&w->cv);
    } else {
        tp->busy = false;
        if (cls == 1) tp->hold_until = now_ns() + URGENT_HOLD_NS;
        if (tp->n_free_wait > 0) pthread_cond_signal(&tp->free_cv);
    }
    pthread_mutex_unlock(&tp->q_mu);
}

void tp_set_urgent(bool on)
{
    if (on && !tls_urgent) tls_urgent_t = now_ns();
    tls_urgent = on;
}
bool tp_urgent(void) { return tls_urgent; }

void tp_parallel_for(struct threadpool *tp, int64_t n, int64_t grain,
                     tp_fn fn, void *ctx)
{
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    if (!tp || tp->n == 1 || tls_in_job || n <= grain) {
        fn(ctx, 0, n, 0);
        return;
    }
    const int cls = tls_prio == tp ? 0 : tls_urgent ? 1 : 2;
    const bool low = cls != 0 && atomic_load_explicit(&tp->had_prio, memory_order_acquire);
    /* counted from here, so a job waiting at the gate counts as busy */
    if (low) atomic_fetch_add_explicit(&tp->low_busy, 1, memory_order_relaxed);
    if (low && atomic_load_explicit(&tp->prio, memory_order_acquire)) {
        /* invariant 4: wait out another thread's section */
        pthread_mutex_lock(&tp->gate_mu);
        while (atomic_load_explicit(&tp->prio, memory_order_acquire)) {
            tp->gate_hit = true;
            pthread_cond_wait(&tp->gate, &tp->gate_mu);
        }
        pthread_mutex_unlock(&tp->gate_mu);
    }
    job_acquire(tp, cls);
    /* about 4 chunks per thread for balance, never below the grain */
    int64_t chunk = (n + 4 * tp->n - 1) / (4 * tp->n);
    if (chunk < grain) chunk = grain;
    tp->fn = fn;
    tp->ctx = ctx;
    tp->n_items = n;
    tp->chunk = chunk;
    atomic_store_explicit(&tp->next, 0, memory_order_relaxed);
    atomic_store_explicit(&tp->pending, tp->n - 1, memory_order_relaxed);
    atomic_store_explicit(&tp->parked, false, memory_order_relaxed);
    atomic_fetch_add_explicit(&tp->generation, 1, memory_order_seq_cst); /* invariant 1 */
    pthread_mutex_lock(&tp->mu);
    if (tp->sleepers > 0) pthread_cond_broadcast(&tp->wake);
    pthread_mutex_unlock(&tp->mu);

    tls_in_job = 1;
    run_chunks(tp, 0);
    tls_in_job = 0;

    if (!spin_until(tp, job_done)) {
        pthread_mutex_lock(&tp->mu);
        tp->caller_sleeps = true;
        while (!job_done(tp)) pthread_cond_wait(&tp->done, &tp->mu);
        tp->caller_sleeps = false;
        pthread_mutex_unlock(&tp->mu);
    }
    job_release(tp, cls);
    if (low) {
        atomic_store_explicit(&tp->low_last_ns, now_ns(), memory_order_relaxed);
        atomic_fetch_sub_explicit(&tp->low_busy, 1, memory_order_release);
    }
}

/* How long the turn after a section waits for another thread's next job
 * after its last one ended before it takes the pool back: longer than the
 * host work between two ops of a forward. */
#define TURN_IDLE_NS 1000000

void tp_priority_begin(struct threadpool *tp)
{
    if (!tp) return;
    tls_prio = tp;
    tp->prio_t0 = now_ns();
    atomic_store_explicit(&tp->had_prio, true, memory_order_release);
    atomic_store_explicit(&tp->prio, true, memory_order_release);
}

void tp_priority_end(struct threadpool *tp)
{
    if (!tp) return;
    pthread_mutex_lock(&tp->gate_mu);
    atomic_store_explicit(&tp->prio, false, memory_order_release);
    const bool hit = tp->gate_hit;
    tp->gate_hit = false;
    pthread_cond_broadcast(&tp->gate);
    pthread_mutex_unlock(&tp->gate_mu);
    tls_prio = NULL;
    if (!hit) return;
    /* the others' turn: as long as the section, or until they stop */
    const uint64_t t0 = now_ns(), len = t0 - tp->prio_t0;
    for (uint64_t t = t0; t - t0 < len; t = now_ns()) {
        if (atomic_load_explicit(&tp->low_busy, memory_order_acquire) == 0 &&
            t - atomic_load_explicit(&tp->low_last_ns, memory_order_relaxed) > TURN_IDLE_NS)
            break;
        const struct timespec d = {0, 100000};
        nanosleep(&d, NULL);
    }
}

/* ---- process-wide pools ----------------------------------------------- */

#define TP_SHARED_MAX 16 /* distinct thread counts at once */

static pthread_mutex_t shared_mu = PTHREAD_MUTEX_INITIALIZER;
static struct { struct threadpool *tp; int n, refs; } shared[TP_SHARED_MAX];

struct threadpool *tp_shared(int n_threads)
{
    if (n_threads < 1) n_threads = 1;
    struct threadpool *tp = NULL;
    pthread_mutex_lock(&shared_mu);
    int free_slot = -1;
    for (int i = 0; i < TP_SHARED_MAX && !tp; i++) {
        if (shared[i].tp && shared[i].n == n_threads) {
            shared[i].refs++;
            tp = shared[i].tp;
        } else if (!shared[i].tp && free_slot < 0) {
            free_slot = i;
        }
    }
    if (!tp && free_slot >= 0 && (tp = tp_create(n_threads))) {
        shared[free_slot].tp = tp;
        shared[free_slot].n = n_threads;
        shared[free_slot].refs = 1;
    }
    pthread_mutex_unlock(&shared_mu);
    return tp;
}

void tp_shared_release(struct threadpool *tp)
{
    if (!tp) return;
    struct threadpool *stop = NULL;
    pthread_mutex_lock(&shared_mu);
    for (int i = 0; i < TP_SHARED_MAX; i++)
        if (shared[i].tp == tp && --shared[i].refs == 0) {
            stop = tp;
            shared[i].tp = NULL;
        }
    pthread_mutex_unlock(&shared_mu);
    tp_free(stop);
}
