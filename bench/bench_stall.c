/* bench_stall.c - how long a running decode stalls while another request
 * joins it (the server's case: a new request's prompt is prefilled while
 * other requests are decoding).
 *
 *   bench_stall --model DIR|GGUF [--voice FILE] [--threads N] [--reps N]
 *
 * Through the C API, two contexts of one model with the same thread count
 * (so the model's T3 scheduler batches their decode steps): A speaks a
 * long text (greedy, up to 300 speech tokens); once A has decoded 40
 * tokens, B starts another text (24 tokens). Every speech token reaches
 * its caller's abort_callback, whose times give:
 *   stall_step   the median gap between A's tokens before B started (one
 *                decode step of A alone)
 *   stall_max    the longest gap between A's tokens from B's start to B's
 *                first token (B's prompt prefill, and with a new voice its
 *                voice prefix), also as a ratio to stall_step: how many
 *                of A's steps the join costs it
 *   stall_b_first  B's time from its call to its first token
 * Case "warm": B speaks in A's voice (the voice prefix is cached: B's text
 * prefill alone). Case "cold" (with --voice FILE, a .voice file or an
 * audio clip): B's voice is new to the model, so B first builds its voice
 * prefix (speaker + reference-prompt positions). */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chatterbox.h"
#include "common.h"

#define A_TOKENS 300
#define B_TOKENS 24
#define JOIN_AT 40

struct clock_rec {
    double t[A_TOKENS + 64];
    int n;
};

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool go;
} join = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false};

static int on_a(void *user)
{
    struct clock_rec *r = user;
    if (r->n < (int)(sizeof r->t / sizeof r->t[0])) r->t[r->n++] = bench_now();
    if (r->n == JOIN_AT) {
        pthread_mutex_lock(&join.mu);
        join.go = true;
        pthread_cond_signal(&join.cv);
        pthread_mutex_unlock(&join.mu);
    }
    return 0;
}

static int on_b(void *user)
{
    double *first = user;
    if (*first == 0) *first = bench_now();
    return 0;
}

struct job {
    cbx_context *ctx;
    const cbx_voice *voice;
    const char *text;
    cbx_synth_params p;
    cbx_status rc;
    double t0;
};

