/* cmd_serve.c - `chatterbox serve`: an OpenAI-compatible speech server
 * (libmicrohttpd, one thread per connection) on the public C API.
 *
 *   POST   /v1/audio/speech        text -> audio (wav, pcm, flac, mp3, opus),
 *                                  whole, streamed (chunked) or as SSE
 *   GET    /v1/audio/voices        built-in, OpenAI aliases, stored voices
 *   POST   /v1/audio/voices        multipart clip + name -> stored voice
 *   DELETE /v1/audio/voices/NAME
 *   GET    /v1/models, /health, /metrics (Prometheus text)
 *
 * Architecture: one cbx_model shared by --max-streams worker threads, each
 * with its own cbx_context; requests wait in a bounded FIFO (full: 429).
 * A connection thread parses and checks its request, queues a job and
 * waits on it; the worker's chunk callback encodes audio into the job's
 * byte queue, which the connection hands to the client as it comes.
 *
 * Invariants:
 *  1. A job is shared by its connection and (once queued) a worker; each
 *     holds a reference (job_unref frees at zero). Its byte queue, flags
 *     and result are guarded by job->mu.
 *  2. A job's cancel flag is set by the connection (client gone), the
 *     deadline check or a hard shutdown; the worker's abort callback
 *     (cbx_synth_params.abort_callback, at every speech token and S3Gen
 *     step) and chunk callback read it and return nonzero, so
 *     cbx_synthesize stops within one step.
 *  3. Stored voices are <voices>/<name>.voice with name in [A-Za-z0-9_-]
 *     (1..64), checked before any path is built: no name leaves the dir.
 *  4. Loaded voices are reference-counted; a deleted or replaced voice is
 *     freed when its last synthesis ends.
 *  5. SIGTERM/SIGINT: stop accepting (quiesce), let queued and running
 *     jobs finish for --grace seconds, then cancel the rest, exit 0. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <microhttpd.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "chatterbox.h"
#include "cli.h"
#include "default_model.h"
#include "core/backend.h"
#include "core/build_id.h"
#include "hf_download.h"
#include "io/audio.h"
#include "io/model_file.h"
#include "serve/encode.h"
#include "serve/multipart.h"
#include "serve/request.h"
#include "serve/wsola.h"
#include "voice/conds.h"
#include "voice/voice.h"

#define PROG "chatterbox serve"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: chatterbox serve [--model M] [options]\n"
            "\n"
            "An OpenAI-compatible speech server: POST /v1/audio/speech (wav, pcm,\n"
            "flac, mp3, opus; whole, chunked or SSE), voices at /v1/audio/voices,\n"
            "GET /v1/models, /health, /metrics. One line per request on stderr.\n"
            "\n"
            "  --model DIR|GGUF      model directory or converted .gguf (default\n"
            "                        $CHATTERBOX_MODEL, else the Turbo snapshot of\n"
            "                        `chatterbox download turbo`)\n"
            "  --host H              address to listen on (default 127.0.0.1)\n"
            "  --port N              TCP port (default 8000; 0: any free port)\n"
            "  --voices DIR          stored voices (<name>.voice), shared by every\n"
            "                        instance pointed at it; uploads need it\n"
            "  --api-key KEY         require 'Authorization: Bearer KEY' (default\n"
            "                        $CHATTERBOX_API_KEY; none: open)\n"
            "  --max-streams N       concurrent syntheses, one context each (default 4)\n"
            "  --queue N             requests waiting beyond those (default 16;\n"
            "                        more get 429 with Retry-After)\n"
            "  --threads N           CPU threads per synthesis (default: all)\n"
            "  --backend NAME        cpu, cuda, cuda:N or auto (default: cuda when built\n"
            "                        and a GPU is present, else cpu; 'info --backends')\n"
            "  --timeout S           per-request deadline in seconds, queueing\n"
            "                        included (default 300)\n"
            "  --max-input N         most characters of 'input' (default 4096)\n"
            "  --max-body BYTES      largest request body (default 26214400)\n"
            "  --grace S             on SIGTERM, seconds to let running requests\n"
            "                        finish before cancelling them (default 30)\n"
            "  --prefix-cache DIR    voice prefixes kept between runs (default\n"
            "                        $CHATTERBOX_PREFIX_CACHE, else the cache of `say`)\n"
            "  --no-prefix-cache     keep voice prefixes in memory only\n"
            "  -q, --quiet           no per-request log lines\n");
}

#define usage_error(...) cli_usage_error("serve", __VA_ARGS__)

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* ---- server state ------------------------------------------------------ */

struct voice_entry {
    char name[SERVE_NAME_MAX + 1];
    cbx_voice *v;
    time_t mtime;
    off_t size;
    int refs;   /* the cache's own reference + one per job; guarded by S.vmu */
    struct voice_entry *next;
};

enum { CANCEL_NONE, CANCEL_CLIENT, CANCEL_DEADLINE, CANCEL_SHUTDOWN };

struct job {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs;
    struct speech_req req;
    struct voice_entry *voice;  /* NULL: built-in */
    cbx_synth_params params;
    bool streaming;
    double t_accept, t_start, deadline;
    atomic_int cancel;
    /* byte queue [out_off, out_n) */
    uint8_t *out;
    size_t out_n, out_cap, out_off;
    bool started, done;
    struct api_error err;       /* err.http 0: success */
    double t_first;
    size_t samples;             /* model samples produced */
    struct job *next;
};

struct worker {
    pthread_t th;
    cbx_context *ctx;
    int id;
};

#define N_BUCKETS 9
static const double buckets[N_BUCKETS] = {0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30};

static struct server {
    /* configuration */
    const char *model_path, *voices_dir, *api_key, *host, *backend;
    int port, max_streams, queue_cap, threads, quiet;
    double timeout, grace;
    size_t max_input, max_body;
    /* model */
    cbx_model *model;
    const char *variant;
    char model_id[64];
    int rate;
    bool cfg_model, multilingual;
    /* queue */
    pthread_mutex_t qmu;
    pthread_cond_t qcv, idle_cv;
    struct job *qhead, *qtail;
    int n_queued, n_active;
    bool stop_workers;
    atomic_int stopping, hard_stop;
    struct worker *workers;
    /* voices */
    pthread_mutex_t vmu;
    struct voice_entry *voices;
    pthread_mutex_t create_mu;  /* voice creation: one at a time */
    struct model *vmodel;
    struct voice_models *vm;
    struct backend *vbe;
    /* metrics */
    pthread_mutex_t mmu;
    struct { int code; unsigned long long n; } by_code[32];
    int n_codes;
    double audio_seconds, gen_seconds, avg_job_seconds;
    unsigned long long jobs_done, jobs_cancelled, jobs_failed;
    unsigned long long hist[N_BUCKETS + 1];
    double hist_sum;
    unsigned long long hist_n;
} S;

static const char *const openai_voices[] = {"alloy", "ash", "ballad", "coral", "echo", "fable", "onyx",
                                            "nova", "sage", "shimmer", "verse"};
#define N_OPENAI_VOICES (sizeof openai_voices / sizeof openai_voices[0])

/* ---- metrics ----------------------------------------------------------- */

static void metric_request(int code)
{
    pthread_mutex_lock(&S.mmu);
    int i = 0;
    while (i < S.n_codes && S.by_code[i].code != code) i++;
    if (i == S.n_codes && S.n_codes < 32) S.by_code[S.n_codes++].code = code;
    if (i < 32) S.by_code[i].n++;
    pthread_mutex_unlock(&S.mmu);
}

static void metric_first_audio(double s)
{
    pthread_mutex_lock(&S.mmu);
    int b = 0;
    while (b < N_BUCKETS && s > buckets[b]) b++;
    S.hist[b]++;
    S.hist_sum += s;
    S.hist_n++;
    pthread_mutex_unlock(&S.mmu);
}

/* ---- jobs -------------------------------------------------------------- */

static void voice_release(struct voice_entry *e);

static void job_unref(struct job *j)
{
    if (!j) return;
    pthread_mutex_lock(&j->mu);
    const int r = --j->refs;
    pthread_mutex_unlock(&j->mu);
    if (r > 0) return;
    voice_release(j->voice);
    speech_req_free(&j->req);
    free(j->out);
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    free(j);
}

