/* scheduler.c - the T3 decode thread of a model (scheduler.h states the
 * rules). */
#include "pipeline/scheduler.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"
#include "core/threadpool.h"
#include "t3/t3.h"

struct sched_req {
    struct sched *s;
    struct t3_seq *seq;
    int32_t *tok;          /* the queue: tokens [head, n) not yet taken */
    int64_t cap, n, head;
    bool cancel;           /* asked by the caller */
    bool ended;            /* the scheduler let go of seq */
    cbx_status rc;         /* the sequence's end: CBX_OK or a step's failure */
    char err[ERR_MAX];
    struct sched_req *next; /* in the pending or active list */
};

struct sched {
    pthread_mutex_t mu;
    pthread_cond_t work;   /* the thread: something to do */
    pthread_cond_t out;    /* callers: tokens or ends */
    bool started, quit;
    pthread_t th;
    struct backend *be;    /* over the shared pool of n_threads, or a device's
                            * stream of its own (invariant 2) */
    int n_threads;         /* host: the pool's threads */
    struct t3_batch *batch;
    bool prio;             /* steps as priority sections (invariant 4) */
    bool off;              /* CBX_SCHED=0: refuses every request */
    struct sched_req *pending, *active;
    struct sched_stats st;
};

struct sched *sched_create(void)
{
    struct sched *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->work, NULL);
    pthread_cond_init(&s->out, NULL);
    const char *v = getenv("CBX_SCHED");
    s->off = v && strcmp(v, "0") == 0;
    return s;
}

