/* test_download.c - `chatterbox download` (tools/cmd_download.c,
 * tools/lib/hf_download.c) against a loopback Hugging Face Hub: a
 * libmicrohttpd server in this process on 127.0.0.1 (ephemeral port)
 * serves a synthetic ResembleAI/chatterbox-turbo snapshot (listing with
 * sizes and LFS sha256, resolve URLs that redirect LFS files to a "CDN"
 * path, HTTP Range), and can demand a token, drop a connection mid-file or
 * advertise a wrong checksum. The real binary runs against it through
 * HF_ENDPOINT; the server's request log shows what the client asked for. */
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hf_download.h"
#include "io/sha256.h"
#include "testutil.h"

#define REPO "ResembleAI/chatterbox-turbo"
#define COMMIT "0123456789abcdef0123456789abcdef01234567"
#define TOKEN "hf_test_token_123"

struct sfile {
    const char *name;
    size_t size;
    int lfs;
    uint8_t *data;
    char sha[65];
};

/* The snapshot: what turbo needs (9 files; tokenizer.json deliberately
 * absent: optional) plus files it must not fetch. */
static struct sfile files[] = {
    {"t3_turbo_v1.safetensors", 3u << 20, 1, NULL, ""},
    {"s3gen_meanflow.safetensors", 2u << 20, 1, NULL, ""},
    {"ve.safetensors", (1u << 20) + 17, 1, NULL, ""},
    {"conds.pt", 100003, 1, NULL, ""},
    {"vocab.json", 5000, 0, NULL, ""},
    {"merges.txt", 3001, 0, NULL, ""},
    {"added_tokens.json", 100, 0, NULL, ""},
    {"special_tokens_map.json", 90, 0, NULL, ""},
    {"tokenizer_config.json", 200, 0, NULL, ""},
    {"README.md", 1000, 0, NULL, ""},
    {".gitattributes", 500, 0, NULL, ""},
    {"s3gen.safetensors", 400000, 1, NULL, ""},
};
enum { N_FILES = sizeof files / sizeof files[0], N_WANTED = 9, T3 = 0, VE = 2 };

#define MAX_LOG 256
struct req {
    char path[256], range[64], auth[128];
};

static struct {
    struct MHD_Daemon *d;
    int port;
    pthread_mutex_t mu;
    int require_token;
    int drop_file, drops_left; /* drop responses of this file at drop_at */
    size_t drop_at;
    int bad_sha_file;
    int ignore_range; /* answer 200 with the whole file to a Range request */
    struct req log[MAX_LOG];
    int n_log;
} srv = {.mu = PTHREAD_MUTEX_INITIALIZER, .drop_file = -1, .bad_sha_file = -1};

/* ---- server ------------------------------------------------------------- */

struct body {
    const struct sfile *f;
    size_t off, end, drop_at; /* drop_at == 0: never */
};

static ssize_t body_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    struct body *b = cls;
    size_t at = b->off + (size_t)pos;
    if (b->drop_at && at >= b->drop_at) return MHD_CONTENT_READER_END_WITH_ERROR;
    size_t lim = b->drop_at ? b->drop_at : b->end;
    size_t n = lim - at < max ? lim - at : max;
    if (n == 0) return MHD_CONTENT_READER_END_OF_STREAM;
    memcpy(buf, b->f->data + at, n);
    return (ssize_t)n;
}