/* Append n bytes to the job's queue (worker side). 0 ok, -1 no memory. */
static int job_publish(struct job *j, const uint8_t *p, size_t n)
{
    if (n == 0) return 0;
    pthread_mutex_lock(&j->mu);
    if (j->out_off == j->out_n) j->out_off = j->out_n = 0;
    if (j->out_n + n > j->out_cap) {
        size_t c = j->out_cap ? j->out_cap : 65536;
        while (c < j->out_n + n) c *= 2;
        uint8_t *b = realloc(j->out, c);
        if (!b) {
            pthread_mutex_unlock(&j->mu);
            return -1;
        }
        j->out = b;
        j->out_cap = c;
    }
    memcpy(j->out + j->out_n, p, n);
    j->out_n += n;
    j->started = true;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    return 0;
}

static void job_finish(struct job *j, const struct api_error *e)
{
    pthread_mutex_lock(&j->mu);
    if (e) j->err = *e;
    j->done = true;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

struct run {
    struct job *j;
    struct enc enc;
    struct wsola ws;
    bool use_wsola;
    bool failed;
};

static int push_samples(struct run *r, const float *x, size_t n)
{
    if (r->use_wsola) {
        if (wsola_push(&r->ws, x, n)) return -1;
        wsola_take(&r->ws, &x, &n);
    }
    if (enc_write(&r->enc, x, n)) return -1;
    if (r->j->streaming) {
        const uint8_t *p;
        size_t k;
        enc_take(&r->enc, &p, &k);
        if (job_publish(r->j, p, k)) return -1;
    }
    return 0;
}

/* Whether job j is to stop: client gone, past its deadline, hard stop. */
static int job_aborted(void *user)
{
    struct job *j = user;
    if (S.hard_stop) atomic_store(&j->cancel, CANCEL_SHUTDOWN);
    if (now() > j->deadline) {
        int none = CANCEL_NONE;
        atomic_compare_exchange_strong(&j->cancel, &none, CANCEL_DEADLINE);
    }
    return atomic_load(&j->cancel) != CANCEL_NONE;
}

static int on_chunk(void *user, const float *samples, size_t n, int sample_rate)
{
    (void)sample_rate;
    struct run *r = user;
    struct job *j = r->j;
    if (job_aborted(j)) return 1;
    if (j->samples == 0 && n > 0) {
        j->t_first = now();
        metric_first_audio(j->t_first - j->t_accept);
    }
    j->samples += n;
    if (push_samples(r, samples, n)) {
        r->failed = true;
        return 1;
    }
    return 0;
}

static void run_job(struct worker *w, struct job *j)
{
    struct api_error e = {0};
    j->t_start = now();
    if (S.hard_stop) atomic_store(&j->cancel, CANCEL_SHUTDOWN);
    if (j->t_start > j->deadline) atomic_store(&j->cancel, CANCEL_DEADLINE);
    struct run r = {.j = j};
    char msg[256];
    cbx_status rc = CBX_OK;
    if (atomic_load(&j->cancel) != CANCEL_NONE) {
        rc = CBX_ERR_CANCELLED;
        goto done;
    }
    if (enc_open(&r.enc, j->req.format, S.rate, j->streaming, msg, sizeof msg)) {
        api_error_set(&e, 500, "server_error", NULL, NULL, "%s", msg);
        goto done;
    }
    if (j->req.speed != 1.0) {
        if (wsola_init(&r.ws, j->req.speed, S.rate)) {
            api_error_set(&e, 500, "server_error", NULL, NULL, "out of memory");
            goto done;
        }
        r.use_wsola = true;
    }
    j->params.abort_callback = job_aborted;
    j->params.abort_user = j;
    rc = cbx_synthesize(w->ctx, j->voice ? j->voice->v : NULL, j->req.input, &j->params, on_chunk, &r, NULL);
    if (rc == CBX_OK) {
        const float *x;
        size_t n;
        bool bad = false;
        if (r.use_wsola) {
            bad = wsola_flush(&r.ws) != 0;
            wsola_take(&r.ws, &x, &n);
            if (!bad) bad = enc_write(&r.enc, x, n) != 0;
        }
        if (!bad) bad = enc_close(&r.enc) != 0;
        const uint8_t *p;
        size_t k;
        enc_take(&r.enc, &p, &k);
        if (!bad) bad = job_publish(j, p, k) != 0;
        if (bad) api_error_set(&e, 500, "server_error", NULL, NULL, "cannot encode the audio as %s",
                               serve_format_name(j->req.format));
    }
done:
    if (rc != CBX_OK && !e.http) {
        const int c = atomic_load(&j->cancel);
        if (r.failed)
            api_error_set(&e, 500, "server_error", NULL, NULL, "cannot encode the audio as %s",
                          serve_format_name(j->req.format));
        else if (rc == CBX_ERR_CANCELLED && c == CANCEL_DEADLINE)
            api_error_set(&e, 504, "timeout", NULL, "timeout", "the request took longer than its deadline "
                          "of %g s", j->deadline - j->t_accept);
        else if (rc == CBX_ERR_CANCELLED && c == CANCEL_SHUTDOWN)
            api_error_set(&e, 503, "server_error", NULL, "shutting_down", "the server is shutting down");
        else if (rc == CBX_ERR_CANCELLED)
            api_error_set(&e, 499, "invalid_request_error", NULL, "client_closed", "the client went away");
        else if (rc == CBX_ERR_INVALID_ARG)
            api_error_set(&e, 400, "invalid_request_error", "input", "invalid_value", "%s",
                          cbx_context_errmsg(w->ctx));
        else
            api_error_set(&e, 500, "server_error", NULL, NULL, "synthesis failed: %s",
                          cbx_context_errmsg(w->ctx)[0] ? cbx_context_errmsg(w->ctx) : cbx_status_str(rc));
    }
    const double t = now();
    pthread_mutex_lock(&S.mmu);
    S.audio_seconds += (double)j->samples / S.rate;
    S.gen_seconds += t - j->t_start;
    if (e.http == 0) {
        S.jobs_done++;
        S.avg_job_seconds = S.jobs_done == 1 ? t - j->t_start : 0.8 * S.avg_job_seconds + 0.2 * (t - j->t_start);
    } else if (rc == CBX_ERR_CANCELLED) {
        S.jobs_cancelled++;
    } else {
        S.jobs_failed++;
    }
    pthread_mutex_unlock(&S.mmu);
    if (r.use_wsola) wsola_free(&r.ws);
    enc_free(&r.enc);
    job_finish(j, e.http ? &e : NULL);
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    for (;;) {
        pthread_mutex_lock(&S.qmu);
        while (!S.qhead && !S.stop_workers) pthread_cond_wait(&S.qcv, &S.qmu);
        struct job *j = S.qhead;
        if (!j) {
            pthread_mutex_unlock(&S.qmu);
            break;
        }
        S.qhead = j->next;
        if (!S.qhead) S.qtail = NULL;
        S.n_queued--;
        S.n_active++;
        pthread_mutex_unlock(&S.qmu);
        run_job(w, j);
        job_unref(j);
        pthread_mutex_lock(&S.qmu);
        S.n_active--;
        pthread_cond_broadcast(&S.idle_cv);
        pthread_mutex_unlock(&S.qmu);
    }
    return NULL;
}

/* ---- voices ------------------------------------------------------------ */

static void voice_release(struct voice_entry *e)
{
    if (!e) return;
    pthread_mutex_lock(&S.vmu);
    const int r = --e->refs;
    pthread_mutex_unlock(&S.vmu);
    if (r == 0) {
        cbx_voice_free(e->v);
        free(e);
    }
}

/* Drop name from the cache (the entry lives on while jobs use it). */
static void voice_forget(const char *name)
{
    pthread_mutex_lock(&S.vmu);
    struct voice_entry **pp = &S.voices, *e;
    while ((e = *pp) && strcmp(e->name, name)) pp = &e->next;
    if (e) *pp = e->next;
    pthread_mutex_unlock(&S.vmu);
    if (e) voice_release(e);
}

static bool is_openai_voice(const char *name)
{
    for (size_t i = 0; i < N_OPENAI_VOICES; i++)
        if (!strcmp(name, openai_voices[i])) return true;
    return false;
}

static void voice_path(const char *name, char *path, size_t n)
{
    snprintf(path, n, "%s/%s.voice", S.voices_dir, name);
}

/* The voice a request names: *out NULL for the built-in voice, else a
 * referenced entry (voice_release). 0 ok, else an HTTP status with e. */
static int voice_acquire(const char *name, struct voice_entry **out, struct api_error *e)
{
    *out = NULL;
    if (!strcmp(name, "default")) return 0;
    struct stat st;
    char path[4096];
    const bool stored = S.voices_dir && serve_name_valid(name) &&
                        (voice_path(name, path, sizeof path), stat(path, &st) == 0 && S_ISREG(st.st_mode));
    if (!stored) {
        if (is_openai_voice(name)) return 0;
        return api_error_set(e, 400, "invalid_request_error", "voice", "voice_not_found",
                             "voice '%s' does not exist (GET /v1/audio/voices lists them)", name);
    }
    pthread_mutex_lock(&S.vmu);
    struct voice_entry *v = S.voices;
    while (v && strcmp(v->name, name)) v = v->next;
    if (v && v->mtime == st.st_mtime && v->size == st.st_size) {
        v->refs++;
        *out = v;
        pthread_mutex_unlock(&S.vmu);
        return 0;
    }
    pthread_mutex_unlock(&S.vmu);
    /* load (outside the lock: ~ms), then publish, replacing a stale entry */
    struct voice_entry *n = calloc(1, sizeof *n);
    if (!n) return api_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
    char err[512];
    if (cbx_voice_load(S.model, path, &n->v, err, sizeof err) != CBX_OK) {
        free(n);
        return api_error_set(e, 500, "server_error", "voice", "voice_unreadable", "stored voice '%s': %s", name, err);
    }
    snprintf(n->name, sizeof n->name, "%s", name);
    n->mtime = st.st_mtime;
    n->size = st.st_size;
    n->refs = 2; /* the cache's and the caller's */
    struct voice_entry *drop[2] = {NULL, NULL};
    pthread_mutex_lock(&S.vmu);
    /* replace an entry of the same name (a stale file), keep at most 32:
     * the cache's hold on the oldest is dropped */
    struct voice_entry **pp = &S.voices;
    while (*pp && strcmp((*pp)->name, name)) pp = &(*pp)->next;
    if (*pp) {
        drop[0] = *pp;
        *pp = drop[0]->next;
    }
    n->next = S.voices;
    S.voices = n;
    int count = 0;
    for (pp = &S.voices; *pp; pp = &(*pp)->next)
        if (++count > 32) {
            drop[1] = *pp;
            *pp = drop[1]->next;
            break;
        }
    pthread_mutex_unlock(&S.vmu);
    voice_release(drop[0]);
    voice_release(drop[1]);
    *out = n;
    return 0;
}

/* ---- HTTP plumbing ----------------------------------------------------- */

struct rq {
    char method[8];
    char url[256];
    char peer[64];
    uint8_t *body;
    size_t n, cap;
    bool too_large;
    int status;
    size_t bytes;
    double t0;
    char note[512];
};

static enum MHD_Result send_body(struct MHD_Connection *c, struct rq *q, int status, const char *ctype,
                                 const void *data, size_t n, const char *extra_header, const char *extra_value)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(n, (void *)data, MHD_RESPMEM_MUST_COPY);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", ctype);
    if (extra_header) MHD_add_response_header(r, extra_header, extra_value);
    const enum MHD_Result res = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    q->status = status;
    q->bytes = n;
    return res;
}

