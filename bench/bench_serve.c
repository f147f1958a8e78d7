/* bench_serve.c - load generator for `chatterbox serve` on loopback:
 * aggregate audio seconds produced per wall second, and first-audio
 * latency (p50, p95), with 1, 2, 4, 8 (--clients LIST) concurrent clients
 * each making --requests streamed requests (stream_format audio, pcm)
 * one after another.
 *
 *   bench_serve --model M [--clients 1,2,4,8] [--requests 2]
 *               [--max-tokens 100] [--threads N] [--url HOST:PORT]
 *               [--backend cpu|cuda|auto] [--trace]
 *
 * Without --url it starts `chatterbox serve` itself (the binary beside
 * the bench directory, or --bin) with --max-streams = the largest client
 * count and --backend (default auto), on a free port, and stops it with
 * SIGTERM at the end. Requests
 * are HTTP/1.0, so the body is the raw PCM until the server closes.
 * First audio: from sending the request to the first body byte (the
 * server sends its headers only with the first audio). JSON lines on
 * stdout (throughput with the 1-client figure as baseline, first-audio
 * percentiles), a summary on stderr. The clients start together, so
 * their first requests arrive at once; the later ones come as earlier ones
 * end, spread out as a server's usually are: first audio is also given
 * for those alone ("first_audio_later", with --requests >= 2). --trace:
 * each request's send time (from the clients' start), first audio and end
 * on stderr. */
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"

#define SR 24000

static char host[64] = "127.0.0.1";
static int port;
static int max_tokens = 100, n_requests = 2;
static const char *text = "The quick brown fox jumps over the lazy dog, and then it runs far away into the woods.";

struct client {
    pthread_t th;
    int id;
    double *first;   /* [n_requests] seconds */
    double audio;    /* seconds received */
    int failed;
};

static double t_bench0; /* the clients' start */
static bool trace;
static int one_request(int seed, double *first, double *audio)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (s < 0 || inet_pton(AF_INET, host, &a.sin_addr) != 1 || connect(s, (struct sockaddr *)&a, sizeof a)) {
        if (s >= 0) close(s);
        return -1;
    }
    char body[512], req[1024];
    int bl = snprintf(body, sizeof body,
                      "{\"model\":\"tts-1\",\"input\":\"%s\",\"voice\":\"alloy\",\"response_format\":\"pcm\","
                      "\"stream_format\":\"audio\",\"seed\":%d,\"max_tokens\":%d}",
                      text, seed, max_tokens);
    int rl = snprintf(req, sizeof req, "POST /v1/audio/speech HTTP/1.0\r\nHost: %s\r\nContent-Type: application/json\r\n"
                      "Content-Length: %d\r\n\r\n%s", host, bl, body);
    const double t0 = bench_now();
    if (send(s, req, (size_t)rl, MSG_NOSIGNAL) != rl) {
        close(s);
        return -1;
    }
    char buf[65536];
    size_t hdr = 0, total = 0;
    int status = 0;
    bool in_body = false;
    char head[4096];
    ssize_t k;
    *first = -1;
    while ((k = recv(s, buf, sizeof buf, 0)) > 0) {
        if (!in_body) {
            size_t c = (size_t)k < sizeof head - 1 - hdr ? (size_t)k : sizeof head - 1 - hdr;
            memcpy(head + hdr, buf, c);
            hdr += c;
            head[hdr] = 0;
            char *e = strstr(head, "\r\n\r\n");
            if (!e) continue;
            sscanf(head, "HTTP/1.%*d %d", &status);
            in_body = true;
            /* bytes of this recv past the header: those copied into head
             * after its end, and those that did not fit in head */
            total += hdr - (size_t)(e + 4 - head) + ((size_t)k - c);
            if (total > 0 && *first < 0) *first = bench_now() - t0;
            continue;
        }
        if (*first < 0) *first = bench_now() - t0;
        total += (size_t)k;
    }
    close(s);
    if (trace)
        fprintf(stderr, "request seed %d: sent at %.2f s, first audio after %.2f s, ended at %.2f s\n", seed,
                t0 - t_bench0, *first, bench_now() - t_bench0);
    if (status != 200) return -1;
    *audio = (double)total / 2 / SR;
    return 0;
}

