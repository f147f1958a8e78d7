/* scheduler.h - batched T3 decoding for concurrent calls on one model.
 *
 * One scheduler per loaded model (made with it, its thread started by the
 * first request). Calls on different threads (each a context with its own
 * backend and memory) prefill their sequences themselves (t3_seq_start,
 * in their own thread, in the turns the decode steps leave them:
 * invariant 4) and hand them over with sched_submit; the scheduler's thread
 * then decodes every sequence in hand with ONE batched forward per step
 * (t3_batch_step: matrix-matrix products over all rows, each sequence's
 * attention over its own cache, each its own processors and RNG) and puts
 * each token in the request's queue. The caller takes its tokens with
 * sched_next and does the rest (progress, S3Gen, audio out) in its own
 * thread, so S3Gen work runs in parallel with T3 and never inside a step.
 *
 * Invariants:
 *  1. A sequence's tokens are exactly those it gives decoded alone
 *     (t3_batch_step is row-exact), whatever else is in the batch.
 *  2. The scheduler's forwards run on a backend of the kind its first
 *     request came on: over the process-wide pool (backend_cpu_create_shared)
 *     of that request's thread count, or on the same device with a stream
 *     of its own (backend_create_like; the callers' caches are on that
 *     device, written before sched_submit, whose prefill ended in a
 *     transfer of its logits). Requests of another kind, count or device,
 *     and backends not made to share (backend.shared: `say`'s own
 *     backend, say, which decodes alone with its graph), are refused
 *     (sched_accepts: the caller then decodes alone, as before), so no call
 *     gets a second pool's threads. A device's batched step runs its
 *     products row-exact (arena.h) like the cpu's, without a graph.
 *     CBX_SCHED=0 in the environment refuses every request (every call
 *     decodes alone; to measure).
 *  3. A request joins at the next step after its submission and leaves at
 *     the step after its sequence ends or its caller cancels it
 *     (sched_cancel); the scheduler never touches a sequence after
 *     sched_finish returned.
 *  4. Each step is a priority section of the pool (threadpool.h invariant
 *     4): its ops run back to back, not interleaved with those of other
 *     threads (prefills, S3Gen), which then get a turn as long as the
 *     step. So while a prompt joins, a running decode's gap between
 *     tokens is about its step, the others' turn and the op in flight,
 *     not the whole prefill (bench/bench_stall: 2.6-3.3 steps, 15-33
 *     without the sections for a voice new to the server).
 *     CBX_SCHED_PRIORITY=0 in the environment turns this off (to measure).
 * Thread safety: any thread may submit; a request belongs to its caller.
 * sched_free needs every request finished. */
#ifndef CBX_PIPELINE_SCHEDULER_H
#define CBX_PIPELINE_SCHEDULER_H

#include <stdbool.h>
#include <stdint.h>

#include "core/error.h"

struct backend;
struct t3_seq;
struct sched;
struct sched_req;

/* A scheduler (no thread yet). NULL: out of memory. */
struct sched *sched_create(void);
void sched_free(struct sched *s); /* stops its thread; no-op on NULL */

/* Whether sequences started on backend be can be decoded here (invariant
 * 2). */
bool sched_accepts(struct sched *s, const struct backend *be);

/* Hand over seq (started on a backend sched_accepts, prefilled, not yet
 * stepped) for decoding; the caller keeps ownership but must not touch it
 * until sched_finish. max_tokens: the most tokens it can give (the queue's
 * size). */
cbx_status sched_submit(struct sched *s, struct t3_seq *seq, int64_t max_tokens, struct sched_req **out,
                        char *err);
/* The next token of the request, waiting for it: *token >= 0, or -1 when
 * the sequence has ended (then the return is its status: CBX_OK, or the
 * failure of a step). */
cbx_status sched_next(struct sched_req *r, int32_t *token, char *err);
/* Ask the scheduler to drop the request at its next step. */
void sched_cancel(struct sched_req *r);
/* Wait until the scheduler has let go of the request's sequence, then
 * free the request (the sequence stays the caller's). */
void sched_finish(struct sched_req *r);

/* Figures: steps run, rows decoded (sum over steps), most rows in a step. */
struct sched_stats {
    int64_t steps, rows, max_rows;
};
void sched_get_stats(struct sched *s, struct sched_stats *st);

#endif