static enum MHD_Result send_json(struct MHD_Connection *c, struct rq *q, int status, cJSON *json)
{
    char *s = json ? cJSON_PrintUnformatted(json) : NULL;
    cJSON_Delete(json);
    if (!s) return send_body(c, q, 500, "application/json", "{\"error\":{\"message\":\"out of memory\"}}", 37,
                             NULL, NULL);
    const enum MHD_Result r = send_body(c, q, status, "application/json", s, strlen(s), NULL, NULL);
    free(s);
    return r;
}

static enum MHD_Result send_error_hdr(struct MHD_Connection *c, struct rq *q, const struct api_error *e,
                                      const char *h, const char *v)
{
    char *s = api_error_json(e);
    if (!s) return MHD_NO;
    const enum MHD_Result r = send_body(c, q, e->http, "application/json", s, strlen(s), h, v);
    free(s);
    const size_t l = strlen(q->note);
    if (l + 1 < sizeof q->note) snprintf(q->note + l, sizeof q->note - l, "%s%.320s", l ? " " : "", e->message);
    return r;
}

static enum MHD_Result send_error(struct MHD_Connection *c, struct rq *q, const struct api_error *e)
{
    return send_error_hdr(c, q, e, NULL, NULL);
}

#define ERR(http, type, param, code, ...)                                       \
    do {                                                                        \
        struct api_error e_;                                                    \
        api_error_set(&e_, http, type, param, code, __VA_ARGS__);              \
        return send_error(c, q, &e_);                                           \
    } while (0)

/* Whether the peer of fd closed its end (a read would see end of file). */
static bool client_gone(int fd)
{
    if (fd < 0) return false;
    struct pollfd p = {.fd = fd, .events = POLLIN | POLLRDHUP};
    if (poll(&p, 1, 0) <= 0) return false;
    if (p.revents & (POLLHUP | POLLERR | POLLRDHUP)) return true;
    if (p.revents & POLLIN) {
        char b;
        const ssize_t k = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
        return k == 0;
    }
    return false;
}

static int conn_fd(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? ci->connect_fd : -1;
}

/* Wait (holding j->mu) until the job is done, or has bytes when
 * first_bytes, watching the client; false when the client went away. */
static bool wait_job(struct job *j, int fd, bool first_bytes)
{
    while (!j->done && !(first_bytes && j->out_n > j->out_off)) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 50 * 1000 * 1000;
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&j->cv, &j->mu, &ts);
        if (!j->done && client_gone(fd)) {
            int none = CANCEL_NONE;
            atomic_compare_exchange_strong(&j->cancel, &none, CANCEL_CLIENT);
            return false;
        }
    }
    return true;
}

/* ---- streaming responses ----------------------------------------------- */

struct stream {
    struct job *j;
    int fd;
    bool sse, done_sent;
    size_t *bytes;  /* the request's byte count (struct rq lives as long) */
};

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    struct stream *s = cls;
    struct job *j = s->j;
    pthread_mutex_lock(&j->mu);
    if (!wait_job(j, s->fd, true)) {
        pthread_mutex_unlock(&j->mu);
        return MHD_CONTENT_READER_END_WITH_ERROR;
    }
    ssize_t out;
    const size_t pending = j->out_n - j->out_off;
    if (pending > 0 && !s->sse) {
        const size_t k = pending < max ? pending : max;
        memcpy(buf, j->out + j->out_off, k);
        j->out_off += k;
        out = (ssize_t)k;
    } else if (pending > 0) {
        static const char pre[] = "data: {\"type\":\"speech.audio.delta\",\"audio\":\"";
        static const char post[] = "\"}\n\n";
        const size_t over = sizeof pre - 1 + sizeof post - 1 + 8;
        if (max < over + 8) {
            pthread_mutex_unlock(&j->mu);
            return 0; /* MHD calls again with more room */
        }
        size_t k = (max - over) / 4 * 3;
        if (k > pending) k = pending;
        if (k > 3 * 8192) k = 3 * 8192;
        size_t o = 0;
        memcpy(buf, pre, sizeof pre - 1);
        o += sizeof pre - 1;
        o += base64_encode(j->out + j->out_off, k, buf + o);
        memcpy(buf + o, post, sizeof post - 1);
        o += sizeof post - 1;
        j->out_off += k;
        out = (ssize_t)o;
    } else if (j->err.http && !s->sse) {
        out = MHD_CONTENT_READER_END_WITH_ERROR;
    } else if (s->sse && !s->done_sent) {
        int n;
        if (j->err.http) {
            char *ej = api_error_json(&j->err);
            n = snprintf(buf, max, "data: {\"type\":\"error\",%s\n\n", ej ? ej + 1 : "\"error\":{}}");
            free(ej);
        } else {
            n = snprintf(buf, max,
                         "data: {\"type\":\"speech.audio.done\",\"usage\":{\"input_tokens\":%zu,"
                         "\"output_tokens\":0,\"total_tokens\":%zu},\"audio_seconds\":%.3f}\n\n",
                         j->req.input_chars, j->req.input_chars,
                         (double)j->samples / S.rate);
        }
        if (n < 0 || (size_t)n >= max) {
            pthread_mutex_unlock(&j->mu);
            return 0;
        }
        s->done_sent = true;
        out = n;
    } else {
        out = MHD_CONTENT_READER_END_OF_STREAM;
    }
    pthread_mutex_unlock(&j->mu);
    if (out > 0) *s->bytes += (size_t)out;
    return out;
}

