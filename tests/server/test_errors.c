/* test_errors.c - every error path of `chatterbox serve`, over plain
 * sockets (ctest server_errors, on the synthetic Turbo model).
 *
 * The server runs with an API key, one stream, a queue of one, a 40-
 * character input limit and a 4 KiB body limit. Checked:
 * 401 (no key, wrong key; /health open), 400 for each malformed request
 * (bad JSON, not an object, missing/empty/too long/invalid UTF-8 input,
 * bad voice names, unknown voice, aac, unknown format, bad numbers, Llama
 * options on Turbo, language on Turbo, unknown model, bad stream_format),
 * each with an OpenAI-style error body naming its param; 413, 404, 405;
 * voices: no multipart, missing file, a path-escaping name, delete of a
 * missing voice; 429 with Retry-After while the stream and the queue are
 * full; a client that hangs up mid-stream cancels its job; a request
 * past its deadline gets 504; /metrics counts all this; SIGTERM exits 0. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"

#define BIN CBX_BINARY_DIR "/chatterbox"
#define KEY "test-key-123"
#define AUTH "Authorization: Bearer " KEY "\r\n"

static int port;
static pid_t pid;
static int err_fd;
static char logbuf[1 << 16];
static size_t log_n;
static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;

static void *drain(void *arg)
{
    (void)arg;
    char b[4096];
    ssize_t k;
    while ((k = read(err_fd, b, sizeof b)) > 0) {
        pthread_mutex_lock(&log_mu);
        if (log_n + (size_t)k < sizeof logbuf - 1) {
            memcpy(logbuf + log_n, b, (size_t)k);
            log_n += (size_t)k;
            logbuf[log_n] = 0;
        }
        pthread_mutex_unlock(&log_mu);
    }
    return NULL;
}

static int start_server(const char *model, const char *voices)
{
    int p[2];
    if (pipe(p)) return -1;
    pid = fork();
    if (pid == 0) {
        dup2(p[1], 2);
        close(p[0]);
        execl(BIN, BIN, "serve", "--model", model, "--port", "0", "--api-key", KEY, "--max-streams", "1", "--queue",
              "1", "--max-input", "40", "--max-body", "4096", "--voices", voices, "--grace", "20",
              "--backend", test_backend_name(), (char *)NULL);
        _exit(127);
    }
    close(p[1]);
    err_fd = p[0];
    /* read until the listening line */
    const double t0 = test_now();
    while (test_now() - t0 < 300) {
        char b[1024];
        ssize_t k = read(err_fd, b, sizeof b);
        if (k <= 0) break;
        if (log_n + (size_t)k < sizeof logbuf - 1) {
            memcpy(logbuf + log_n, b, (size_t)k);
            log_n += (size_t)k;
            logbuf[log_n] = 0;
        }
        const char *l = strstr(logbuf, "listening on http://127.0.0.1:");
        if (l && strchr(l, '\n')) {
            port = atoi(l + strlen("listening on http://127.0.0.1:"));
            pthread_t th;
            pthread_create(&th, NULL, drain, NULL);
            pthread_detach(th);
            return 0;
        }
    }
    fprintf(stderr, "server did not start:\n%s\n", logbuf);
    return -1;
}

static int dial(void)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (s < 0 || connect(s, (struct sockaddr *)&a, sizeof a)) {
        if (s >= 0) close(s);
        return -1;
    }
    return s;
}

static void send_all(int s, const void *p, size_t n)
{
    const char *c = p;
    while (n) {
        ssize_t k = send(s, c, n, MSG_NOSIGNAL);
        if (k <= 0) return;
        c += k;
        n -= (size_t)k;
    }
}

/* Send a request; read the whole response (Connection: close) into
 * resp; returns the status code (0: no answer). */
static int request(const char *method, const char *path, const char *headers, const char *body, size_t n,
                   char *resp, size_t cap)
{
    int s = dial();
    if (s < 0) return 0;
    char h[2048];
    int hl = snprintf(h, sizeof h, "%s %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n%sContent-Length: %zu\r\n\r\n",
                      method, path, headers ? headers : "", n);
    send_all(s, h, (size_t)hl);
    if (n) send_all(s, body, n);
    size_t got = 0;
    ssize_t k;
    while (got + 1 < cap && (k = recv(s, resp + got, cap - 1 - got, 0)) > 0) got += (size_t)k;
    resp[got] = 0;
    close(s);
    int status = 0;
    sscanf(resp, "HTTP/1.%*d %d", &status);
    return status;
}