static void *run_job(void *arg)
{
    struct job *j = arg;
    cbx_audio au = {0};
    j->t0 = bench_now();
    j->rc = cbx_synthesize(j->ctx, j->voice, j->text, &j->p, NULL, NULL, &au);
    cbx_audio_free(&au);
    return NULL;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* One join: A alone, then B joins; false on a synthesis failure. */
static bool one(cbx_context *ca, cbx_context *cb, const cbx_voice *vb, int threads, double *step, double *stall,
                double *b_first)
{
    static struct clock_rec ra;
    memset(&ra, 0, sizeof ra);
    join.go = false;
    double bf = 0;
    struct job a = {ca, NULL,
                    "The quick brown fox jumps over the lazy dog, and then, after a short rest in the warm "
                    "afternoon sun, it runs back across the green field to its den by the old river.",
                    cbx_synth_default_params(), CBX_OK, 0};
    a.p.top_k = 1;
    a.p.max_tokens = A_TOKENS;
    a.p.n_threads = threads;
    a.p.split_text = 0;
    a.p.abort_callback = on_a;
    a.p.abort_user = &ra;
    struct job b = {cb, vb, "A second voice joins the first one here.", a.p, CBX_OK, 0};
    b.p.max_tokens = B_TOKENS;
    b.p.abort_callback = on_b;
    b.p.abort_user = &bf;
    pthread_t ta, tb;
    if (pthread_create(&ta, NULL, run_job, &a)) return false;
    pthread_mutex_lock(&join.mu);
    while (!join.go) pthread_cond_wait(&join.cv, &join.mu);
    pthread_mutex_unlock(&join.mu);
    const bool started = pthread_create(&tb, NULL, run_job, &b) == 0;
    if (started) pthread_join(tb, NULL);
    pthread_join(ta, NULL);
    if (!started || a.rc != CBX_OK || b.rc != CBX_OK || bf == 0 || ra.n < JOIN_AT + 4) {
        fprintf(stderr, "bench_stall: synthesis failed (A: %s: %s; B: %s: %s)\n", cbx_status_str(a.rc),
                cbx_context_errmsg(ca), cbx_status_str(b.rc), cbx_context_errmsg(cb));
        return false;
    }
    /* A's gaps: before B's call (its steps alone), and over B's prefill */
    double gaps[JOIN_AT];
    int ng = 0;
    for (int i = 1; i < JOIN_AT; i++) gaps[ng++] = ra.t[i] - ra.t[i - 1];
    qsort(gaps, (size_t)ng, sizeof gaps[0], cmp_d);
    *step = gaps[ng / 2];
    double mx = 0;
    for (int i = JOIN_AT; i < ra.n && ra.t[i - 1] <= bf; i++)
        if (ra.t[i] - ra.t[i - 1] > mx) mx = ra.t[i] - ra.t[i - 1];
    *stall = mx;
    *b_first = bf - b.t0;
    return true;
}

int main(int argc, char **argv)
{
    const char *model = bench_take_model(&argc, argv);
    const char *voice = bench_take_opt(&argc, argv, "--voice");
    struct bench_opts opt;
    if (!bench_parse(argc, argv, &opt, 3)) return 2;
    if (!model) {
        fprintf(stderr, "bench_stall: needs --model DIR|GGUF (or CHATTERBOX_MODEL)\n");
        return 2;
    }
    char err[512];
    cbx_model_params mp = cbx_model_default_params();
    mp.backend = "cpu"; /* the scheduler batches cpu contexts */
    cbx_model *m = NULL;
    cbx_context *ca = NULL, *cb = NULL;
    cbx_voice *vb = NULL;
    int status = 1;
    if (cbx_model_load(model, &mp, &m, err, sizeof err) != CBX_OK) {
        fprintf(stderr, "bench_stall: %s\n", err);
        return 1;
    }
    if (cbx_context_create(m, &ca) != CBX_OK || cbx_context_create(m, &cb) != CBX_OK) {
        fprintf(stderr, "bench_stall: out of memory\n");
        goto done;
    }
    if (voice && cbx_voice_load(m, voice, &vb, err, sizeof err) != CBX_OK) {
        fprintf(stderr, "bench_stall: %s\n", err);
        goto done;
    }
    for (int c = 0; c < (vb ? 2 : 1); c++) {
        const char *name = c ? "cold" : "warm";
        double *st = calloc((size_t)opt.reps, sizeof *st), *sx = calloc((size_t)opt.reps, sizeof *sx),
               *bf = calloc((size_t)opt.reps, sizeof *bf), *ratio = calloc((size_t)opt.reps, sizeof *ratio);
        bool ok = st && sx && bf && ratio;
        /* one untimed join first: the built-in voice's prefix and the
         * arenas are made there */
        double w0, w1, w2;
        ok = ok && one(ca, cb, NULL, opt.threads, &w0, &w1, &w2);
        for (int r = 0; ok && r < opt.reps; r++) {
            /* cold: a fresh model copy of the voice each time would need a
             * reload; instead B's voice object is loaded anew, and its
             * prefix is new to the model's cache only on the first rep */
            ok = one(ca, cb, c ? vb : NULL, opt.threads, &st[r], &sx[r], &bf[r]);
            if (ok) ratio[r] = sx[r] / st[r];
            if (c) break; /* later reps would find the prefix cached */
        }
        const int n = c ? 1 : opt.reps;
        if (ok) {
            struct bench_stats s1 = bench_stats(st, n), s2 = bench_stats(sx, n), s3 = bench_stats(bf, n),
                               s4 = bench_stats(ratio, n);
            bench_emit1("stall_step", name, A_TOKENS, &opt, "s", s1.median, NULL, 0);
            bench_emit1("stall_max", name, A_TOKENS, &opt, "s", s2.median, "stall_step", s1.median);
            bench_emit1("stall_b_first", name, A_TOKENS, &opt, "s", s3.median, NULL, 0);
            fprintf(stderr,
                    "stall %s: A's step %.1f ms; while B joins, A's longest gap %.1f ms (%.1f steps); B's first "
                    "token after %.0f ms (%d rep%s)\n",
                    name, 1e3 * s1.median, 1e3 * s2.median, s4.median, 1e3 * s3.median, n, n == 1 ? "" : "s");
        }
        free(st);
        free(sx);
        free(bf);
        free(ratio);
        if (!ok) goto done;
    }
    status = 0;
done:
    cbx_voice_free(vb);
    cbx_context_free(ca);
    cbx_context_free(cb);
    cbx_model_free(m);
    return status;
}