static void stream_free(void *cls)
{
    struct stream *s = cls;
    struct job *j = s->j;
    pthread_mutex_lock(&j->mu);
    if (!j->done) {
        int none = CANCEL_NONE;
        atomic_compare_exchange_strong(&j->cancel, &none, CANCEL_CLIENT);
    }
    pthread_mutex_unlock(&j->mu);
    job_unref(j);
    free(s);
}

/* ---- endpoints --------------------------------------------------------- */

static bool model_name_ok(const char *m)
{
    static const char *const names[] = {"chatterbox", "tts-1", "tts-1-hd", "gpt-4o-mini-tts"};
    if (!m[0] || !strcmp(m, S.model_id)) return true;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(m, names[i])) return true;
    return false;
}

static enum MHD_Result speech(struct MHD_Connection *c, struct rq *q)
{
    struct api_error e;
    struct job *j = calloc(1, sizeof *j);
    if (!j) ERR(500, "server_error", NULL, NULL, "out of memory");
    if (speech_req_parse((const char *)q->body, q->n, S.max_input, &j->req, &e)) {
        free(j);
        return send_error(c, q, &e);
    }
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    j->refs = 1;
    const struct speech_req *r = &j->req;
    snprintf(q->note, sizeof q->note, "voice=%s format=%s%s chars=%zu", r->voice, serve_format_name(r->format),
             r->stream == SERVE_STREAM_SSE ? " sse" : r->stream == SERVE_STREAM_AUDIO ? " stream" : "",
             r->input_chars);
    int st = 0;
    const unsigned llama_only = REQ_MIN_P | REQ_CFG | REQ_EXAGGERATION;
    if (!model_name_ok(r->model))
        st = api_error_set(&e, 400, "invalid_request_error", "model", "model_not_found",
                           "model '%s' is not served here (GET /v1/models)", r->model);
    else if (!S.cfg_model && (r->set & llama_only))
        st = api_error_set(&e, 400, "invalid_request_error",
                           r->set & REQ_MIN_P ? "min_p" : r->set & REQ_CFG ? "cfg_weight" : "exaggeration",
                           "unsupported_parameter", "'%s' is not an option of the %s model (English and multilingual only)",
                           r->set & REQ_MIN_P ? "min_p" : r->set & REQ_CFG ? "cfg_weight" : "exaggeration", S.variant);
    else if ((r->set & REQ_LANGUAGE) && !S.multilingual)
        st = api_error_set(&e, 400, "invalid_request_error", "language", "unsupported_parameter",
                           "'language': the %s model speaks one language (only the multilingual models take one)",
                           S.variant);
    else if (!enc_supported(r->format))
        st = api_error_set(&e, 400, "invalid_request_error", "response_format", "unsupported_value",
                           "response_format '%s' is not available in this build's libsndfile",
                           serve_format_name(r->format));
    if (!st) st = voice_acquire(r->voice, &j->voice, &e);
    if (st) {
        job_unref(j);
        return send_error(c, q, &e);
    }
    cbx_synth_params p = cbx_synth_default_params_for(S.model);
    if (r->set & REQ_SEED) p.seed = r->seed;
    if (r->set & REQ_TEMPERATURE) p.temperature = r->temperature;
    if (r->set & REQ_TOP_K) p.top_k = r->top_k;
    if (r->set & REQ_TOP_P) p.top_p = r->top_p;
    if (r->set & REQ_MIN_P) p.min_p = r->min_p;
    if (r->set & REQ_REPETITION) p.repetition_penalty = r->repetition_penalty;
    if (r->set & REQ_MAX_TOKENS) p.max_tokens = r->max_tokens;
    if (r->set & REQ_EXAGGERATION) p.exaggeration = r->exaggeration;
    if (r->set & REQ_CFG) p.cfg_weight = r->cfg_weight;
    p.language = (r->set & REQ_LANGUAGE) ? r->language : S.multilingual ? "en" : NULL;
    p.n_threads = S.threads;
    j->streaming = r->stream != SERVE_STREAM_NONE;
    p.stream = j->streaming;
    j->params = p;
    j->t_accept = now();
    j->deadline = j->t_accept + ((r->set & REQ_TIMEOUT) && r->timeout < S.timeout ? r->timeout : S.timeout);
    /* queue: room for max_streams running plus queue_cap waiting */
    pthread_mutex_lock(&S.qmu);
    if (S.stopping) {
        pthread_mutex_unlock(&S.qmu);
        job_unref(j);
        ERR(503, "server_error", NULL, "shutting_down", "the server is shutting down");
    }
    if (S.n_queued + S.n_active >= S.max_streams + S.queue_cap) {
        const int waiting = S.n_queued;
        pthread_mutex_unlock(&S.qmu);
        pthread_mutex_lock(&S.mmu);
        double avg = S.avg_job_seconds > 0 ? S.avg_job_seconds : 5;
        pthread_mutex_unlock(&S.mmu);
        int after = (int)ceil(avg * (waiting + 1) / S.max_streams);
        after = after < 1 ? 1 : after > 120 ? 120 : after;
        char v[16];
        snprintf(v, sizeof v, "%d", after);
        job_unref(j);
        api_error_set(&e, 429, "rate_limit_error", NULL, "rate_limit_exceeded",
                      "the server is busy (%d running, %d waiting); retry after %d s", S.max_streams, waiting, after);
        return send_error_hdr(c, q, &e, "Retry-After", v);
    }
    j->refs++; /* the worker's */
    if (S.qtail) S.qtail->next = j;
    else S.qhead = j;
    S.qtail = j;
    S.n_queued++;
    pthread_cond_signal(&S.qcv);
    pthread_mutex_unlock(&S.qmu);

    /* r lives in the job: what is needed after job_unref is copied now */
    const enum serve_format fmt = r->format;
    const bool sse = r->stream == SERVE_STREAM_SSE;
    const int fd = conn_fd(c);
    pthread_mutex_lock(&j->mu);
    const bool here = wait_job(j, fd, j->streaming);
    if (!here) {
        pthread_mutex_unlock(&j->mu);
        job_unref(j);
        snprintf(q->note + strlen(q->note), sizeof q->note - strlen(q->note), " client gone");
        q->status = 499;
        return MHD_NO;
    }
    if (j->err.http && j->out_n == j->out_off) {
        e = j->err;
        pthread_mutex_unlock(&j->mu);
        job_unref(j);
        if (e.http == 499) {
            q->status = 499;
            return MHD_NO;
        }
        return send_error(c, q, &e);
    }
    if (!j->streaming) {
        struct MHD_Response *resp =
            MHD_create_response_from_buffer(j->out_n - j->out_off, j->out + j->out_off, MHD_RESPMEM_MUST_COPY);
        q->bytes = j->out_n - j->out_off;
        pthread_mutex_unlock(&j->mu);
        job_unref(j);
        if (!resp) return MHD_NO;
        MHD_add_response_header(resp, "Content-Type", serve_format_mime(fmt));
        q->status = 200;
        const enum MHD_Result res = MHD_queue_response(c, 200, resp);
        MHD_destroy_response(resp);
        return res;
    }
    pthread_mutex_unlock(&j->mu);
    struct stream *s = calloc(1, sizeof *s);
    if (!s) {
        job_unref(j);
        return MHD_NO;
    }
    s->j = j; /* the connection's reference moves to the stream */
    s->fd = fd;
    s->sse = sse;
    s->bytes = &q->bytes;
    struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 32 * 1024, stream_read, s,
                                                                  stream_free);
    if (!resp) {
        stream_free(s);
        return MHD_NO;
    }
    MHD_add_response_header(resp, "Content-Type", sse ? "text/event-stream" : serve_format_mime(fmt));
    MHD_add_response_header(resp, "Cache-Control", "no-cache");
    MHD_add_response_header(resp, "X-Accel-Buffering", "no");
    q->status = 200;
    const enum MHD_Result res = MHD_queue_response(c, 200, resp);
    MHD_destroy_response(resp);
    return res;
}

/* An OpenAI list, {"object":"list","data":[]}, with *data its array; NULL
 * when out of memory. */