void sched_free(struct sched *s)
{
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    s->quit = true;
    pthread_cond_signal(&s->work);
    const bool started = s->started;
    pthread_mutex_unlock(&s->mu);
    if (started) pthread_join(s->th, NULL);
    t3_batch_free(s->batch);
    backend_free(s->be);
    pthread_cond_destroy(&s->out);
    pthread_cond_destroy(&s->work);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

/* Whether be's sequences fit the scheduler's backend (under mu): of the
 * kind it took first, over the same pool size or on the same device. */
static bool fits_locked(const struct sched *s, const struct backend *be)
{
    if (be->host) return !s->be || (s->be->host && s->n_threads == tp_n_threads(be->tp));
    return !s->be || (!s->be->host && backend_compatible(s->be, be));
}

/* A backend the scheduler can take at all (invariant 2): made to share
 * (on the cpu: over the shared pool). */
static bool eligible(const struct backend *be)
{
    return be && be->shared;
}

bool sched_accepts(struct sched *s, const struct backend *be)
{
    if (s->off || !eligible(be)) return false;
    pthread_mutex_lock(&s->mu);
    const bool ok = fits_locked(s, be);
    pthread_mutex_unlock(&s->mu);
    return ok;
}

/* r's end (under mu): out of the scheduler's hands. */
static void end_locked(struct sched_req *r, cbx_status rc, const char *err)
{
    r->ended = true;
    r->rc = rc;
    if (rc != CBX_OK && err) snprintf(r->err, sizeof r->err, "%s", err);
}

static void *run(void *arg)
{
    struct sched *s = arg;
    struct t3_seq **seqs = NULL;
    struct sched_req **reqs = NULL;
    int32_t *tok = NULL;
    cbx_status *rcs = NULL;
    int cap = 0;
    char err[ERR_MAX];
    pthread_mutex_lock(&s->mu);
    for (;;) {
        /* joins: the pending requests go to the end of the active list */
        struct sched_req **tail = &s->active;
        while (*tail) tail = &(*tail)->next;
        *tail = s->pending;
        s->pending = NULL;
        /* leaves: cancelled requests */
        int n = 0;
        for (struct sched_req **p = &s->active; *p;) {
            struct sched_req *r = *p;
            if (r->cancel) {
                *p = r->next;
                end_locked(r, CBX_ERR_CANCELLED, "cancelled");
                pthread_cond_broadcast(&s->out);
                continue;
            }
            n++;
            p = &r->next;
        }
        if (n == 0) {
            if (s->quit) break;
            pthread_cond_wait(&s->work, &s->mu);
            continue;
        }
        if (n > cap) {
            int c = n * 2;
            void *a = realloc(seqs, sizeof *seqs * (size_t)c), *b = realloc(reqs, sizeof *reqs * (size_t)c);
            if (a) seqs = a;
            if (b) reqs = b;
            void *x = realloc(tok, sizeof *tok * (size_t)c), *y = realloc(rcs, sizeof *rcs * (size_t)c);
            if (x) tok = x;
            if (y) rcs = y;
            if (!a || !b || !x || !y) { /* every active request fails */
                for (struct sched_req *r = s->active; r; r = r->next)
                    end_locked(r, CBX_ERR_NOMEM, "T3 scheduler: out of memory");
                s->active = NULL;
                pthread_cond_broadcast(&s->out);
                continue;
            }
            cap = c;
        }
        int k = 0, rows = 0;
        for (struct sched_req *r = s->active; r; r = r->next) {
            reqs[k] = r;
            rows += t3_seq_rows(r->seq);
            seqs[k++] = r->seq;
        }
        pthread_mutex_unlock(&s->mu);
        /* one step of every sequence in hand, one forward for all, as a
         * priority section of the pool (invariant 4) */
        struct threadpool *tp = s->prio && s->be->host ? s->be->tp : NULL;
        tp_priority_begin(tp);
        const cbx_status rc = t3_batch_step(s->batch, seqs, k, tok, rcs, err);
        tp_priority_end(tp);
        pthread_mutex_lock(&s->mu);
        s->st.steps++;
        s->st.rows += rows;
        if (rows > s->st.max_rows) s->st.max_rows = rows;
        for (int i = 0; i < k; i++) {
            struct sched_req *r = reqs[i];
            if (tok[i] >= 0 && r->n < r->cap) r->tok[r->n++] = tok[i];
            if (rc != CBX_OK) end_locked(r, rc, err);
            else if (rcs[i] != CBX_OK) end_locked(r, rcs[i], "T3: step failed");
            else if (t3_seq_done(r->seq)) end_locked(r, CBX_OK, NULL);
        }
        for (struct sched_req **p = &s->active; *p;) {
            if ((*p)->ended) *p = (*p)->next;
            else p = &(*p)->next;
        }
        pthread_cond_broadcast(&s->out);
    }
    pthread_mutex_unlock(&s->mu);
    free(seqs);
    free(reqs);
    free(tok);
    free(rcs);
    return NULL;
}

/* The thread and its backend for requests on backends like `like` (under
 * mu): over the shared pool of its thread count, or the same device. */
static cbx_status start_locked(struct sched *s, const struct backend *like, char *err)
{
    if (s->started) return CBX_OK;
    const int n = like->host ? tp_n_threads(like->tp) : 0;
    char e[ERR_MAX] = "";
    if (!(s->be = like->host ? backend_cpu_create_shared(n) : backend_create_like(like, 0, false, e)) ||
        !(s->batch = t3_batch_create(s->be))) {
        t3_batch_free(s->batch);
        s->batch = NULL;
        backend_free(s->be);
        s->be = NULL;
        return e[0] ? err_setf(err, CBX_ERR_UNSUPPORTED, "T3 scheduler: %s", e)
                    : err_setf(err, CBX_ERR_NOMEM, "T3 scheduler: out of memory");
    }
    s->n_threads = n;
    const char *pv = getenv("CBX_SCHED_PRIORITY");
    s->prio = !(pv && strcmp(pv, "0") == 0);
    if (pthread_create(&s->th, NULL, run, s) != 0) {
        t3_batch_free(s->batch);
        s->batch = NULL;
        backend_free(s->be);
        s->be = NULL;
        return err_setf(err, CBX_ERR_INTERNAL, "T3 scheduler: cannot start its thread");
    }
    s->started = true;
    return CBX_OK;
}

cbx_status sched_submit(struct sched *s, struct t3_seq *seq, int64_t max_tokens, struct sched_req **out,
                        char *err)
{
    *out = NULL;
    const struct backend *be = t3_seq_backend(seq);
    if (!eligible(be))
        return err_setf(err, CBX_ERR_INVALID_ARG,
                        "T3 scheduler: the sequence's backend was not made to share");
    struct sched_req *r = calloc(1, sizeof *r);
    if (r) r->tok = malloc(sizeof *r->tok * (size_t)(max_tokens > 0 ? max_tokens : 1));
    if (!r || !r->tok) {
        if (r) free(r);
        return err_setf(err, CBX_ERR_NOMEM, "T3 scheduler: out of memory");
    }
    r->s = s;
    r->seq = seq;
    r->cap = max_tokens;
    pthread_mutex_lock(&s->mu);
    cbx_status rc = start_locked(s, be, err);
    if (rc == CBX_OK && !fits_locked(s, be))
        rc = err_setf(err, CBX_ERR_INVALID_ARG, "T3 scheduler: runs on %s (%d threads), the sequence on %s",
                      s->be->name, s->n_threads, be->name);
    if (rc == CBX_OK) {
        if (t3_seq_done(seq)) {
            end_locked(r, CBX_OK, NULL); /* nothing to decode */
        } else {
            r->next = s->pending;
            s->pending = r;
            pthread_cond_signal(&s->work);
        }
    }
    pthread_mutex_unlock(&s->mu);
    if (rc != CBX_OK) {
        free(r->tok);
        free(r);
        return rc;
    }
    *out = r;
    return CBX_OK;
}

cbx_status sched_next(struct sched_req *r, int32_t *token, char *err)
{
    struct sched *s = r->s;
    *token = -1;
    pthread_mutex_lock(&s->mu);
    while (r->head == r->n && !r->ended) pthread_cond_wait(&s->out, &s->mu);
    cbx_status rc = CBX_OK;
    if (r->head < r->n) *token = r->tok[r->head++];
    else if ((rc = r->rc) != CBX_OK) err_setf(err, rc, "%s", r->err);
    pthread_mutex_unlock(&s->mu);
    return rc;
}

void sched_cancel(struct sched_req *r)
{
    pthread_mutex_lock(&r->s->mu);
    r->cancel = true;
    pthread_cond_signal(&r->s->work);
    pthread_mutex_unlock(&r->s->mu);
}

void sched_finish(struct sched_req *r)
{
    if (!r) return;
    struct sched *s = r->s;
    pthread_mutex_lock(&s->mu);
    if (!r->ended) {
        r->cancel = true;
        pthread_cond_signal(&s->work);
        while (!r->ended) pthread_cond_wait(&s->out, &s->mu);
    }
    pthread_mutex_unlock(&s->mu);
    free(r->tok);
    free(r);
}

void sched_get_stats(struct sched *s, struct sched_stats *st)
{
    pthread_mutex_lock(&s->mu);
    *st = s->st;
    pthread_mutex_unlock(&s->mu);
}