static char resp[1 << 16];

static const char *body_of(const char *r)
{
    const char *b = strstr(r, "\r\n\r\n");
    return b ? b + 4 : "";
}

/* A POST /v1/audio/speech with json; expect status and that the error
 * body names param (NULL: any) and code. */
static void speech_fails(const char *what, const char *json, int want, const char *param, const char *code)
{
    const int st = request("POST", "/v1/audio/speech", AUTH "Content-Type: application/json\r\n", json, strlen(json),
                           resp, sizeof resp);
    const char *b = body_of(resp);
    char pp[96] = "", cc[96] = "";
    if (param) snprintf(pp, sizeof pp, "\"param\":\"%s\"", param);
    if (code) snprintf(cc, sizeof cc, "\"code\":\"%s\"", code);
    const bool ok = st == want && strstr(b, "{\"error\":{\"message\":\"") && (!param || strstr(b, pp)) &&
                    (!code || strstr(b, cc)) && strstr(b, "\"type\":\"");
    CHECK(ok, "%s: status %d (want %d), body %.200s", what, st, want, b);
}

static double metric(const char *name)
{
    request("GET", "/metrics", AUTH, NULL, 0, resp, sizeof resp);
    const char *p = strstr(resp, name);
    while (p && p > resp && p[-1] != '\n') p = strstr(p + 1, name);
    return p ? atof(p + strlen(name)) : -1;
}

/* `chatterbox serve ARGS` exit status, stderr to /dev/null */
static int run_status(const char *args)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "'%s' serve %s 2>/dev/null", BIN, args);
    const int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