static cJSON *list_object(cJSON **data)
{
    cJSON *root = cJSON_CreateObject();
    *data = root ? cJSON_AddArrayToObject(root, "data") : NULL;
    if (!*data || !cJSON_AddStringToObject(root, "object", "list")) {
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

static enum MHD_Result models(struct MHD_Connection *c, struct rq *q)
{
    cJSON *data = NULL, *root = list_object(&data);
    if (!root) ERR(500, "server_error", NULL, NULL, "out of memory");
    const char *ids[] = {S.model_id, "tts-1", "tts-1-hd", "gpt-4o-mini-tts"};
    for (size_t i = 0; i < 4; i++) {
        cJSON *m = cJSON_CreateObject();
        if (!m) break;
        cJSON_AddStringToObject(m, "id", ids[i]);
        cJSON_AddStringToObject(m, "object", "model");
        cJSON_AddNumberToObject(m, "created", 0);
        cJSON_AddStringToObject(m, "owned_by", "chatterbox");
        if (i > 0) cJSON_AddStringToObject(m, "alias_of", S.model_id);
        cJSON_AddItemToArray(data, m);
    }
    return send_json(c, q, 200, root);
}

static enum MHD_Result health(struct MHD_Connection *c, struct rq *q)
{
    cJSON *root = cJSON_CreateObject();
    if (!root) ERR(500, "server_error", NULL, NULL, "out of memory");
    pthread_mutex_lock(&S.qmu);
    const int queued = S.n_queued, active = S.n_active;
    pthread_mutex_unlock(&S.qmu);
    cJSON_AddStringToObject(root, "status", S.stopping ? "stopping" : "ok");
    cJSON_AddStringToObject(root, "model", S.model_id);
    cJSON_AddStringToObject(root, "version", cbx_version());
    cJSON_AddNumberToObject(root, "active_streams", active);
    cJSON_AddNumberToObject(root, "queue_depth", queued);
    cJSON_AddNumberToObject(root, "max_streams", S.max_streams);
    return send_json(c, q, S.stopping ? 503 : 200, root);
}

static enum MHD_Result metrics(struct MHD_Connection *c, struct rq *q)
{
    size_t cap = 8192, n = 0;
    char *b = malloc(cap);
    if (!b) ERR(500, "server_error", NULL, NULL, "out of memory");
#define OUT(...) do { int k_ = snprintf(b + n, cap - n, __VA_ARGS__); if (k_ > 0) n += (size_t)k_ < cap - n ? (size_t)k_ : cap - n - 1; } while (0)
    pthread_mutex_lock(&S.qmu);
    const int queued = S.n_queued, active = S.n_active;
    pthread_mutex_unlock(&S.qmu);
    pthread_mutex_lock(&S.mmu);
    OUT("# HELP chatterbox_requests_total HTTP requests answered, by status code.\n"
        "# TYPE chatterbox_requests_total counter\n");
    for (int i = 0; i < S.n_codes; i++)
        OUT("chatterbox_requests_total{code=\"%d\"} %llu\n", S.by_code[i].code, S.by_code[i].n);
    OUT("# HELP chatterbox_queue_depth Speech requests waiting for a worker.\n"
        "# TYPE chatterbox_queue_depth gauge\nchatterbox_queue_depth %d\n", queued);
    OUT("# HELP chatterbox_active_streams Speech requests being synthesized.\n"
        "# TYPE chatterbox_active_streams gauge\nchatterbox_active_streams %d\n", active);
    OUT("# HELP chatterbox_max_streams Configured concurrent syntheses.\n"
        "# TYPE chatterbox_max_streams gauge\nchatterbox_max_streams %d\n", S.max_streams);
    OUT("# HELP chatterbox_audio_seconds_total Seconds of audio synthesized.\n"
        "# TYPE chatterbox_audio_seconds_total counter\nchatterbox_audio_seconds_total %.3f\n", S.audio_seconds);
    OUT("# HELP chatterbox_synthesis_seconds_total Wall seconds workers spent synthesizing.\n"
        "# TYPE chatterbox_synthesis_seconds_total counter\nchatterbox_synthesis_seconds_total %.3f\n",
        S.gen_seconds);
    OUT("# HELP chatterbox_jobs_total Speech jobs by outcome.\n# TYPE chatterbox_jobs_total counter\n"
        "chatterbox_jobs_total{outcome=\"ok\"} %llu\nchatterbox_jobs_total{outcome=\"cancelled\"} %llu\n"
        "chatterbox_jobs_total{outcome=\"failed\"} %llu\n", S.jobs_done, S.jobs_cancelled, S.jobs_failed);
    cbx_model_stats ms;
    if (cbx_model_get_stats(S.model, &ms) == CBX_OK) {
        OUT("# HELP chatterbox_t3_steps_total Batched T3 decode steps (all running requests in one step).\n"
            "# TYPE chatterbox_t3_steps_total counter\nchatterbox_t3_steps_total %lld\n", (long long)ms.t3_steps);
        OUT("# HELP chatterbox_t3_tokens_total T3 rows decoded (speech tokens; a CFG pair decodes two rows).\n"
            "# TYPE chatterbox_t3_tokens_total counter\nchatterbox_t3_tokens_total %lld\n", (long long)ms.t3_rows);
        OUT("# HELP chatterbox_t3_batch_rows_max The most rows in one T3 step so far.\n"
            "# TYPE chatterbox_t3_batch_rows_max gauge\nchatterbox_t3_batch_rows_max %lld\n",
            (long long)ms.t3_max_rows);
    }
    OUT("# HELP chatterbox_first_audio_seconds Time from accepting a speech request to its first audio.\n"
        "# TYPE chatterbox_first_audio_seconds histogram\n");
    unsigned long long cum = 0;
    for (int i = 0; i < N_BUCKETS; i++) {
        cum += S.hist[i];
        OUT("chatterbox_first_audio_seconds_bucket{le=\"%g\"} %llu\n", buckets[i], cum);
    }
    cum += S.hist[N_BUCKETS];
    OUT("chatterbox_first_audio_seconds_bucket{le=\"+Inf\"} %llu\n", cum);
    OUT("chatterbox_first_audio_seconds_sum %.6f\nchatterbox_first_audio_seconds_count %llu\n", S.hist_sum, S.hist_n);
    pthread_mutex_unlock(&S.mmu);
#undef OUT
    const enum MHD_Result r = send_body(c, q, 200, "text/plain; version=0.0.4", b, n, NULL, NULL);
    free(b);
    return r;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static enum MHD_Result voices_list(struct MHD_Connection *c, struct rq *q)
{
    cJSON *data = NULL, *root = list_object(&data);
    if (!root) ERR(500, "server_error", NULL, NULL, "out of memory");
    char *names[1024];
    size_t nn = 0;
    if (S.voices_dir) {
        DIR *d = opendir(S.voices_dir);
        struct dirent *de;
        while (d && (de = readdir(d)) && nn < 1024) {
            const size_t l = strlen(de->d_name);
            if (l <= 6 || strcmp(de->d_name + l - 6, ".voice")) continue;
            char nm[SERVE_NAME_MAX + 8];
            if (l - 6 > SERVE_NAME_MAX) continue;
            memcpy(nm, de->d_name, l - 6);
            nm[l - 6] = 0;
            if (!serve_name_valid(nm) || !(names[nn] = strdup(nm))) continue;
            nn++;
        }
        if (d) closedir(d);
        qsort(names, nn, sizeof names[0], cmp_str);
    }
    cJSON *v = cJSON_CreateObject();
    if (v) {
        cJSON_AddStringToObject(v, "id", "default");
        cJSON_AddStringToObject(v, "object", "voice");
        cJSON_AddStringToObject(v, "type", "builtin");
        cJSON_AddItemToArray(data, v);
    }
    for (size_t i = 0; i < N_OPENAI_VOICES; i++) {
        bool stored = false;
        for (size_t k = 0; k < nn; k++) stored |= !strcmp(names[k], openai_voices[i]);
        if (stored || !(v = cJSON_CreateObject())) continue;
        cJSON_AddStringToObject(v, "id", openai_voices[i]);
        cJSON_AddStringToObject(v, "object", "voice");
        cJSON_AddStringToObject(v, "type", "alias");
        cJSON_AddStringToObject(v, "alias_of", "default");
        cJSON_AddItemToArray(data, v);
    }
    for (size_t k = 0; k < nn; k++) {
        if ((v = cJSON_CreateObject())) {
            cJSON_AddStringToObject(v, "id", names[k]);
            cJSON_AddStringToObject(v, "object", "voice");
            cJSON_AddStringToObject(v, "type", "stored");
            cJSON_AddItemToArray(data, v);
        }
        free(names[k]);
    }
    return send_json(c, q, 200, root);
}

/* Lazily: the model's voice networks (a second, read-only mapping of the
 * model file) and a CPU backend for them. Call with S.create_mu held. */
static cbx_status voice_nets(char *err)
{
    if (S.vm) return CBX_OK;
    cbx_status rc = model_open(S.model_path, &S.vmodel, err);
    if (rc == CBX_OK) rc = voice_models_load_model(S.vmodel, &S.vm, err);
    if (rc == CBX_OK && !(S.vbe = backend_cpu_create(S.threads)))
        rc = err_setf(err, CBX_ERR_NOMEM, "cannot start %d threads", S.threads);
    if (rc != CBX_OK) {
        voice_models_free(S.vm);
        S.vm = NULL;
        model_close(S.vmodel);
        S.vmodel = NULL;
    }
    return rc;
}

static enum MHD_Result voices_create(struct MHD_Connection *c, struct rq *q)
{
    if (!S.voices_dir)
        ERR(400, "invalid_request_error", NULL, "voices_disabled",
            "this server stores no voices: start it with --voices DIR");
    char boundary[80], msg[ERR_MAX];
    const char *ct = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type");
    if (multipart_boundary(ct, boundary, sizeof boundary, msg, sizeof msg))
        ERR(400, "invalid_request_error", NULL, "invalid_body", "%s", msg);
    struct mp_part parts[MULTIPART_MAX_PARTS];
    int np;
    if (multipart_parse(q->body, q->n, boundary, parts, &np, msg, sizeof msg))
        ERR(400, "invalid_request_error", NULL, "invalid_body", "%s", msg);
    const struct mp_part *pn = multipart_find(parts, np, "name");
    const struct mp_part *pf = multipart_find(parts, np, "file");
    if (!pf) pf = multipart_find(parts, np, "audio_sample");
    if (!pn) ERR(400, "invalid_request_error", "name", "missing_required_parameter", "form field 'name' is required");
    if (!pf || pf->len == 0)
        ERR(400, "invalid_request_error", "file", "missing_required_parameter",
            "form field 'file' (an audio clip of 5-10 s of clean speech) is required");
    char name[SERVE_NAME_MAX + 1];
    size_t nl = pn->len;
    while (nl && (pn->data[nl - 1] == ' ' || pn->data[nl - 1] == '\n' || pn->data[nl - 1] == '\r')) nl--;
    if (nl == 0 || nl > SERVE_NAME_MAX || memchr(pn->data, 0, nl))
        ERR(400, "invalid_request_error", "name", "invalid_value",
            "'name' must be 1 to %d letters, digits, '_' or '-'", SERVE_NAME_MAX);
    memcpy(name, pn->data, nl);
    name[nl] = 0;
    if (!serve_name_valid(name))
        ERR(400, "invalid_request_error", "name", "invalid_value",
            "'name' must be 1 to %d letters, digits, '_' or '-'", SERVE_NAME_MAX);
    if (!strcmp(name, "default")) ERR(400, "invalid_request_error", "name", "invalid_value", "'default' is the built-in voice");
    char path[4096];
    voice_path(name, path, sizeof path);
    struct audio a = {0};
    cbx_status rc = io_audio_read_mem(pf->data, pf->len, pf->filename[0] ? pf->filename : "upload", 0, &a, msg);
    if (rc != CBX_OK) ERR(400, "invalid_request_error", "file", "invalid_audio", "%s", msg);
    snprintf(q->note, sizeof q->note, "voice=%s %.2f s at %d Hz", name, (double)a.n / a.sample_rate, a.sample_rate);
    pthread_mutex_lock(&S.create_mu);
    struct stat st;
    if (stat(path, &st) == 0) {
        pthread_mutex_unlock(&S.create_mu);
        io_audio_free(&a);
        ERR(409, "invalid_request_error", "name", "voice_exists",
            "voice '%s' exists; DELETE /v1/audio/voices/%s first", name, name);
    }
    struct conds cd = {0};
    struct voice_report rep;
    struct voice_params vp = voice_default_params();
    const double t0 = now();
    rc = voice_nets(msg);
    if (rc != CBX_OK) {
        pthread_mutex_unlock(&S.create_mu);
        io_audio_free(&a);
        ERR(500, "server_error", NULL, "voice_networks", "cannot load the voice networks of %s: %s", S.model_path, msg);
    }
    rc = voice_prepare(S.vm, S.vbe, &a, NULL, &vp, &cd, &rep, msg);
    if (rc == CBX_OK) {
        struct conds_meta m;
        memset(&m, 0, sizeof m);
        snprintf(m.variant, sizeof m.variant, "%s", S.variant);
        snprintf(m.source, sizeof m.source, "%s", pf->filename[0] ? pf->filename : "upload");
        m.sample_rate = (uint32_t)a.sample_rate;
        m.duration = (double)a.n / a.sample_rate;
        m.loudness_norm = rep.loudness_applied;
        m.loudness_lufs = rep.loudness_lufs;
        m.gain_db = rep.gain_db;
        snprintf(m.tool, sizeof m.tool, "chatterbox serve %s", cbx_version());
        rc = conds_write_voice(path, &cd, &m, msg);
        if (rc != CBX_OK) {
            pthread_mutex_unlock(&S.create_mu);
            conds_free(&cd);
            io_audio_free(&a);
            ERR(500, "server_error", NULL, "voice_write", "%s", msg);
        }
    }
    pthread_mutex_unlock(&S.create_mu);
    const double dur = (double)a.n / a.sample_rate;
    io_audio_free(&a);
    if (rc != CBX_OK) {
        conds_free(&cd);
        ERR(400, "invalid_request_error", "file", "invalid_audio", "%s", strncmp(msg, "voice: ", 7) ? msg : msg + 7);
    }
    const long long n_prompt = (long long)cd.n_cond_prompt;
    conds_free(&cd);
    /* load it and prepare its T3 prefix now, so its first request starts at once */
    struct voice_entry *ve = NULL;
    struct api_error e;
    if (voice_acquire(name, &ve, &e)) return send_error(c, q, &e);
    cbx_context *ctx = NULL;
    if (cbx_context_create(S.model, &ctx) == CBX_OK) {
        if (cbx_prepare_voice(ctx, ve->v, S.threads) != CBX_OK)
            fprintf(stderr, "serve: voice %s: prefix not prepared: %s\n", name, cbx_context_errmsg(ctx));
        cbx_context_free(ctx);
    }
    voice_release(ve);
    cJSON *root = cJSON_CreateObject();
    if (root) {
        cJSON_AddStringToObject(root, "id", name);
        cJSON_AddStringToObject(root, "object", "voice");
        cJSON_AddStringToObject(root, "type", "stored");
        cJSON_AddNumberToObject(root, "duration", dur);
        cJSON_AddNumberToObject(root, "prompt_tokens", (double)n_prompt);
        cJSON_AddNumberToObject(root, "seconds", now() - t0);
    }
    return send_json(c, q, 201, root);
}

static enum MHD_Result voices_delete(struct MHD_Connection *c, struct rq *q, const char *name)
{
    if (!serve_name_valid(name))
        ERR(400, "invalid_request_error", "name", "invalid_value",
            "a voice name is 1 to %d letters, digits, '_' or '-'", SERVE_NAME_MAX);
    if (!S.voices_dir) ERR(404, "invalid_request_error", "name", "voice_not_found", "voice '%s' is not stored here", name);
    char path[4096];
    voice_path(name, path, sizeof path);
    if (unlink(path) != 0) {
        if (errno == ENOENT)
            ERR(404, "invalid_request_error", "name", "voice_not_found", "voice '%s' is not stored here", name);
        ERR(500, "server_error", NULL, NULL, "cannot delete voice '%s': %s", name, strerror(errno));
    }
    voice_forget(name);
    cJSON *root = cJSON_CreateObject();
    if (root) {
        cJSON_AddStringToObject(root, "id", name);
        cJSON_AddStringToObject(root, "object", "voice.deleted");
        cJSON_AddTrueToObject(root, "deleted");
    }
    return send_json(c, q, 200, root);
}

static bool auth_ok(struct MHD_Connection *c)
{
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (!h || strncasecmp(h, "Bearer ", 7)) return false;
    h += 7;
    while (*h == ' ') h++;
    const size_t a = strlen(h), b = strlen(S.api_key);
    unsigned diff = (unsigned)(a ^ b);
    for (size_t i = 0; i < b; i++) diff |= (unsigned)(unsigned char)S.api_key[i] ^ (unsigned)(unsigned char)h[i < a ? i : 0];
    return diff == 0;
}

static enum MHD_Result method_not_allowed(struct MHD_Connection *c, struct rq *q, const char *allow)
{
    struct api_error e;
    api_error_set(&e, 405, "invalid_request_error", NULL, "method_not_allowed", "%s %s: use %s", q->method, q->url,
                  allow);
    return send_error_hdr(c, q, &e, "Allow", allow);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls)
{
    (void)cls;
    (void)version;
    struct rq *q = *con_cls;
    if (!q) {
        if (!(q = calloc(1, sizeof *q))) return MHD_NO;
        *con_cls = q;
        q->t0 = now();
        snprintf(q->method, sizeof q->method, "%s", method);
        snprintf(q->url, sizeof q->url, "%s", url);
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        if (ci && ci->client_addr) {
            const struct sockaddr *sa = ci->client_addr;
            if (sa->sa_family == AF_INET)
                inet_ntop(AF_INET, &((const struct sockaddr_in *)(const void *)sa)->sin_addr, q->peer, sizeof q->peer);
            else if (sa->sa_family == AF_INET6)
                inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr, q->peer, sizeof q->peer);
        }
        if (!q->peer[0]) snprintf(q->peer, sizeof q->peer, "-");
        if (S.api_key && strcmp(url, "/health") && !auth_ok(c))
            ERR(401, "invalid_request_error", NULL, "invalid_api_key",
                "missing or wrong API key: send 'Authorization: Bearer KEY'");
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
        if (cl && strtoull(cl, NULL, 10) > S.max_body)
            ERR(413, "invalid_request_error", NULL, "request_too_large",
                "the body has %s bytes; at most %zu are accepted", cl, S.max_body);
        return MHD_YES;
    }
    if (*upload_size) {
        if (!q->too_large) {
            if (q->n + *upload_size > S.max_body) {
                q->too_large = true;
            } else {
                if (q->n + *upload_size > q->cap) {
                    size_t cap = q->cap ? q->cap : 4096;
                    while (cap < q->n + *upload_size) cap *= 2;
                    uint8_t *b = realloc(q->body, cap);
                    if (!b) return MHD_NO;
                    q->body = b;
                    q->cap = cap;
                }
                memcpy(q->body + q->n, upload, *upload_size);
                q->n += *upload_size;
            }
        }
        *upload_size = 0;
        return MHD_YES;
    }
    if (q->too_large)
        ERR(413, "invalid_request_error", NULL, "request_too_large", "the body is larger than %zu bytes", S.max_body);
    const bool get = !strcmp(method, "GET") || !strcmp(method, "HEAD"), post = !strcmp(method, "POST");
    if (!strcmp(url, "/v1/audio/speech") || !strcmp(url, "/audio/speech")) {
        if (!post) return method_not_allowed(c, q, "POST");
        return speech(c, q);
    }
    if (!strcmp(url, "/v1/audio/voices") || !strcmp(url, "/audio/voices")) {
        if (get) return voices_list(c, q);
        if (post) return voices_create(c, q);
        return method_not_allowed(c, q, "GET, POST");
    }
    const char *vp = !strncmp(url, "/v1/audio/voices/", 17) ? url + 17 : NULL;
    if (vp) {
        if (strcmp(method, "DELETE")) return method_not_allowed(c, q, "DELETE");
        return voices_delete(c, q, vp);
    }
    if (!strcmp(url, "/v1/models") || !strcmp(url, "/models")) {
        if (!get) return method_not_allowed(c, q, "GET");
        return models(c, q);
    }
    if (!strcmp(url, "/health")) {
        if (!get) return method_not_allowed(c, q, "GET");
        return health(c, q);
    }
    if (!strcmp(url, "/metrics")) {
        if (!get) return method_not_allowed(c, q, "GET");
        return metrics(c, q);
    }
    ERR(404, "invalid_request_error", NULL, "not_found", "no endpoint %s %s", method, url);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe)
{
    (void)cls;
    (void)c;
    struct rq *q = *con_cls;
    if (!q) return;
    *con_cls = NULL;
    int status = q->status ? q->status : 499;
    if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK && status == 200) status = 499; /* cut off mid-stream */
    metric_request(status);
    if (!S.quiet)
        fprintf(stderr, "serve: %s %s %s %d %.3f s %zu B%s%s\n", q->peer, q->method, q->url, status, now() - q->t0,
                q->bytes, q->note[0] ? " " : "", q->note);
    free(q->body);
    free(q);
}

/* ---- main -------------------------------------------------------------- */

static int sig_pipe[2] = {-1, -1};

static void on_signal(int sig)
{
    const char b = (char)sig;
    if (write(sig_pipe[1], &b, 1) < 0) { /* nothing to do in a handler */ }
}

static bool parse_count(const char *opt, const char *v, long long lo, long long hi, int *out)
{
    long long x;
    if (!cli_parse_int("serve", opt, v, lo, hi, &x)) return false;
    *out = (int)x;
    return true;
}

int cmd_serve(int argc, char **argv)
{
    S.host = "127.0.0.1";
    S.port = 8000;
    S.max_streams = 4;
    S.queue_cap = 16;
    S.timeout = 300;
    S.grace = 30;
    S.max_input = 4096;
    S.max_body = 25u << 20;
    const char *prefix_cache = NULL;
    int no_prefix_cache = 0;
    double x;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        if (!strcmp(o, "--help") || !strcmp(o, "-h")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(o, "--quiet") || !strcmp(o, "-q")) { S.quiet = 1; continue; }
        if (!strcmp(o, "--no-prefix-cache")) { no_prefix_cache = 1; continue; }
        static const char *const with_value[] = {"--model", "--host", "--port", "--voices", "--api-key",
                                                 "--max-streams", "--queue", "--threads", "-t", "--backend", "--timeout",
                                                 "--max-input", "--max-body", "--grace", "--prefix-cache"};
        int known = 0;
        for (size_t k = 0; k < sizeof with_value / sizeof with_value[0]; k++) known |= !strcmp(o, with_value[k]);
        if (!known) return usage_error(o[0] == '-' ? "unknown option '%s'" : "unexpected argument '%s'", o);
        if (i + 1 >= argc) return usage_error("%s needs a value", o);
        const char *v = argv[++i];
        if (!strcmp(o, "--model")) S.model_path = v;
        else if (!strcmp(o, "--host")) S.host = v;
        else if (!strcmp(o, "--port")) { if (!parse_count(o, v, 0, 65535, &S.port)) return 2; }
        else if (!strcmp(o, "--voices")) S.voices_dir = v;
        else if (!strcmp(o, "--api-key")) S.api_key = v;
        else if (!strcmp(o, "--max-streams")) { if (!parse_count(o, v, 1, 256, &S.max_streams)) return 2; }
        else if (!strcmp(o, "--queue")) { if (!parse_count(o, v, 0, 100000, &S.queue_cap)) return 2; }
        else if (!strcmp(o, "--threads") || !strcmp(o, "-t")) { if (!parse_count(o, v, 1, 1024, &S.threads)) return 2; }
        else if (!strcmp(o, "--backend")) { if (!cli_backend_ok("serve", v)) return 2; S.backend = v; }
        else if (!strcmp(o, "--timeout")) { if (!cli_parse_num("serve", o, v, 0.001, 86400, &S.timeout)) return 2; }
        else if (!strcmp(o, "--grace")) { if (!cli_parse_num("serve", o, v, 0, 86400, &S.grace)) return 2; }
        else if (!strcmp(o, "--max-input")) { if (!cli_parse_num("serve", o, v, 1, 1e7, &x)) return 2; S.max_input = (size_t)x; }
        else if (!strcmp(o, "--max-body")) { if (!cli_parse_num("serve", o, v, 1024, 1e10, &x)) return 2; S.max_body = (size_t)x; }
        else if (!strcmp(o, "--prefix-cache")) prefix_cache = v;
    }
    if (!S.api_key) {
        const char *k = getenv("CHATTERBOX_API_KEY");
        if (k && *k) S.api_key = k;
    }
    if (S.api_key && !*S.api_key) return usage_error("--api-key is empty");
    char cached[4096];
    if (!S.model_path) S.model_path = cli_default_model(cached, sizeof cached);
    if (!S.model_path || !*S.model_path) {
        char msg[ERR_MAX];
        cli_no_model_message(msg, sizeof msg);
        return usage_error("%s", msg);
    }
    if (S.voices_dir) {
        struct stat st;
        if (stat(S.voices_dir, &st) != 0 && mkdir(S.voices_dir, 0755) != 0) {
            fprintf(stderr, PROG ": --voices %s: cannot create: %s\n", S.voices_dir, strerror(errno));
            return 1;
        }
        if (stat(S.voices_dir, &st) != 0 || !S_ISDIR(st.st_mode) || access(S.voices_dir, W_OK | X_OK) != 0) {
            fprintf(stderr, PROG ": --voices %s: not a writable directory\n", S.voices_dir);
            return 1;
        }
    }
    /* the listening address */
    struct addrinfo hints, *ai = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    char port[16];
    snprintf(port, sizeof port, "%d", S.port);
    int gai = getaddrinfo(S.host, port, &hints, &ai);
    if (gai != 0 || !ai) {
        fprintf(stderr, PROG ": --host %s: %s\n", S.host, gai_strerror(gai));
        return 2;
    }

    int status = 1;
    struct MHD_Daemon *d = NULL;
    int n_workers = 0;
    /* the model */
    cbx_model_params mp = cbx_model_default_params();
    char pdir[4096];
    prefix_cache = cli_prefix_dir(prefix_cache, no_prefix_cache, pdir, sizeof pdir);
    if (prefix_cache && *prefix_cache) mp.prefix_cache_dir = prefix_cache;
    mp.backend = S.backend;
    char err[ERR_MAX];
    const double t0 = now();
    if (cbx_model_load(S.model_path, &mp, &S.model, err, sizeof err) != CBX_OK) {
        fprintf(stderr, PROG ": %s\n", err);
        freeaddrinfo(ai);
        return 1;
    }
    S.variant = cbx_model_variant(S.model);
    S.rate = cbx_model_sample_rate(S.model);
    snprintf(S.model_id, sizeof S.model_id, "chatterbox-%s", S.variant);
    S.cfg_model = strcmp(S.variant, "turbo") && strcmp(S.variant, "nano");
    S.multilingual = !strncmp(S.variant, "mtl", 3);
    pthread_mutex_init(&S.qmu, NULL);
    pthread_cond_init(&S.qcv, NULL);
    pthread_cond_init(&S.idle_cv, NULL);
    pthread_mutex_init(&S.vmu, NULL);
    pthread_mutex_init(&S.create_mu, NULL);
    pthread_mutex_init(&S.mmu, NULL);
    if (pipe(sig_pipe) != 0) {
        fprintf(stderr, PROG ": pipe: %s\n", strerror(errno));
        goto out;
    }
    /* the built-in voice's prefix now, so the first request starts at once */
    cbx_context *pctx = NULL;
    if (cbx_context_create(S.model, &pctx) == CBX_OK) {
        if (cbx_prepare_voice(pctx, NULL, S.threads) != CBX_OK)
            fprintf(stderr, "serve: built-in voice not prepared: %s\n", cbx_context_errmsg(pctx));
        cbx_context_free(pctx);
    }
    if (!(S.workers = calloc((size_t)S.max_streams, sizeof *S.workers))) {
        fprintf(stderr, PROG ": out of memory\n");
        goto out;
    }
    for (; n_workers < S.max_streams; n_workers++) {
        struct worker *w = &S.workers[n_workers];
        w->id = n_workers;
        if (cbx_context_create(S.model, &w->ctx) != CBX_OK) {
            fprintf(stderr, PROG ": cannot create context %d\n", n_workers);
            goto out;
        }
        if (pthread_create(&w->th, NULL, worker_main, w) != 0) {
            cbx_context_free(w->ctx);
            fprintf(stderr, PROG ": cannot start worker %d\n", n_workers);
            goto out;
        }
    }
    signal(SIGPIPE, SIG_IGN);
    cli_on_stop_signals(on_signal);
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ITC;
    if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
    d = MHD_start_daemon(flags, (uint16_t)S.port, NULL, NULL, on_request, NULL, MHD_OPTION_SOCK_ADDR, ai->ai_addr,
                         MHD_OPTION_NOTIFY_COMPLETED, on_completed, NULL, MHD_OPTION_CONNECTION_TIMEOUT,
                         (unsigned)120, MHD_OPTION_CONNECTION_LIMIT, (unsigned)(S.max_streams + S.queue_cap + 64),
                         MHD_OPTION_LISTENING_ADDRESS_REUSE, (unsigned)1, MHD_OPTION_END);
    if (!d) {
        fprintf(stderr, PROG ": cannot listen on %s port %d: %s\n", S.host, S.port, strerror(errno));
        goto out;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    const int bound = di ? di->port : S.port;
    fprintf(stderr, "serve: %s (%s on %s) ready in %.2f s; listening on http://%s%s%s:%d (%d streams, queue %d%s%s)\n",
            S.model_path, S.model_id, cbx_model_backend(S.model), now() - t0, ai->ai_family == AF_INET6 ? "[" : "", S.host,
            ai->ai_family == AF_INET6 ? "]" : "", bound, S.max_streams, S.queue_cap, S.api_key ? ", API key" : "",
            S.voices_dir ? ", voices in " : "");
    if (S.voices_dir) fprintf(stderr, "serve: voices in %s\n", S.voices_dir);
    fflush(stderr);
    /* wait for SIGTERM / SIGINT */
    char sig = 0;
    for (;;) {
        const ssize_t k = read(sig_pipe[0], &sig, 1);
        if (k == 1) break;
        if (k < 0 && errno == EINTR) continue;
        break;
    }
    pthread_mutex_lock(&S.qmu);
    const int in_flight = S.n_active + S.n_queued;
    pthread_mutex_unlock(&S.qmu);
    fprintf(stderr, "serve: %s: no new requests; finishing %d running and queued (up to %g s)\n",
            sig == SIGINT ? "SIGINT" : "SIGTERM", in_flight, S.grace);
    S.stopping = 1;
    MHD_socket ls = MHD_quiesce_daemon(d);
    if (ls != MHD_INVALID_SOCKET) close(ls);
    const double t_end = now() + S.grace;
    pthread_mutex_lock(&S.qmu);
    while ((S.n_active || S.n_queued) && now() < t_end) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 100 * 1000 * 1000;
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&S.idle_cv, &S.qmu, &ts);
    }
    const int left = S.n_active + S.n_queued;
    pthread_mutex_unlock(&S.qmu);
    if (left) fprintf(stderr, "serve: cancelling %d requests\n", left);
    S.hard_stop = 1;
    status = 0;
    /* a synthesis sees the cancel flag within one step (its abort
     * callback); one that does not end in 10 s (a step stuck in the
     * vocoder of a very long segment) is not waited for */
    const double t_kill = now() + 10;
    pthread_mutex_lock(&S.qmu);
    while ((S.n_active || S.n_queued) && now() < t_kill) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 100 * 1000 * 1000;
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&S.idle_cv, &S.qmu, &ts);
    }
    const int stuck = S.n_active;
    pthread_mutex_unlock(&S.qmu);
    if (stuck) {
        fprintf(stderr, "serve: %d syntheses did not stop; exiting without them\n", stuck);
        fflush(stderr);
        _exit(0);
    }
out:
    S.stopping = 1;
    S.hard_stop = 1;
    pthread_mutex_lock(&S.qmu);
    S.stop_workers = true;
    pthread_cond_broadcast(&S.qcv);
    pthread_mutex_unlock(&S.qmu);
    for (int i = 0; i < n_workers; i++) pthread_join(S.workers[i].th, NULL);
    if (d) MHD_stop_daemon(d);
    for (int i = 0; i < n_workers; i++) cbx_context_free(S.workers[i].ctx);
    free(S.workers);
    while (S.voices) {
        struct voice_entry *e = S.voices;
        S.voices = e->next;
        voice_release(e);
    }
    voice_models_free(S.vm);
    model_close(S.vmodel);
    backend_cpu_free(S.vbe);
    cbx_model_free(S.model);
    freeaddrinfo(ai);
    if (sig_pipe[0] >= 0) close(sig_pipe[0]), close(sig_pipe[1]);
    if (status == 0) fprintf(stderr, "serve: stopped\n");
    return status;
}