static enum MHD_Result send_text(struct MHD_Connection *c, unsigned code, const char *text)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(text), (void *)text, MHD_RESPMEM_MUST_COPY);
    enum MHD_Result ret = MHD_queue_response(c, code, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result send_file(struct MHD_Connection *c, int i, const char *range)
{
    const struct sfile *f = &files[i];
    size_t off = 0;
    pthread_mutex_lock(&srv.mu);
    if (srv.ignore_range) range = NULL;
    pthread_mutex_unlock(&srv.mu);
    if (range && sscanf(range, "bytes=%zu-", &off) == 1 && off >= f->size)
        return send_text(c, MHD_HTTP_RANGE_NOT_SATISFIABLE, "range not satisfiable");
    struct body *b = malloc(sizeof *b);
    if (!b) return MHD_NO;
    *b = (struct body){f, off, f->size, 0};
    pthread_mutex_lock(&srv.mu);
    if (srv.drop_file == i && srv.drops_left > 0 && off < srv.drop_at) {
        b->drop_at = srv.drop_at;
        srv.drops_left--;
    }
    pthread_mutex_unlock(&srv.mu);
    struct MHD_Response *r = MHD_create_response_from_callback(f->size - off, 1 << 15, body_read, b, free);
    if (off > 0) {
        char cr[96];
        snprintf(cr, sizeof cr, "bytes %zu-%zu/%zu", off, f->size - 1, f->size);
        MHD_add_response_header(r, "Content-Range", cr);
    }
    enum MHD_Result ret = MHD_queue_response(c, off > 0 ? MHD_HTTP_PARTIAL_CONTENT : MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result send_listing(struct MHD_Connection *c)
{
    const char *blobs = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "blobs");
    int with_blobs = blobs && !strcmp(blobs, "true");
    static char json[16384];
    size_t n = (size_t)snprintf(json, sizeof json, "{\"_id\":\"x\",\"id\":\"%s\",\"sha\":\"%s\",\"siblings\":[", REPO,
                                COMMIT);
    for (int i = 0; i < N_FILES; i++) {
        const struct sfile *f = &files[i];
        char sha[65];
        snprintf(sha, sizeof sha, "%s", f->sha);
        pthread_mutex_lock(&srv.mu);
        if (srv.bad_sha_file == i) sha[0] = sha[0] == '0' ? '1' : '0';
        pthread_mutex_unlock(&srv.mu);
        n += (size_t)snprintf(json + n, sizeof json - n, "%s{\"rfilename\":\"%s\"", i ? "," : "", f->name);
        if (with_blobs) {
            n += (size_t)snprintf(json + n, sizeof json - n, ",\"blobId\":\"abc\",\"size\":%zu", f->size);
            if (f->lfs)
                n += (size_t)snprintf(json + n, sizeof json - n,
                                      ",\"lfs\":{\"sha256\":\"%s\",\"size\":%zu,\"pointerSize\":134}", sha, f->size);
        }
        n += (size_t)snprintf(json + n, sizeof json - n, "}");
    }
    snprintf(json + n, sizeof json - n, "]}");
    return send_text(c, MHD_HTTP_OK, json);
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                               const char *version, const char *upload, size_t *upload_size, void **con_cls)
{
    (void)cls; (void)version; (void)upload; (void)upload_size; (void)con_cls;
    const char *range = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Range");
    const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    pthread_mutex_lock(&srv.mu);
    if (srv.n_log < MAX_LOG) {
        struct req *r = &srv.log[srv.n_log++];
        snprintf(r->path, sizeof r->path, "%s", url);
        snprintf(r->range, sizeof r->range, "%s", range ? range : "");
        snprintf(r->auth, sizeof r->auth, "%s", auth ? auth : "");
    }
    int need_token = srv.require_token;
    pthread_mutex_unlock(&srv.mu);
    if (strcmp(method, "GET")) return send_text(c, MHD_HTTP_METHOD_NOT_ALLOWED, "GET only");

    if (!strncmp(url, "/cdn/", 5)) { /* signed CDN URLs: no token needed */
        for (int i = 0; i < N_FILES; i++)
            if (!strcmp(url + 5, files[i].name)) return send_file(c, i, range);
        return send_text(c, MHD_HTTP_NOT_FOUND, "no such blob");
    }
    if (need_token && (!auth || strcmp(auth, "Bearer " TOKEN)))
        return send_text(c, MHD_HTTP_UNAUTHORIZED, "{\"error\":\"Invalid credentials\"}");
    if (!strcmp(url, "/api/models/" REPO "/revision/main")) return send_listing(c);
    const char *res = "/" REPO "/resolve/" COMMIT "/";
    if (!strncmp(url, res, strlen(res))) {
        for (int i = 0; i < N_FILES; i++) {
            if (strcmp(url + strlen(res), files[i].name)) continue;
            if (!files[i].lfs) return send_file(c, i, range);
            char loc[512];
            snprintf(loc, sizeof loc, "http://127.0.0.1:%d/cdn/%s?X-Amz-Signature=0f0f", srv.port, files[i].name);
            struct MHD_Response *r = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
            MHD_add_response_header(r, "Location", loc);
            enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_FOUND, r);
            MHD_destroy_response(r);
            return ret;
        }
    }
    return send_text(c, MHD_HTTP_NOT_FOUND, "{\"error\":\"Repository not found\"}");
}

static void log_clear(void)
{
    pthread_mutex_lock(&srv.mu);
    srv.n_log = 0;
    pthread_mutex_unlock(&srv.mu);
}

/* Requests whose path starts with prefix; *last gets the last one's Range. */
static int log_count(const char *prefix, char *range, size_t n)
{
    int k = 0;
    pthread_mutex_lock(&srv.mu);
    for (int i = 0; i < srv.n_log; i++)
        if (!strncmp(srv.log[i].path, prefix, strlen(prefix))) {
            k++;
            if (range) snprintf(range, n, "%s", srv.log[i].range);
        }
    pthread_mutex_unlock(&srv.mu);
    return k;
}

/* ---- client ------------------------------------------------------------- */

static char tmp[2048], out_path[2200], err_path[2200];
static char out_text[8192], err_text[8192];

/* Run `chatterbox download ARGS` with a clean Hugging Face environment
 * plus env (e.g. "HF_TOKEN=x"); endpoint NULL: the test server. */
static int run(const char *env, const char *endpoint, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int run(const char *env, const char *endpoint, const char *fmt, ...)
{
    char ep[256], cmd[16384], args[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    if (!endpoint) {
        snprintf(ep, sizeof ep, "http://127.0.0.1:%d", srv.port);
        endpoint = ep;
    }
    snprintf(cmd, sizeof cmd,
             "env -u HF_TOKEN -u XDG_CACHE_HOME HF_ENDPOINT='%s' %s '%s/chatterbox' download %s >'%s' 2>'%s'",
             endpoint, env ? env : "", CBX_BINARY_DIR, args, out_path, err_path);
    int st = system(cmd);
    test_slurp(out_path, out_text, sizeof out_text);
    test_slurp(err_path, err_text, sizeof err_text);
    return st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static const char *dir(const char *name)
{
    static char d[4][2300];
    static int k;
    k = (k + 1) % 4;
    snprintf(d[k], sizeof d[k], "%s/%s", tmp, name);
    return d[k];
}

static int64_t fsize(const char *d, const char *name)
{
    char p[4400];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", d, name);
    return stat(p, &st) ? -1 : (int64_t)st.st_size;
}

/* Every wanted file identical to the served one, nothing else fetched. */
static int snapshot_ok(const char *d)
{
    int ok = 1;
    for (int i = 0; i < N_FILES; i++) {
        char p[4400];
        snprintf(p, sizeof p, "%s/%s", d, files[i].name);
        FILE *f = fopen(p, "rb");
        if (i >= N_WANTED) {
            if (f) {
                fprintf(stderr, "  %s: fetched but not needed\n", files[i].name);
                ok = 0;
                fclose(f);
            }
            continue;
        }
        uint8_t *buf = malloc(files[i].size + 1);
        size_t k = f && buf ? fread(buf, 1, files[i].size + 1, f) : 0;
        if (k != files[i].size || memcmp(buf, files[i].data, k)) {
            fprintf(stderr, "  %s: %zu bytes, differs from the served file\n", files[i].name, k);
            ok = 0;
        }
        char part[4500];
        snprintf(part, sizeof part, "%s.part", p);
        if (!access(part, F_OK)) {
            fprintf(stderr, "  %s left behind\n", part);
            ok = 0;
        }
        free(buf);
        if (f) fclose(f);
    }
    return ok;
}

static int closed_port(void)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t n = sizeof a;
    if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof a) || getsockname(s, (struct sockaddr *)&a, &n)) return 1;
    close(s);
    return ntohs(a.sin_port);
}

static void test_cache_dir(void)
{
    char p[4096], q[4096];
    setenv("XDG_CACHE_HOME", "/x/cache", 1);
    cbx_status rc = hf_cache_model_dir("turbo", p, sizeof p);
    CHECK(rc == CBX_OK && !strcmp(p, "/x/cache/chatterbox/" REPO), "cache dir with XDG_CACHE_HOME: %s", p);
    setenv("XDG_CACHE_HOME", "relative/cache", 1); /* ignored, per the XDG spec */
    setenv("HOME", "/home/u", 1);
    rc = hf_cache_model_dir("nano", p, sizeof p);
    CHECK(rc == CBX_OK && !strcmp(p, "/home/u/.cache/chatterbox/ResembleAI/chatterbox-nano"),
          "cache dir from HOME: %s", p);
    rc = hf_cache_model_dir("english", p, sizeof p);
    cbx_status rc2 = hf_cache_model_dir("multilingual", q, sizeof q);
    CHECK(rc == CBX_OK && rc2 == CBX_OK && strcmp(p, q), "english and multilingual get their own dirs: %s, %s", p,
          q);
    CHECK(hf_cache_model_dir("bogus", p, sizeof p) == CBX_ERR_INVALID_ARG, "unknown variant refused");
    CHECK(hf_cache_model_dir("turbo", p, 10) == CBX_ERR_INVALID_ARG, "short buffer refused");
    unsetenv("XDG_CACHE_HOME");
    unsetenv("HOME");
    CHECK(hf_cache_model_dir("turbo", p, sizeof p) == CBX_ERR_NOT_FOUND, "no HOME: not found");
}

int main(void)
{
    snprintf(tmp, sizeof tmp, "%s", test_tmpdir("download"));
    snprintf(out_path, sizeof out_path, "%s/stdout", tmp);
    snprintf(err_path, sizeof err_path, "%s/stderr", tmp);

    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < N_FILES; i++) {
        files[i].data = malloc(files[i].size);
        if (!files[i].data) return 1;
        for (size_t k = 0; k < files[i].size; k++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            files[i].data[k] = files[i].lfs ? (uint8_t)x : (uint8_t)('a' + x % 26);
        }
        struct sha256 s;
        uint8_t d[SHA256_DIGEST_SIZE];
        sha256_init(&s);
        sha256_update(&s, files[i].data, files[i].size);
        sha256_final(&s, d);
        sha256_hex(d, files[i].sha);
    }

    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = 0, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    srv.d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION, 0, NULL, NULL,
                             handler, NULL, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr, MHD_OPTION_END);
    const union MHD_DaemonInfo *info = srv.d ? MHD_get_daemon_info(srv.d, MHD_DAEMON_INFO_BIND_PORT) : NULL;
    CHECK(info && info->port, "loopback server started");
    if (!info || !info->port) return test_summary();
    srv.port = info->port;

    /* usage errors: exit 2, one line */
    int rc = run(NULL, NULL, "%s", "");
    CHECK(rc == 2 && test_count_lines(err_text) == 1 && strstr(err_text, "turbo"), "no variant: exit %d: %s", rc,
          err_text);
    rc = run(NULL, NULL, "turbo nano");
    CHECK(rc == 2 && test_count_lines(err_text) == 1, "two variants: exit %d: %s", rc, err_text);
    rc = run(NULL, NULL, "turbo --retries x");
    CHECK(rc == 2 && test_count_lines(err_text) == 1 && strstr(err_text, "--retries"), "bad --retries: exit %d: %s", rc,
          err_text);
    rc = run(NULL, NULL, "bogus");
    CHECK(rc == 2 && test_count_lines(err_text) == 1 && strstr(err_text, "unknown variant 'bogus'"),
          "unknown variant: exit %d: %s", rc, err_text);

    /* 1. complete download; stdout is the directory; one stderr line per file */
    const char *d1 = dir("d1");
    rc = run(NULL, NULL, "turbo --dir '%s'", d1);
    char want[2400];
    snprintf(want, sizeof want, "%s\n", d1);
    CHECK(rc == 0 && !strcmp(out_text, want), "download: exit %d, stdout '%s'", rc, out_text);
    CHECK(snapshot_ok(d1), "download: the %d needed files identical to the served ones, no others", N_WANTED);
    int per_file = 1;
    for (int i = 0; i < N_FILES; i++) {
        char pat[128];
        snprintf(pat, sizeof pat, "] %s:", files[i].name);
        if ((strstr(err_text, pat) != NULL) != (i < N_WANTED)) per_file = 0;
    }
    CHECK(per_file && test_count_lines(err_text) == N_WANTED + 1,
          "non-tty progress: a header and one line per file (%d lines)", test_count_lines(err_text));
    char range[64] = "";
    int n_cdn = log_count("/cdn/", range, sizeof range);
    CHECK(n_cdn == 4 && log_count("/" REPO "/resolve/" COMMIT "/", NULL, 0) == N_WANTED,
          "files resolved at the listed commit, LFS files through the redirect (%d CDN requests)", n_cdn);
    CHECK(hf_snapshot_complete(d1), "manifest: complete");

    /* 2. already complete: no network at all, only the path */
    log_clear();
    rc = run(NULL, NULL, "turbo --dir '%s'", d1);
    CHECK(rc == 0 && !strcmp(out_text, want) && err_text[0] == 0 && log_count("/", NULL, 0) == 0,
          "complete snapshot: exit %d, %d requests, stderr '%s'", rc, log_count("/", NULL, 0), err_text);

    /* the manifest of another variant does not count (english: the
     * server has no ResembleAI/chatterbox, so this run must ask and fail) */
    log_clear();
    rc = run(NULL, NULL, "english --dir '%s'", d1);
    CHECK(rc == 1 && log_count("/api/models/ResembleAI/chatterbox/", NULL, 0) == 1 && strstr(err_text, "404"),
          "turbo manifest, english requested: exit %d, listing asked for", rc);

    /* a deleted file: only that one is fetched again */
    char p[4400];
    snprintf(p, sizeof p, "%s/%s", d1, files[VE].name);
    unlink(p);
    CHECK(!hf_snapshot_complete(d1), "manifest: incomplete after a file is deleted");
    log_clear();
    rc = run(NULL, NULL, "turbo --quiet --dir '%s'", d1);
    CHECK(rc == 0 && snapshot_ok(d1) && log_count("/cdn/", NULL, 0) == 1 &&
              log_count("/cdn/ve.safetensors", NULL, 0) == 1 && err_text[0] == 0,
          "one missing file: only it is fetched (exit %d, %d CDN requests), --quiet prints nothing", rc,
          log_count("/cdn/", NULL, 0));

    /* 3. resume across runs: the connection drops at 1 MB, no retries */
    const char *d2 = dir("d2");
    pthread_mutex_lock(&srv.mu);
    srv.drop_file = T3;
    srv.drop_at = 1u << 20;
    srv.drops_left = 100;
    pthread_mutex_unlock(&srv.mu);
    rc = run(NULL, NULL, "turbo --retries 0 --dir '%s'", d2);
    int64_t k = fsize(d2, "t3_turbo_v1.safetensors.part");
    CHECK(rc == 1 && test_count_lines(err_text) >= 1 && strstr(err_text, "run again to resume") &&
              k > 0 && k <= (int64_t)srv.drop_at && fsize(d2, "t3_turbo_v1.safetensors") < 0,
          "dropped connection: exit %d, .part keeps %lld bytes: %s", rc, (long long)k, err_text);
    pthread_mutex_lock(&srv.mu);
    srv.drops_left = 0;
    pthread_mutex_unlock(&srv.mu);
    log_clear();
    rc = run(NULL, NULL, "turbo --dir '%s'", d2);
    char want_range[64];
    snprintf(want_range, sizeof want_range, "bytes=%lld-", (long long)k);
    range[0] = 0;
    log_count("/cdn/t3_turbo_v1.safetensors", range, sizeof range);
    CHECK(rc == 0 && snapshot_ok(d2), "resume: exit %d, files identical", rc);
    CHECK(!strcmp(range, want_range) && log_count("/cdn/t3_turbo_v1.safetensors", NULL, 0) == 1,
          "resume: the server saw Range '%s' (want '%s')", range, want_range);

    /* a server that ignores Range (200, whole file): the .part restarts */
    const char *d9 = dir("d9");
    mkdir(d9, 0777);
    snprintf(p, sizeof p, "%s/t3_turbo_v1.safetensors.part", d9);
    FILE *pf = fopen(p, "wb");
    if (pf) {
        fwrite(files[T3].data, 1, 1000, pf);
        fclose(pf);
    }
    pthread_mutex_lock(&srv.mu);
    srv.ignore_range = 1;
    pthread_mutex_unlock(&srv.mu);
    log_clear();
    rc = run(NULL, NULL, "turbo --dir '%s'", d9);
    range[0] = 0;
    log_count("/cdn/t3_turbo_v1.safetensors", range, sizeof range);
    CHECK(rc == 0 && snapshot_ok(d9) && !strcmp(range, "bytes=1000-"),
          "Range ignored by the server: exit %d, asked '%s', file identical", rc, range);
    pthread_mutex_lock(&srv.mu);
    srv.ignore_range = 0;
    pthread_mutex_unlock(&srv.mu);

    /* 4. a drop within one run is resumed automatically */
    const char *d3 = dir("d3");
    pthread_mutex_lock(&srv.mu);
    srv.drops_left = 1;
    pthread_mutex_unlock(&srv.mu);
    log_clear();
    rc = run(NULL, NULL, "turbo --dir '%s'", d3);
    range[0] = 0;
    int n_t3 = log_count("/cdn/t3_turbo_v1.safetensors", range, sizeof range);
    CHECK(rc == 0 && snapshot_ok(d3) && n_t3 == 2 && !strncmp(range, "bytes=", 6) && strcmp(range, "bytes=0-") &&
              strstr(err_text, "retry 1"),
          "automatic resume: exit %d, %d requests for the file, the second with Range '%s'", rc, n_t3, range);
    pthread_mutex_lock(&srv.mu);
    srv.drop_file = -1;
    srv.require_token = 1;
    pthread_mutex_unlock(&srv.mu);

    /* 5. token: 401 without it (hint names HF_TOKEN), sent when set */
    const char *d4 = dir("d4");
    rc = run(NULL, NULL, "turbo --dir '%s'", d4);
    CHECK(rc == 1 && test_count_lines(err_text) == 1 && strstr(err_text, "401") && strstr(err_text, "HF_TOKEN"),
          "no token: exit %d: %s", rc, err_text);
    rc = run("HF_TOKEN=wrong", NULL, "turbo --dir '%s'", d4);
    CHECK(rc == 1 && test_count_lines(err_text) == 1 && strstr(err_text, "refused"), "wrong token: exit %d: %s", rc,
          err_text);
    log_clear();
    rc = run("HF_TOKEN=" TOKEN, NULL, "turbo --dir '%s'", d4);
    pthread_mutex_lock(&srv.mu);
    int bearer = srv.n_log > 0 && !strcmp(srv.log[0].auth, "Bearer " TOKEN);
    srv.require_token = 0;
    pthread_mutex_unlock(&srv.mu);
    CHECK(rc == 0 && snapshot_ok(d4) && bearer, "HF_TOKEN: exit %d, Authorization header sent: %d", rc, bearer);

    /* 6. 404: a repository the server does not have */
    rc = run(NULL, NULL, "nano --dir '%s'", dir("d5"));
    CHECK(rc == 1 && test_count_lines(err_text) == 1 && strstr(err_text, "404") && out_text[0] == 0,
          "404: exit %d: %s", rc, err_text);

    /* 7. checksum mismatch: the file is removed, a later run recovers */
    const char *d6 = dir("d6");
    pthread_mutex_lock(&srv.mu);
    srv.bad_sha_file = VE;
    pthread_mutex_unlock(&srv.mu);
    rc = run(NULL, NULL, "turbo --dir '%s'", d6);
    CHECK(rc == 1 && strstr(err_text, "checksum mismatch for ve.safetensors") &&
              fsize(d6, "ve.safetensors") < 0 && fsize(d6, "ve.safetensors.part") < 0 &&
              fsize(d6, HF_MANIFEST_NAME) < 0,
          "checksum mismatch: exit %d, file removed: %s", rc, err_text);
    pthread_mutex_lock(&srv.mu);
    srv.bad_sha_file = -1;
    pthread_mutex_unlock(&srv.mu);
    rc = run(NULL, NULL, "turbo --dir '%s'", d6);
    CHECK(rc == 0 && snapshot_ok(d6), "after the mismatch a new run completes: exit %d", rc);

    /* 8. unreachable endpoint (a closed port), unresolvable host */
    char ep[128];
    snprintf(ep, sizeof ep, "http://127.0.0.1:%d", closed_port());
    rc = run(NULL, ep, "turbo --dir '%s'", dir("d7"));
    CHECK(rc == 1 && test_count_lines(err_text) == 1 && strstr(err_text, "cannot connect") &&
              strstr(err_text, "refused"),
          "closed port: exit %d: %s", rc, err_text);
    rc = run(NULL, "http://no-such-host.invalid", "turbo --dir '%s'", dir("d7"));
    CHECK(rc == 1 && test_count_lines(err_text) == 1 && strstr(err_text, "cannot resolve host"),
          "unresolvable host: exit %d: %s", rc, err_text);

    /* 9. disk full: the .part is /dev/full */
    const char *d8 = dir("d8");
    mkdir(d8, 0777);
    snprintf(p, sizeof p, "%s/t3_turbo_v1.safetensors.part", d8);
    if (symlink("/dev/full", p)) perror("symlink");
    rc = run(NULL, NULL, "turbo --quiet --dir '%s'", d8); /* --quiet: the error line only */
    CHECK(rc == 1 && test_count_lines(err_text) == 1 && strstr(err_text, "No space left on device") &&
              strstr(err_text, "disk full"),
          "disk full: exit %d: %s", rc, err_text);

    /* 10. default directory: the XDG cache */
    char env[2400];
    snprintf(env, sizeof env, "XDG_CACHE_HOME='%s/xdg'", tmp);
    rc = run(env, NULL, "turbo --quiet");
    snprintf(want, sizeof want, "%s/xdg/chatterbox/" REPO "\n", tmp);
    CHECK(rc == 0 && !strcmp(out_text, want) && err_text[0] == 0, "default dir: exit %d, stdout '%s'", rc,
          out_text);

    test_cache_dir();

    MHD_stop_daemon(srv.d);
    for (int i = 0; i < N_FILES; i++) free(files[i].data);
    return test_summary();
}
