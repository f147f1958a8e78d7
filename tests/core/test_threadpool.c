/* test_threadpool.c - the persistent pool (threadpool.c): every index of
 * [0, n) is run exactly once, across
 * 1. many back-to-back jobs (workers still polling: no system call path);
 * 2. jobs separated by more than the poll time (workers and caller asleep
 *    on the condition variables: the wake-up path);
 *    the same after tp_release_cores (workers sleep at once);
 * 3. grains and sizes around the chunking (n <= grain runs on the caller);
 * 4. a nested call from inside a job (runs serially on that thread);
 * 5. two caller threads sharing one pool (jobs serialised);
 * 6. tp_free of a pool whose workers poll, and of one whose workers sleep;
 * 7. process-wide pools; 8. priority sections; 9. urgent callers go
 *    first, in the order they became urgent.
 * Thread indices must lie in [0, n_threads). */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "core/threadpool.h"
#include "testutil.h"

struct job {
    atomic_int *hits;     /* per index */
    int n_threads;
    atomic_int bad_ith;   /* thread index out of range */
    struct threadpool *tp; /* for the nested call */
    int64_t nested_n;
};

static void count(void *c, int64_t b, int64_t e, int ith)
{
    struct job *j = c;
    if (ith < 0 || ith >= j->n_threads) atomic_fetch_add(&j->bad_ith, 1);
    for (int64_t i = b; i < e; i++) atomic_fetch_add(&j->hits[i], 1);
}

static void nested(void *c, int64_t b, int64_t e, int ith)
{
    struct job *j = c;
    (void)ith;
    for (int64_t i = b; i < e; i++) {
        struct job in = *j;
        in.hits = j->hits + i * j->nested_n;
        tp_parallel_for(j->tp, j->nested_n, 1, count, &in);
        if (atomic_load(&in.bad_ith)) atomic_fetch_add(&j->bad_ith, 1);
    }
}

/* run one job of n indices; true when each was hit once */
static bool once(struct threadpool *tp, int64_t n, int64_t grain, atomic_int *hits)
{
    struct job j = {.hits = hits, .n_threads = tp_n_threads(tp)};
    atomic_init(&j.bad_ith, 0);
    for (int64_t i = 0; i < n; i++) atomic_init(&hits[i], 0);
    tp_parallel_for(tp, n, grain, count, &j);
    bool ok = atomic_load(&j.bad_ith) == 0;
    for (int64_t i = 0; i < n; i++) ok = ok && atomic_load(&hits[i]) == 1;
    return ok;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {0, ms * 1000000L};
    nanosleep(&ts, NULL);
}

struct caller { struct threadpool *tp; atomic_int *hits; int64_t n; int jobs; bool ok; };

static void *caller_main(void *p)
{
    struct caller *c = p;
    c->ok = true;
    for (int k = 0; k < c->jobs; k++) c->ok = once(c->tp, c->n, 1, c->hits) && c->ok;
    return NULL;
}

/* 8. priority sections (threadpool.h invariant 4): another thread's job
 * waits at the gate while a section runs jobs, and has run by the time
 * tp_priority_end returns (the others' turn) */
struct low { struct threadpool *tp; atomic_int *hits; atomic_int entered, ran; bool ok; };

static void *low_main(void *p)
{
    struct low *l = p;
    atomic_store(&l->entered, 1);
    l->ok = once(l->tp, 64, 1, l->hits + 1000);
    atomic_store(&l->ran, 1);
    return NULL;
}

static void test_priority(atomic_int *hits)
{
    struct threadpool *tp = tp_create(2);
    CHECK(tp != NULL, "tp_create(2)");
    if (!tp) return;
    struct low l = {.tp = tp, .hits = hits};
    atomic_init(&l.entered, 0);
    atomic_init(&l.ran, 0);
    tp_priority_begin(tp);
    pthread_t th;
    const bool started = pthread_create(&th, NULL, low_main, &l) == 0;
    while (started && !atomic_load(&l.entered)) sleep_ms(1);
    bool ok = true;
    int ran_during = 0;
    for (int k = 0; k < 20; k++) { /* 40 ms of the section's own jobs */
        ok = once(tp, 100, 1, hits) && ok;
        ran_during += atomic_load(&l.ran);
        sleep_ms(2);
    }
    tp_priority_end(tp);
    const int ran_after = atomic_load(&l.ran);
    if (started) pthread_join(th, NULL);
    printf("priority: the other thread's job ran %d times during the section, %s by its end\n", ran_during,
           ran_after ? "done" : "not done");
    CHECK(started && ok && l.ok && ran_during == 0 && ran_after == 1,
          "a section's jobs run alone; the waiting job runs in the turn after it");
    tp_priority_begin(NULL);
    tp_priority_end(NULL);
    tp_free(tp);
}