int main(void)
{
    const char *model = CBX_BINARY_DIR "/models/turbo";
    /* command-line errors: usage 2, failures 1 */
    CHECK(run_status("--bogus") == 2, "serve --bogus: exit 2");
    CHECK(run_status("--port 70000 --model x") == 2, "serve --port 70000: exit 2");
    CHECK(run_status("--max-streams 0 --model x") == 2, "serve --max-streams 0: exit 2");
    CHECK(run_status("--model /nonexistent/model") == 1, "serve --model /nonexistent: exit 1");
    CHECK(run_status("--model x --voices /proc/nope") == 1, "serve --voices in /proc: exit 1");
    char voices[1200];
    snprintf(voices, sizeof voices, "%s/voices", test_tmpdir("server_errors"));
    if (start_server(model, voices)) {
        CHECK(false, "server starts");
        return test_summary();
    }
    signal(SIGPIPE, SIG_IGN);
    int st;

    /* authentication */
    st = request("GET", "/health", NULL, NULL, 0, resp, sizeof resp);
    CHECK(st == 200 && strstr(resp, "\"status\":\"ok\""), "/health without a key: %d", st);
    st = request("GET", "/v1/models", NULL, NULL, 0, resp, sizeof resp);
    CHECK(st == 401 && strstr(body_of(resp), "\"code\":\"invalid_api_key\""), "no key: %d %.120s", st, body_of(resp));
    st = request("GET", "/v1/models", "Authorization: Bearer nope\r\n", NULL, 0, resp, sizeof resp);
    CHECK(st == 401, "wrong key: %d", st);
    st = request("GET", "/v1/models", "Authorization: Bearer " KEY "x\r\n", NULL, 0, resp, sizeof resp);
    CHECK(st == 401, "key with a suffix: %d", st);
    st = request("POST", "/v1/audio/speech", NULL, "{}", 2, resp, sizeof resp);
    CHECK(st == 401, "speech without a key: %d", st);
    st = request("GET", "/v1/models", AUTH, NULL, 0, resp, sizeof resp);
    CHECK(st == 200 && strstr(resp, "chatterbox-turbo"), "models with the key: %d", st);

    /* malformed speech requests */
    speech_fails("bad JSON", "{\"input\": \"hi\"", 400, NULL, "invalid_value");
    speech_fails("not an object", "[1, 2]", 400, NULL, NULL);
    speech_fails("missing input", "{\"voice\":\"alloy\"}", 400, "input", "missing_required_parameter");
    speech_fails("input not a string", "{\"input\":5}", 400, "input", NULL);
    speech_fails("empty input", "{\"input\":\"   \"}", 400, "input", NULL);
    speech_fails("input too long", "{\"input\":\"This sentence has far more than forty characters in it.\"}", 400,
                 "input", "string_above_max_length");
    speech_fails("invalid UTF-8", "{\"input\":\"caf\xc3\x28\"}", 400, "input", NULL);
    speech_fails("voice escaping the directory", "{\"input\":\"Hi.\",\"voice\":\"../../etc/passwd\"}", 400, "voice", NULL);
    speech_fails("voice with a slash", "{\"input\":\"Hi.\",\"voice\":\"a/b\"}", 400, "voice", NULL);
    speech_fails("voice too long",
                 "{\"input\":\"Hi.\",\"voice\":\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"}",
                 400, "voice", NULL);
    speech_fails("unknown voice", "{\"input\":\"Hi.\",\"voice\":\"nobody\"}", 400, "voice", "voice_not_found");
    speech_fails("aac", "{\"input\":\"Hi.\",\"response_format\":\"aac\"}", 400, "response_format", "unsupported_value");
    speech_fails("unknown format", "{\"input\":\"Hi.\",\"response_format\":\"ogg\"}", 400, "response_format", NULL);
    speech_fails("speed too high", "{\"input\":\"Hi.\",\"speed\":10}", 400, "speed", NULL);
    speech_fails("speed a string", "{\"input\":\"Hi.\",\"speed\":\"fast\"}", 400, "speed", NULL);
    speech_fails("temperature a string", "{\"input\":\"Hi.\",\"temperature\":\"hot\"}", 400, "temperature", NULL);
    speech_fails("top_k fractional", "{\"input\":\"Hi.\",\"top_k\":1.5}", 400, "top_k", NULL);
    speech_fails("top_p above 1", "{\"input\":\"Hi.\",\"top_p\":1.5}", 400, "top_p", NULL);
    speech_fails("max_tokens 0", "{\"input\":\"Hi.\",\"max_tokens\":0}", 400, "max_tokens", NULL);
    speech_fails("negative seed", "{\"input\":\"Hi.\",\"seed\":-1}", 400, "seed", NULL);
    speech_fails("seed beyond 64 bits", "{\"input\":\"Hi.\",\"seed\":\"18446744073709551616\"}", 400, "seed", NULL);
    speech_fails("min_p on Turbo", "{\"input\":\"Hi.\",\"min_p\":0.1}", 400, "min_p", "unsupported_parameter");
    speech_fails("cfg_weight on Turbo", "{\"input\":\"Hi.\",\"cfg_weight\":0.3}", 400, "cfg_weight", NULL);
    speech_fails("language on Turbo", "{\"input\":\"Hi.\",\"language\":\"fr\"}", 400, "language", NULL);
    speech_fails("unknown model", "{\"input\":\"Hi.\",\"model\":\"whisper-1\"}", 400, "model", "model_not_found");
    speech_fails("bad stream_format", "{\"input\":\"Hi.\",\"stream_format\":\"video\"}", 400, "stream_format", NULL);
    speech_fails("nothing to speak", "{\"input\":\"... !?\"}", 400, "input", NULL);

    /* sizes, paths, methods */
    char big[5000];
    memset(big, ' ', sizeof big);
    memcpy(big, "{\"input\":\"Hi.\"}", 15);
    st = request("POST", "/v1/audio/speech", AUTH, big, sizeof big, resp, sizeof resp);
    CHECK(st == 413 && strstr(body_of(resp), "request_too_large"), "body over --max-body: %d", st);
    st = request("GET", "/v1/nothing", AUTH, NULL, 0, resp, sizeof resp);
    CHECK(st == 404 && strstr(body_of(resp), "\"error\""), "unknown path: %d", st);
    st = request("GET", "/v1/audio/speech", AUTH, NULL, 0, resp, sizeof resp);
    CHECK(st == 405 && strstr(resp, "Allow: POST"), "GET on speech: %d", st);
    st = request("PUT", "/v1/audio/voices", AUTH, NULL, 0, resp, sizeof resp);
    CHECK(st == 405, "PUT on voices: %d", st);

    /* voices */
    st = request("POST", "/v1/audio/voices", AUTH "Content-Type: application/json\r\n", "{}", 2, resp, sizeof resp);
    CHECK(st == 400 && strstr(body_of(resp), "multipart"), "voice upload as JSON: %d %.120s", st, body_of(resp));
    static const char mp_noname[] = "--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\n"
                                    "\r\nRIFF....\r\n--XyZ--\r\n";
    st = request("POST", "/v1/audio/voices", AUTH "Content-Type: multipart/form-data; boundary=XyZ\r\n", mp_noname,
                 sizeof mp_noname - 1, resp, sizeof resp);
    CHECK(st == 400 && strstr(body_of(resp), "\"param\":\"name\""), "upload without a name: %d", st);
    static const char mp_nofile[] = "--XyZ\r\nContent-Disposition: form-data; name=\"name\"\r\n\r\nbob\r\n--XyZ--\r\n";
    st = request("POST", "/v1/audio/voices", AUTH "Content-Type: multipart/form-data; boundary=XyZ\r\n", mp_nofile,
                 sizeof mp_nofile - 1, resp, sizeof resp);
    CHECK(st == 400 && strstr(body_of(resp), "\"param\":\"file\""), "upload without a file: %d", st);
    static const char mp_escape[] = "--XyZ\r\nContent-Disposition: form-data; name=\"name\"\r\n\r\n../evil\r\n"
                                    "--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\n"
                                    "\r\nRIFF....\r\n--XyZ--\r\n";
    st = request("POST", "/v1/audio/voices", AUTH "Content-Type: multipart/form-data; boundary=XyZ\r\n", mp_escape,
                 sizeof mp_escape - 1, resp, sizeof resp);
    CHECK(st == 400 && strstr(body_of(resp), "\"param\":\"name\""), "upload named ../evil: %d", st);
    static const char mp_notaudio[] = "--XyZ\r\nContent-Disposition: form-data; name=\"name\"\r\n\r\nbob\r\n"
                                      "--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\n"
                                      "\r\nthis is not audio at all\r\n--XyZ--\r\n";
    st = request("POST", "/v1/audio/voices", AUTH "Content-Type: multipart/form-data; boundary=XyZ\r\n", mp_notaudio,
                 sizeof mp_notaudio - 1, resp, sizeof resp);
    CHECK(st == 400 && strstr(body_of(resp), "invalid_audio"), "upload of a non-audio file: %d %.160s", st, body_of(resp));
    static const char mp_broken[] = "--XyZ\r\nContent-Disposition: form-data; name=\"name\"\r\n\r\nbob";
    st = request("POST", "/v1/audio/voices", AUTH "Content-Type: multipart/form-data; boundary=XyZ\r\n", mp_broken,
                 sizeof mp_broken - 1, resp, sizeof resp);
    CHECK(st == 400, "truncated multipart: %d", st);
    st = request("DELETE", "/v1/audio/voices/nobody", AUTH, NULL, 0, resp, sizeof resp);
    CHECK(st == 404, "delete a missing voice: %d", st);
    st = request("DELETE", "/v1/audio/voices/..%2F..%2Fx", AUTH, NULL, 0, resp, sizeof resp);
    CHECK(st == 400, "delete ../../x: %d", st);
    st = request("GET", "/v1/audio/voices", AUTH, NULL, 0, resp, sizeof resp);
    CHECK(st == 200 && strstr(resp, "\"id\":\"default\"") && strstr(resp, "\"id\":\"shimmer\""), "voices list: %d", st);

    /* 429: one stream running (a long streamed request, held open), one
     * waiting, the third refused */
    static const char long_json[] = "{\"input\":\"One two three four five.\",\"max_tokens\":400,"
                                    "\"stream_format\":\"audio\",\"response_format\":\"pcm\"}";
    int a = dial();
    char h[512];
    int hl = snprintf(h, sizeof h, "POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\n" AUTH "Content-Length: %zu\r\n\r\n",
                      sizeof long_json - 1);
    send_all(a, h, (size_t)hl);
    send_all(a, long_json, sizeof long_json - 1);
    char first[256] = "";
    ssize_t k = recv(a, first, sizeof first - 1, 0); /* waits for the first audio */
    if (k > 0) first[k] = 0;
    CHECK(!strncmp(first, "HTTP/1.1 200", 12), "long stream started: %.12s", first);
    /* B: queued, with a deadline of its own (0.5 s) that passes while it waits */
    static const char b_json[] = "{\"input\":\"Hi.\",\"timeout\":0.5}";
    int b = dial();
    hl = snprintf(h, sizeof h, "POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\n" AUTH "Content-Length: %zu\r\n\r\n",
                  sizeof b_json - 1);
    send_all(b, h, (size_t)hl);
    send_all(b, b_json, sizeof b_json - 1);
    usleep(300 * 1000);
    st = request("POST", "/v1/audio/speech", AUTH, "{\"input\":\"Hi.\"}", 15, resp, sizeof resp);
    CHECK(st == 429 && strstr(resp, "Retry-After: ") && strstr(body_of(resp), "rate_limit_exceeded"),
          "third request while full: %d", st);
    const double depth = metric("chatterbox_queue_depth ");
    CHECK(depth == 1, "queue depth %g while one waits", depth);
    /* A hangs up (after B's deadline): its job is cancelled */
    usleep(400 * 1000);
    close(a);
    /* B runs past its deadline: 504 */
    size_t got = 0;
    while (got + 1 < sizeof resp && (k = recv(b, resp + got, sizeof resp - 1 - got, 0)) > 0) {
        got += (size_t)k;
        resp[got] = 0;
        if (strstr(resp, "\r\n\r\n") && strstr(resp, "}}")) break;
    }
    resp[got] = 0;
    close(b);
    int bst = 0;
    sscanf(resp, "HTTP/1.%*d %d", &bst);
    CHECK(bst == 504 && strstr(resp, "\"code\":\"timeout\""), "request past its deadline: %d %.160s", bst, body_of(resp));
    double cancelled = 0;
    for (int i = 0; i < 100 && (cancelled = metric("chatterbox_jobs_total{outcome=\"cancelled\"} ")) < 2; i++)
        usleep(100 * 1000);
    CHECK(cancelled >= 2, "cancelled jobs (hang-up, deadline): %g", cancelled);
    /* a whole-file request (no chunks until it ends) past its deadline
     * stops within a step (the abort callback), not at the end of its
     * 400 tokens (~16 s on a 2-core CPU, more under sanitizers; 0.76 s
     * on an H200, so the deadline is well under that) */
    static const char w_json[] = "{\"input\":\"One two three four five.\",\"max_tokens\":400,\"timeout\":0.25}";
    const double tw = test_now();
    st = request("POST", "/v1/audio/speech", AUTH, w_json, sizeof w_json - 1, resp, sizeof resp);
    const double dw = test_now() - tw;
    printf("whole-file request with a 0.25 s deadline: %d after %.2f s\n", st, dw);
    CHECK(st == 504 && dw < 8.0, "whole-file request past its deadline: %d after %.2f s", st, dw);
    for (int i = 0; i < 100 && (cancelled = metric("chatterbox_jobs_total{outcome=\"cancelled\"} ")) < 3; i++)
        usleep(100 * 1000);
    CHECK(cancelled >= 3, "cancelled jobs (hang-up, two deadlines): %g", cancelled);
    const double n400 = metric("chatterbox_requests_total{code=\"400\"} ");
    CHECK(n400 >= 30, "metrics count the 400s: %g", n400);
    CHECK(metric("chatterbox_requests_total{code=\"429\"} ") == 1, "metrics count the 429");
    CHECK(metric("chatterbox_first_audio_seconds_count ") >= 1, "first-audio histogram has samples");
    const double steps = metric("chatterbox_t3_steps_total "), toks = metric("chatterbox_t3_tokens_total ");
    const double rows_max = metric("chatterbox_t3_batch_rows_max ");
    printf("T3 scheduler: %g steps, %g rows, at most %g rows in a step\n", steps, toks, rows_max);
    /* the scheduler batches cpu contexts; on a GPU each context decodes on its own stream */
    if (!strcmp(test_backend_name(), "cpu"))
        CHECK(steps > 0 && toks >= steps && rows_max >= 1 && rows_max <= toks,
              "T3 batch metrics: %g steps, %g rows, max %g", steps, toks, rows_max);
    else
        CHECK(steps == 0 && toks == 0, "T3 batch metrics on %s: %g steps, %g rows", test_backend_name(), steps, toks);

    /* SIGTERM: exit 0 */
    kill(pid, SIGTERM);
    int ws = 0;
    waitpid(pid, &ws, 0);
    CHECK(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "SIGTERM: exit status %d", WIFEXITED(ws) ? WEXITSTATUS(ws) : -1);
    usleep(100 * 1000);
    pthread_mutex_lock(&log_mu);
    CHECK(strstr(logbuf, "serve: stopped") != NULL, "logged the stop");
    CHECK(strstr(logbuf, " POST /v1/audio/speech 400 ") != NULL && strstr(logbuf, " 429 ") != NULL,
          "one log line per request");
    pthread_mutex_unlock(&log_mu);
    return test_summary();
}
