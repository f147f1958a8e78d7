/* test_sched.c - concurrent engine_synthesize calls decode T3 together
 * through the model's scheduler (pipeline/scheduler.h) and each gets
 * exactly the audio it gets alone.
 *
 * On the synthetic Turbo directory: four requests (different texts, seeds
 * and token caps; one streamed, so its S3Gen chunks run in its thread
 * while the scheduler keeps decoding; one cancelled from its progress
 * callback after a few tokens) are first run one after another on a
 * private pool (the path without the scheduler, as before it existed),
 * then one of them alone on a shared backend (through the scheduler,
 * batch of one), then all four at once from four threads, each with its
 * own shared-pool backend and engine_work, as cbx_contexts do. Checks:
 * every audio equal sample for sample (max |diff| printed), the same
 * speech-token counts, the cancelled request CBX_ERR_CANCELLED each time,
 * and the scheduler's steps carrying more than one row (batched). On the
 * backend of CBX_TEST_BACKEND (cpu by default, cuda on the GPU machine:
 * there every backend is a stream of its own, the private one decoding
 * with its graph, the shared ones batched on the scheduler's stream). */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"
#include "pipeline/engine.h"
#include "testutil.h"

#define N_REQ 4
#define CANCELLED 3 /* request index cancelled by its progress callback */

struct req {
    const char *text;
    uint64_t seed;
    int max_tokens;
    bool stream;
};

static const struct req reqs[N_REQ] = {
    {"Hello there, this is the first request.", 1, 40, false},
    {"A second voice speaks at the same time.", 2, 30, true},
    {"Third.", 3, 35, false},
    {"The fourth one is cancelled early on.", 4, 40, false},
};

struct out {
    float *pcm;
    int64_t n;
    int64_t n_speech;
    cbx_status rc;
    char err[ERR_MAX];
};

struct job {
    const struct engine_model *m;
    struct backend *be;
    struct engine_work *work;
    int i;
    struct out o;
};

static int cancel_progress(void *user, const struct engine_progress *p)
{
    (void)user;
    return p->stage == ENGINE_STAGE_T3 && p->tokens >= 5;
}

static void synth(struct job *j)
{
    const struct req *r = &reqs[j->i];
    struct engine_params p = engine_model_default_params(j->m);
    p.seed = r->seed;
    p.max_tokens = r->max_tokens;
    p.max_retries = 0;
    p.stream = r->stream;
    p.work = j->work;
    struct engine_stats st;
    j->o.rc = engine_synthesize(j->m, j->be, NULL, r->text, &p, NULL, j->i == CANCELLED ? cancel_progress : NULL,
                                NULL, &j->o.pcm, &j->o.n, &st, j->o.err);
    j->o.n_speech = st.n_speech_tokens;
}

static void *thread_main(void *arg)
{
    synth(arg);
    return NULL;
}

/* got == want: status, token count, samples exactly. */
static void same(const char *what, int i, const struct out *got, const struct out *want)
{
    if (i == CANCELLED) {
        CHECK(got->rc == CBX_ERR_CANCELLED, "%s %d: cancelled (%s: %s)", what, i, cbx_status_str(got->rc), got->err);
        return;
    }
    CHECK(got->rc == CBX_OK, "%s %d: %s", what, i, got->err);
    double md = got->n == want->n ? 0 : INFINITY;
    for (int64_t k = 0; k < got->n && k < want->n; k++) {
        double d = fabs((double)got->pcm[k] - (double)want->pcm[k]);
        if (d > md || d != d) md = d;
    }
    printf("%s %d: %lld samples (alone %lld), %lld speech tokens (alone %lld), max |diff| %g\n", what, i,
           (long long)got->n, (long long)want->n, (long long)got->n_speech, (long long)want->n_speech, md);
    CHECK(got->n == want->n && got->n_speech == want->n_speech && md == 0, "%s %d: the audio alone", what, i);
}