/* 9. urgent callers (tp_set_urgent): while one job holds the pool, a
 * normal caller, then an urgent one (U2), then one that became urgent
 * before U2 (U1) ask for it; they get it as U1, U2, the normal one */
struct ordered {
    struct threadpool *tp;
    atomic_int *seq, *go;
    int urgent;   /* 0: no; k > 0: become urgent, ask once *go >= k - 1 */
    int got;      /* the order its job started in */
    atomic_int ready, asked; /* urgent (or not) now; asking for the pool */
};

static void record(void *c, int64_t b, int64_t e, int ith)
{
    struct ordered *o = c;
    (void)e;
    (void)ith;
    if (b == 0) o->got = atomic_fetch_add(o->seq, 1);
}

static void *ordered_main(void *p)
{
    struct ordered *o = p;
    if (o->urgent) {
        tp_set_urgent(true);
        atomic_store(&o->ready, 1);
        while (atomic_load(o->go) < o->urgent - 1) sleep_ms(1);
    }
    atomic_store(&o->asked, 1);
    tp_parallel_for(o->tp, 2, 1, record, o);
    tp_set_urgent(false);
    return NULL;
}

struct holder { struct threadpool *tp; atomic_int on, release; };

static void hold(void *c, int64_t b, int64_t e, int ith)
{
    struct holder *h = c;
    (void)e;
    (void)ith;
    if (b != 0) return;
    atomic_store(&h->on, 1);
    while (!atomic_load(&h->release)) sleep_ms(1);
}

static void *holder_main(void *p)
{
    struct holder *h = p;
    tp_parallel_for(h->tp, 2, 1, hold, h);
    return NULL;
}

/* start th on f(arg) and wait until *flag is set (then a little more, so
 * that what follows the flag has happened); false when it did not start */
static bool start_until(pthread_t *th, void *(*f)(void *), void *arg, atomic_int *flag)
{
    if (pthread_create(th, NULL, f, arg) != 0) return false;
    while (!atomic_load(flag)) sleep_ms(1);
    sleep_ms(30);
    return true;
}

static void test_urgent(void)
{
    struct threadpool *tp = tp_create(2);
    CHECK(tp != NULL, "tp_create(2)");
    if (!tp) return;
    atomic_int seq, go;
    atomic_init(&seq, 0);
    atomic_init(&go, 0);
    /* [0] normal, [1] U1 (urgent first, asks last), [2] U2 */
    struct ordered o[3];
    for (int i = 0; i < 3; i++) {
        o[i].tp = tp;
        o[i].seq = &seq;
        o[i].go = &go;
        o[i].urgent = i == 0 ? 0 : i == 1 ? 2 : 1;
        o[i].got = -1;
        atomic_init(&o[i].ready, 0);
        atomic_init(&o[i].asked, 0);
    }
    struct holder h = {.tp = tp};
    atomic_init(&h.on, 0);
    atomic_init(&h.release, 0);
    pthread_t th[3], hth;
    bool st[3] = {false, false, false}, hs = false;
    bool ok = (st[1] = start_until(&th[1], ordered_main, &o[1], &o[1].ready)); /* U1 urgent from now */
    ok = ok && (hs = start_until(&hth, holder_main, &h, &h.on));
    ok = ok && (st[0] = start_until(&th[0], ordered_main, &o[0], &o[0].asked));
    ok = ok && (st[2] = start_until(&th[2], ordered_main, &o[2], &o[2].asked));
    atomic_store(&go, 1);
    while (st[1] && !atomic_load(&o[1].asked)) sleep_ms(1);
    sleep_ms(30);
    atomic_store(&h.release, 1);
    if (hs) pthread_join(hth, NULL);
    for (int i = 0; i < 3; i++)
        if (st[i]) pthread_join(th[i], NULL);
    printf("urgent: after the held job, U1 ran %d-th, U2 %d-th, the normal caller %d-th (0-based)\n", o[1].got,
           o[2].got, o[0].got);
    CHECK(ok && o[1].got == 0 && o[2].got == 1 && o[0].got == 2,
          "urgent callers first, in the order they became urgent; then the others");
    tp_free(tp);
}