static void *client_main(void *arg)
{
    struct client *c = arg;
    for (int r = 0; r < n_requests; r++) {
        double a = 0;
        if (one_request(1000 * c->id + r, &c->first[r], &a)) c->failed++;
        c->audio += a;
    }
    return NULL;
}

static int cmp_d(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double pct(const double *v, int n, double p)
{
    if (n == 0) return 0;
    int i = (int)(p * (n - 1) + 0.5);
    return v[i < n ? i : n - 1];
}

int main(int argc, char **argv)
{
    const char *model = bench_take_model(&argc, argv);
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--trace")) {
            trace = true;
            memmove(argv + i, argv + i + 1, sizeof *argv * (size_t)(argc - i)); /* argv[argc] is NULL */
            argc--;
            break;
        }
    const char *clients_s = bench_take_opt_or(&argc, argv, "--clients", "1,2,4,8");
    const char *url = bench_take_opt(&argc, argv, "--url");
    const char *bin = bench_take_opt(&argc, argv, "--bin");
    const char *backend = bench_take_opt_or(&argc, argv, "--backend", "auto");
    max_tokens = atoi(bench_take_opt_or(&argc, argv, "--max-tokens", "100"));
    n_requests = atoi(bench_take_opt_or(&argc, argv, "--requests", "2"));
    struct bench_opts o;
    if (!bench_parse(argc, argv, &o, 1)) return 2;
    int levels[16], nl = 0, max_c = 1;
    for (const char *p = clients_s; *p && nl < 16;) {
        levels[nl] = atoi(p);
        if (levels[nl] < 1 || levels[nl] > 256) {
            fprintf(stderr, "bench_serve: --clients needs numbers in [1, 256], got '%s'\n", clients_s);
            return 2;
        }
        if (levels[nl] > max_c) max_c = levels[nl];
        nl++;
        p = strchr(p, ',');
        if (!p) break;
        p++;
    }
    if (max_tokens < 12 || n_requests < 1) {
        fprintf(stderr, "bench_serve: --max-tokens needs >= 12 and --requests >= 1\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    pid_t pid = -1;
    if (url) {
        if (sscanf(url, "%63[^:]:%d", host, &port) != 2) {
            fprintf(stderr, "bench_serve: --url needs HOST:PORT\n");
            return 2;
        }
    } else {
        if (!model) {
            fprintf(stderr, "bench_serve: needs --model DIR|GGUF (or CHATTERBOX_MODEL), or --url HOST:PORT\n");
            return 2;
        }
        char exe[PATH_MAX + 32], self[PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
        if (n <= 0) return 1;
        self[n] = 0;
        char *slash = strrchr(self, '/');
        if (slash) *slash = 0;
        snprintf(exe, sizeof exe, "%s/../chatterbox", self);
        if (bin) snprintf(exe, sizeof exe, "%s", bin);
        char streams[16], threads[16];
        snprintf(streams, sizeof streams, "%d", max_c);
        snprintf(threads, sizeof threads, "%d", o.threads);
        int pp[2];
        if (pipe(pp)) return 1;
        pid = fork();
        if (pid == 0) {
            dup2(pp[1], 2);
            close(pp[0]);
            execl(exe, exe, "serve", "--model", model, "--port", "0", "--max-streams", streams, "--queue", "64",
                  "--threads", threads, "--backend", backend, "--quiet", (char *)NULL);
            _exit(127);
        }
        close(pp[1]);
        char log[4096];
        size_t ln = 0;
        ssize_t k;
        while (!port && (k = read(pp[0], log + ln, sizeof log - 1 - ln)) > 0) {
            ln += (size_t)k;
            log[ln] = 0;
            const char *l = strstr(log, "listening on http://127.0.0.1:");
            if (l && strchr(l, '\n')) port = atoi(l + 30);
        }
        if (!port) {
            fprintf(stderr, "bench_serve: the server did not start:\n%s\n", log);
            return 1;
        }
        /* keep draining its stderr so it never blocks */
        if (fork() == 0) {
            char b[4096];
            while (read(pp[0], b, sizeof b) > 0) {}
            _exit(0);
        }
        close(pp[0]);
    }
    /* warm-up: one request (voice prefix, first-touch of the weights) */
    double f, a;
    if (one_request(999999, &f, &a)) {
        fprintf(stderr, "bench_serve: the warm-up request failed\n");
        if (pid > 0) kill(pid, SIGTERM);
        return 1;
    }
    double base = 0;
    int status = 0;
    for (int li = 0; li < nl; li++) {
        const int n = levels[li];
        struct client *c = calloc((size_t)n, sizeof *c);
        double *all = calloc((size_t)(n * n_requests), sizeof *all);
        double *later = calloc((size_t)(n * n_requests), sizeof *later);
        if (!c || !all || !later) return 1;
        const double t0 = bench_now();
        for (int i = 0; i < n; i++) {
            c[i].id = i;
            c[i].first = all + i * n_requests;
            if (i == 0) t_bench0 = bench_now();
            pthread_create(&c[i].th, NULL, client_main, &c[i]);
        }
        double audio = 0;
        int failed = 0;
        for (int i = 0; i < n; i++) {
            pthread_join(c[i].th, NULL);
            audio += c[i].audio;
            failed += c[i].failed;
        }
        const double wall = bench_now() - t0;
        int m = 0, ml = 0;
        for (int i = 0; i < n * n_requests; i++) {
            if (all[i] >= 0 && i % n_requests > 0) later[ml++] = all[i]; /* not a client's first */
            if (all[i] >= 0) all[m++] = all[i];
        }
        qsort(all, (size_t)m, sizeof *all, cmp_d);
        qsort(later, (size_t)ml, sizeof *later, cmp_d);
        const double thr = audio / wall;
        if (li == 0) base = thr;
        printf("{\"bench\":\"serve\",\"type\":\"throughput\",\"shape\":[%d],\"threads\":%d,\"reps\":%d,"
               "\"unit\":\"audio_s/s\",\"median\":%.4f,\"p10\":%.4f,\"p90\":%.4f,\"baseline\":\"%d_clients\","
               "\"baseline_median\":%.4f,\"ratio\":%.3f,\"failed\":%d,\"commit\":\"%s\"}\n",
               n, o.threads, n_requests, thr, thr, thr, levels[0], base, base > 0 ? thr / base : 0, failed,
               bench_commit());
        printf("{\"bench\":\"serve\",\"type\":\"first_audio\",\"shape\":[%d],\"threads\":%d,\"reps\":%d,"
               "\"unit\":\"s\",\"median\":%.4f,\"p10\":%.4f,\"p90\":%.4f,\"p95\":%.4f,\"commit\":\"%s\"}\n",
               n, o.threads, m, pct(all, m, 0.5), pct(all, m, 0.1), pct(all, m, 0.9), pct(all, m, 0.95),
               bench_commit());
        if (ml > 0)
            printf("{\"bench\":\"serve\",\"type\":\"first_audio_later\",\"shape\":[%d],\"threads\":%d,\"reps\":%d,"
                   "\"unit\":\"s\",\"median\":%.4f,\"p10\":%.4f,\"p90\":%.4f,\"p95\":%.4f,\"commit\":\"%s\"}\n",
                   n, o.threads, ml, pct(later, ml, 0.5), pct(later, ml, 0.1), pct(later, ml, 0.9),
                   pct(later, ml, 0.95), bench_commit());
        fflush(stdout);
        fprintf(stderr,
                "serve %2d clients: %.2f s of audio in %.2f s = %.3f audio s/s (x%.2f of %d), first audio p50 "
                "%.2f s p95 %.2f s (later requests p50 %.2f s p95 %.2f s)%s\n",
                n, audio, wall, thr, base > 0 ? thr / base : 0, levels[0], pct(all, m, 0.5), pct(all, m, 0.95),
                pct(later, ml, 0.5), pct(later, ml, 0.95), failed ? " (some requests failed)" : "");
        if (failed) status = 1;
        free(c);
        free(all);
        free(later);
    }
    if (pid > 0) {
        kill(pid, SIGTERM);
        waitpid(pid, NULL, 0);
    }
    return status;
}