int main(void)
{
    char dir[4096], err[ERR_MAX] = "";
    snprintf(dir, sizeof dir, "%s/models/turbo", CBX_BINARY_DIR);
    struct engine_model *m = NULL;
    struct engine_load_params lp = engine_load_default_params();
    lp.backend = test_backend_name(); /* cpu, or cuda on the GPU machine */
    cbx_status rc = engine_model_load(dir, &lp, &m, err);
    CHECK(rc == CBX_OK, "load %s: %s", dir, err);
    if (rc != CBX_OK) return test_summary();
    const int nt = test_n_threads();

    /* alone, on a backend not made to share (a private pool; on the GPU
     * the recorded decode step): the scheduler is not used */
    struct job ref[N_REQ];
    struct backend *own = backend_create(lp.backend, nt, false, err);
    CHECK(own != NULL, "backend: %s", err);
    if (!own) return test_summary();
    for (int i = 0; i < N_REQ; i++) {
        ref[i] = (struct job){m, own, NULL, i, {0}};
        synth(&ref[i]);
        CHECK(i == CANCELLED ? ref[i].o.rc == CBX_ERR_CANCELLED : ref[i].o.rc == CBX_OK && ref[i].o.n > 0,
              "alone %d: %s", i, ref[i].o.err);
    }
    backend_free(own);
    int64_t steps, rows, max_rows;
    engine_batch_stats(m, &steps, &rows, &max_rows);
    CHECK(steps == 0, "a private pool does not use the scheduler (%lld steps)", (long long)steps);

    /* one request alone through the scheduler (a batch of one) */
    struct job one = {m, backend_create(lp.backend, nt, true, err), engine_work_create(), 0, {0}};
    CHECK(one.be && one.work, "backend");
    if (one.be && one.work) {
        synth(&one);
        same("scheduled alone", 0, &one.o, &ref[0].o);
    }
    engine_batch_stats(m, &steps, &rows, &max_rows);
    printf("scheduled alone: %lld steps, %lld rows, up to %lld per step\n", (long long)steps, (long long)rows,
           (long long)max_rows);
    CHECK(steps > 0 && max_rows == 1, "the call went through the scheduler");
    free(one.o.pcm);
    engine_work_free(one.work);
    backend_free(one.be);

    /* all at once from their own threads */
    struct job jobs[N_REQ];
    pthread_t th[N_REQ];
    bool started[N_REQ] = {0};
    for (int i = 0; i < N_REQ; i++) {
        jobs[i] = (struct job){m, backend_create(lp.backend, nt, true, err), engine_work_create(), i, {0}};
        CHECK(jobs[i].be && jobs[i].work, "backend %d", i);
    }
    const int64_t steps0 = steps, rows0 = rows;
    for (int i = 0; i < N_REQ; i++)
        if (jobs[i].be && jobs[i].work) started[i] = pthread_create(&th[i], NULL, thread_main, &jobs[i]) == 0;
    for (int i = 0; i < N_REQ; i++) {
        CHECK(started[i], "thread %d", i);
        if (!started[i]) continue;
        pthread_join(th[i], NULL);
        same("concurrent", i, &jobs[i].o, &ref[i].o);
    }
    engine_batch_stats(m, &steps, &rows, &max_rows);
    printf("concurrent: %lld steps, %.2f rows per step, up to %lld\n", (long long)(steps - steps0),
           steps > steps0 ? (double)(rows - rows0) / (double)(steps - steps0) : 0.0, (long long)max_rows);
    CHECK(max_rows >= 2, "concurrent calls were decoded in one batch (up to %lld rows)", (long long)max_rows);
    for (int i = 0; i < N_REQ; i++) {
        free(jobs[i].o.pcm);
        free(ref[i].o.pcm);
        engine_work_free(jobs[i].work);
        backend_free(jobs[i].be);
    }
    engine_model_free(m);
    return test_summary();
}