/* 7. process-wide pools: one per thread count, reference-counted */
static void test_shared(atomic_int *hits)
{
    const int t0 = test_n_threads();
    struct threadpool *a = tp_shared(3), *b = tp_shared(3), *c = tp_shared(2);
    CHECK(a && a == b && c && c != a && tp_n_threads(a) == 3 && tp_n_threads(c) == 2,
          "tp_shared: the same pool for the same count, another for another count");
    const int t1 = test_n_threads();
    printf("shared pools: %d threads before, %d with two users of a 3-thread pool and one of a 2-thread pool\n",
           t0, t1);
    CHECK(t1 == t0 + 2 + 1, "workers started once per pool: %d -> %d threads", t0, t1);
    /* two callers on the shared pool at once */
    struct caller cl[2] = {{a, hits, 5000, 100, false}, {b, hits + 5000, 5000, 100, false}};
    pthread_t th;
    bool started = pthread_create(&th, NULL, caller_main, &cl[1]) == 0;
    caller_main(&cl[0]);
    if (started) pthread_join(th, NULL);
    CHECK(started && cl[0].ok && cl[1].ok, "two users of one shared pool, 100 jobs each");
    tp_shared_release(b);
    CHECK(once(a, 1000, 1, hits), "after one release the other user's pool still runs");
    tp_shared_release(a);
    tp_shared_release(c);
    tp_shared_release(NULL);
    /* the workers exit on their own: wait up to 5 s (a busy machine may
     * take longer than a few ms to schedule them) */
    for (int i = 0; i < 1000 && test_n_threads() != t0; i++) sleep_ms(5);
    CHECK(test_n_threads() == t0, "last release stops the workers: %d threads (want %d)", test_n_threads(), t0);
    struct threadpool *d = tp_shared(3);
    CHECK(d && once(d, 1000, 1, hits), "a pool made again after the last release");
    tp_shared_release(d);
}

int main(void)
{
    enum { N = 10000 };
    atomic_int *hits = malloc(2 * N * sizeof *hits);
    CHECK(hits != NULL, "allocation");
    if (!hits) return test_summary();
    for (int nt = 1; nt <= 4; nt++) {
        struct threadpool *tp = tp_create(nt);
        CHECK(tp && tp_n_threads(tp) == nt, "tp_create(%d)", nt);
        if (!tp) continue;

        /* 1. back to back, sizes around the chunking */
        bool ok = true;
        for (int k = 0; k < 2000; k++) ok = once(tp, 1 + (k * 37) % 97, 1, hits) && ok;
        CHECK(ok, "%d threads: 2000 back-to-back jobs, each index once", nt);

        /* 2. gaps longer than the poll: everyone sleeps in between */
        ok = true;
        for (int k = 0; k < 20; k++) {
            sleep_ms(2);
            ok = once(tp, N, 1, hits) && ok;
        }
        CHECK(ok, "%d threads: 20 jobs after 2 ms idle, each index once", nt);

        /* 2b. cores released right after a job: workers sleep at once */
        ok = true;
        for (int k = 0; k < 200; k++) {
            ok = once(tp, 64, 1, hits) && ok;
            tp_release_cores(tp);
        }
        CHECK(ok, "%d threads: 200 jobs, cores released after each, each index once", nt);

        /* 3. grain: n <= grain runs on the caller; big grains, one item */
        ok = once(tp, 5, 5, hits) && once(tp, N, 3000, hits) && once(tp, 1, 1, hits) &&
             once(tp, N, 0, hits);
        CHECK(ok, "%d threads: grains 5/5, 3000/%d, 1/1, 0/%d", nt, N, N);

        /* 4. nested call inside a job */
        struct job j = {.hits = hits, .n_threads = nt, .tp = tp, .nested_n = 50};
        atomic_init(&j.bad_ith, 0);
        for (int i = 0; i < 40 * 50; i++) atomic_init(&hits[i], 0);
        tp_parallel_for(tp, 40, 1, nested, &j);
        ok = atomic_load(&j.bad_ith) == 0;
        for (int i = 0; i < 40 * 50; i++) ok = ok && atomic_load(&hits[i]) == 1;
        CHECK(ok, "%d threads: nested parallel_for runs serially, each index once", nt);

        /* 5. two callers on one pool */
        struct caller c[2] = {{tp, hits, N / 2, 300, false}, {tp, hits + N, N / 2, 300, false}};
        pthread_t th;
        bool started = pthread_create(&th, NULL, caller_main, &c[1]) == 0;
        caller_main(&c[0]);
        if (started) pthread_join(th, NULL);
        CHECK(started && c[0].ok && c[1].ok, "%d threads: two callers, 300 jobs each", nt);

        /* 6. free while the workers poll (right after a job) or sleep */
        if (nt % 2) sleep_ms(5);
        tp_free(tp);
        CHECK(1, "%d threads: tp_free returned (%s workers)", nt, nt % 2 ? "sleeping" : "polling");
    }
    test_shared(hits);
    test_priority(hits);
    test_urgent();
    /* NULL pool runs serially */
    tp_release_cores(NULL);
    CHECK(once(NULL, 100, 1, hits), "NULL pool: serial, each index once");
    free(hits);
    return test_summary();
}
