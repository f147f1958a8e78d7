/* threadpool.h - persistent worker threads with a blocking parallel-for.
 *
 * Invariants:
 *  1. Workers are created once; between jobs each polls for the next one
 *     for about 0.1 ms (pause loop, no system call), then sleeps on a
 *     condition variable. A job is dispatched to all of them at once; the
 *     caller polls for their completion the same way.
 *  2. tp_parallel_for returns only after every index in [0, n) has been
 *     processed exactly once; the calling thread works too.
 *  3. One job at a time per pool: calls from several threads on the same
 *     pool are serialised. When the pool is busy, the caller in a priority
 *     section (invariant 4) gets it next, then urgent callers
 *     (tp_set_urgent) in the order they became urgent, then the others in
 *     no set order (as a mutex would: a thread issuing op after op may
 *     keep it). After an urgent caller's job the others wait a millisecond
 *     more, so its next op (after the host work between two) finds the
 *     pool free; an urgent caller that waits for something else leaves
 *     the pool to them after that.
 *     A nested call from inside a job runs serially on the calling worker
 *     (no deadlock).
 *  4. Priority sections: while one thread is between tp_priority_begin and
 *     tp_priority_end, other threads' tp_parallel_for calls wait before
 *     they start a job (one that had started finishes first), so the
 *     section's jobs run back to back as if the pool were its alone (the
 *     T3 scheduler's decode step, which a prefill or S3Gen work of other
 *     threads would otherwise stretch op by op). One section at a time
 *     per pool; after a section others waited for, they get a turn as
 *     long as it (tp_priority_end).
 * Thread safety: a pool may be shared; jobs are serialised. */
#ifndef CBX_THREADPOOL_H
#define CBX_THREADPOOL_H

#include <stdbool.h>
#include <stdint.h>

struct threadpool;

/* fn(ctx, begin, end, thread_index) processes indices [begin, end). */
typedef void (*tp_fn)(void *ctx, int64_t begin, int64_t end, int ith);

/* n_threads total, including the caller (>= 1). NULL on failure. */
struct threadpool *tp_create(int n_threads);
void tp_free(struct threadpool *tp); /* no-op on NULL */
int tp_n_threads(const struct threadpool *tp);

/* A pool of n_threads shared by the whole process: the callers asking for
 * the same count get the same pool (jobs serialised, invariant 3), so N
 * contexts do not start N sets of workers. Reference-counted: every
 * successful tp_shared is paired with one tp_shared_release, and the last
 * release stops the workers. NULL on failure. Thread safety: any thread. */
struct threadpool *tp_shared(int n_threads);
void tp_shared_release(struct threadpool *tp); /* no-op on NULL */

/* Split [0, n) into chunks of at least `grain` indices and run fn on them.
 * tp may be NULL (runs serially on the caller). */
void tp_parallel_for(struct threadpool *tp, int64_t n, int64_t grain,
                     tp_fn fn, void *ctx);

/* Workers stop polling for the next job now and sleep until it comes (the
 * next tp_parallel_for polls again). Call before the cores go to other
 * threads for a while, e.g. a multi-threaded BLAS call, so they do not
 * compete with the pool's polling. tp may be NULL. */
void tp_release_cores(struct threadpool *tp);

/* Invariant 4: begin a section of the calling thread (not nested); end
 * it. When other threads waited for the section, tp_priority_end then
 * gives them the pool for as long as the section took (sleeping; it
 * returns early once none has started a job for a millisecond), so they
 * keep at least half of it. tp may be NULL (no-op). */
void tp_priority_begin(struct threadpool *tp);
void tp_priority_end(struct threadpool *tp);

/* Invariant 3: the calling thread's jobs (on any pool) go ahead of those
 * of threads that are not urgent, from now until tp_set_urgent(false);
 * tp_urgent says whether it is. Meant for the short work a user waits on
 * with nothing to hear yet: a streamed request before its first audio,
 * while other requests' later chunks wait (pipeline/engine.c). */
void tp_set_urgent(bool on);
bool tp_urgent(void);

/* Number of online CPUs (>= 1). */
int tp_default_threads(void);

#endif
