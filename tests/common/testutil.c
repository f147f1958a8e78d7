/* testutil.c - see testutil.h. */
#include "testutil.h"

#include <dirent.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/backend.h"
#include "core/cpu_features.h"
#include "core/ops.h"
#include "core/rng.h"
#include "io/audio.h"
#include "io/model_dir.h"
#include "io/model_file.h"
#include "pipeline/engine.h"
#include "t3/t3.h"

int test_failures, test_checks;

void test_check(bool ok, const char *file, int line, const char *fmt, ...)
{
    test_checks++;
    if (ok) return;
    test_failures++;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "FAIL %s:%d: ", file, line);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

double rel_error(const float *got, const float *want, size_t n, double *max_abs)
{
    double ma = 0, mw = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - (double)want[i]);
        if (!(d <= ma)) ma = d; /* NaN propagates */
        double w = fabs((double)want[i]);
        if (w > mw) mw = w;
    }
    if (max_abs) *max_abs = ma;
    return mw > 0 ? ma / mw : ma;
}

bool check_close(const char *what, const float *got, const float *want, size_t n,
                 double atol, double rtol)
{
    double ma, rel = rel_error(got, want, n, &ma);
    bool ok = (rel <= rtol) || (ma <= atol);
    printf("%-48s n=%-9zu max_abs=%.3e rel=%.3e tol(abs %.1e, rel %.1e) %s\n", what, n,
           ma, rel, atol, rtol, ok ? "PASS" : "FAIL");
    test_check(ok, __FILE__, __LINE__, "%s: max_abs %.3e rel %.3e", what, ma, rel);
    return ok;
}

void fill_uniform(float *dst, size_t n, float lo, float hi, uint64_t seed)
{
    struct rng_stream s;
    rng_stream_init(&s, "test", seed);
    for (size_t i = 0; i < n; i++) dst[i] = lo + (hi - lo) * rng_uniform(&s);
}

const char *test_backend_name(void)
{
    const char *n = getenv("CBX_TEST_BACKEND");
    return n && *n ? n : "cpu";
}

const struct backend *test_backend(void)
{
    static struct backend *be;
    char err[ERR_MAX];
    if (!be && !(be = backend_create(test_backend_name(), 0, false, err))) {
        fprintf(stderr, "test: %s\n", err);
        exit(2);
    }
    return be;
}

struct backend *test_compute_backend(int n_threads)
{
    char err[ERR_MAX];
    struct backend *be = backend_create_like(test_backend(), n_threads, false, err);
    if (!be) {
        fprintf(stderr, "test: %s\n", err);
        exit(2);
    }
    return be;
}

const char *test_data(const char *rel)
{
    static char buf[4096];
    snprintf(buf, sizeof buf, "%s/%s", CBX_TEST_DATA, rel);
    return buf;
}

const char *test_tmpdir(const char *tag)
{
    static char buf[4096];
    snprintf(buf, sizeof buf, "%s/test-tmp/%s-%d", CBX_BINARY_DIR, tag, (int)getpid());
    char cmd[8400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", buf, buf);
    if (system(cmd) != 0) {
        fprintf(stderr, "cannot create %s\n", buf);
        exit(2);
    }
    return buf;
}

void *test_read_file(const char *path, size_t *n)
{
    *n = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *b = NULL;
    long len = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (len >= 0 && fseek(f, 0, SEEK_SET) == 0 && (b = malloc((size_t)len + 1))) {
        *n = fread(b, 1, (size_t)len, f);
        b[*n] = 0;
    }
    fclose(f);
    return b;
}

void test_slurp(const char *path, char *buf, size_t n)
{
    buf[0] = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return;
    size_t k = fread(buf, 1, n - 1, f);
    buf[k] = 0;
    fclose(f);
}

int test_count_lines(const char *s)
{
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

bool test_exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0;
}

int test_count_files(const char *dir, const char *suffix, char *first, size_t n)
{
    DIR *d = opendir(dir);
    if (!d) return -1;
    int k = 0;
    const size_t sl = strlen(suffix);
    for (struct dirent *e; (e = readdir(d));) {
        const size_t l = strlen(e->d_name);
        if (l <= sl || strcmp(e->d_name + l - sl, suffix)) continue;
        if (k++ == 0 && first) snprintf(first, n, "%s/%s", dir, e->d_name);
    }
    closedir(d);
    return k;
}

const char *test_path(const char *dir, const char *name)
{
    static char buf[4][4352];
    static int i;
    i = (i + 1) % 4;
    snprintf(buf[i], sizeof buf[i], "%s/%s", dir, name);
    return buf[i];
}

const char *test_model_dir(const char *variant)
{
    static char buf[4096];
    snprintf(buf, sizeof buf, "%s/models/%s", CBX_BINARY_DIR, variant);
    return buf;
}

struct model_dir *test_open_model_dir(const char *variant)
{
    char err[ERR_MAX] = "";
    const char *path = test_model_dir(variant);
    struct model_dir *md = NULL;
    cbx_status rc = model_dir_open(path, &md, err);
    CHECK(rc == CBX_OK, "open %s: %s", path, err);
    return rc == CBX_OK ? md : NULL;
}

struct model *test_open_model(const char *path)
{
    char err[ERR_MAX] = "";
    struct model *md = NULL;
    cbx_status rc = model_open(path, &md, err);
    CHECK(rc == CBX_OK, "open %s: %s", path, err);
    return rc == CBX_OK ? md : NULL;
}

struct model *test_open_model_env(const char *env, const char *variant)
{
    const char *v = getenv(env);
    return test_open_model(v && *v ? v : test_model_dir(variant));
}

bool test_load_t3_f32_q4(const struct model *md, struct t3_model *m, struct t3_model *mq)
{
    char err[ERR_MAX] = "";
    struct weights w = model_weights(md, MODEL_T3);
    cbx_status rc = t3_load(m, &w, test_backend(), TYPE_F32, err);
    CHECK(rc == CBX_OK, "t3_load_gpt2 f32: %s", err);
    cbx_status rcq = t3_load(mq, &w, test_backend(), TYPE_Q4_0, err);
    CHECK(rcq == CBX_OK, "t3_load_gpt2 q4_0: %s", err);
    return rc == CBX_OK && rcq == CBX_OK;
}

void test_free_t3_f32_q4(struct model *md, struct t3_model *m, struct t3_model *mq)
{
    t3_free(mq);
    t3_free(m);
    model_close(md);
}

bool test_read_audio(const char *name, int rate, struct audio *a)
{
    char err[ERR_MAX] = "";
    cbx_status rc = io_audio_read(test_data(name), a, err);
    CHECK(rc == CBX_OK && a->sample_rate == rate, "read %s: %s", name, err);
    return rc == CBX_OK && a->sample_rate == rate;
}

void *test_host_bytes(const struct tensor *t)
{
    const size_t n = tensor_nbytes(t);
    void *h = malloc(n ? n : 1);
    if (!h) return NULL;
    if (!t->be || t->be->host) memcpy(h, t->data, n);
    else if (!t->be->to_host(t->be, h, t->data, n)) {
        free(h);
        return NULL;
    }
    return h;
}

struct tensor *test_upload(struct arena *a, const struct tensor *h)
{
    return op_from_host(a, h->type, h->ndim, h->ne, h->data);
}

float *test_host_copy(struct arena *a, const struct tensor *t)
{
    if (!t) {
        printf("  op failed: %s\n", arena_errmsg(a));
        return NULL;
    }
    float *h = malloc(tensor_nbytes(t) + 1);
    if (h && tensor_to_host(t, h) != CBX_OK) {
        free(h);
        return NULL;
    }
    return h;
}

float *test_tensor_values(const char *what, const struct tensor *got, int64_t n)
{
    if (!got || tensor_nelements(got) != n) {
        CHECK(false, "%s: result missing or %lld elements, want %lld", what,
              got ? (long long)tensor_nelements(got) : -1LL, (long long)n);
        return NULL;
    }
    float *buf = malloc((size_t)n * sizeof *buf);
    bool ok = buf && tensor_to_host(got, buf) == CBX_OK;
    CHECK(ok, "%s: read back", what);
    if (!ok) {
        free(buf);
        return NULL;
    }
    return buf;
}

void check_cosine_rows(const char *what, const float *got, const float *want, int64_t rows, int64_t d,
                  double min_cos)
{
    double worst = 1.0, max_abs = 0.0;
    for (int64_t r = 0; r < rows; r++) {
        double gw = 0, gg = 0, ww = 0;
        for (int64_t i = 0; i < d; i++) {
            double g = got[r * d + i], w = want[r * d + i];
            gw += g * w, gg += g * g, ww += w * w;
            if (fabs(g - w) > max_abs) max_abs = fabs(g - w);
        }
        double c = gw / (sqrt(gg) * sqrt(ww) + 1e-30);
        if (!(c >= worst)) worst = c;
    }
    bool ok = worst >= min_cos;
    printf("%-48s rows=%-4lld min_cos=%.8f max_abs=%.3e tol(cos >= %.5f) %s\n", what,
           (long long)rows, worst, max_abs, min_cos, ok ? "PASS" : "FAIL");
    CHECK(ok, "%s: cosine %.8f < %.5f", what, worst, min_cos);
}

struct npy test_fixture(const char *variant, const char *name)
{
    char rel[512], err[ERR_MAX];
    snprintf(rel, sizeof rel, "%s/%s.npy", variant, name);
    const char *path = test_data(rel);
    struct npy n;
    if (io_npy_read(path, &n, err) != CBX_OK) {
        fprintf(stderr, "%s\n", err);
        exit(2);
    }
    return n;
}

int64_t test_numel(const struct npy *n)
{
    int64_t k = 1;
    for (int d = 0; d < n->ndim; d++) k *= n->ne[d];
    return k;
}

static double clock_seconds(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double test_now(void) { return clock_seconds(CLOCK_MONOTONIC); }
double test_cpu_seconds(void) { return clock_seconds(CLOCK_PROCESS_CPUTIME_ID); }

int test_summary(void)
{
    printf("%d checks, %d failed\n", test_checks, test_failures);
    return test_failures ? 1 : 0;
}

int test_copy_file(const char *from, const char *to)
{
    FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
    int ok = a && b;
    char buf[65536];
    size_t k;
    while (ok && (k = fread(buf, 1, sizeof buf, a)) > 0) ok = fwrite(buf, 1, k, b) == k;
    if (a) fclose(a);
    if (b && fclose(b) != 0) ok = 0;
    return ok;
}

void test_fixture_voice_dir(const char *variant, const char *dir)
{
    char cmd[4400], from[4400], to[4400];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
    CHECK(system(cmd) == 0, "mkdir %s", dir);
    static const char *const map[][2] = {{"ve_embedding", "speaker_emb"},
                                         {"t3_cond_prompt_tokens", "cond_prompt_speech_tokens"},
                                         {"s3gen_prompt_tokens", "prompt_token"},
                                         {"s3gen_prompt_mel", "prompt_feat"},
                                         {"campplus_embedding", "embedding"}};
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
        snprintf(from, sizeof from, "%s/%s.npy", test_data(variant), map[i][0]);
        snprintf(to, sizeof to, "%s/%s.npy", dir, map[i][1]);
        CHECK(test_copy_file(from, to), "voice: %s -> %s", map[i][0], map[i][1]);
    }
}

int test_n_threads(void)
{
    DIR *d = opendir("/proc/self/task");
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) n += e->d_name[0] != '.';
    if (d) closedir(d);
    return n;
}

int test_run_cli(const char *cmd, const char *args, bool err2, char *out, size_t n)
{
    char line[8192];
    snprintf(line, sizeof line, "'%s/chatterbox' %s %s %s", CBX_BINARY_DIR, cmd, args, err2 ? "2>&1" : "2>/dev/null");
    FILE *p = popen(line, "r");
    if (!p) return -1;
    size_t k = fread(out, 1, n - 1, p);
    out[k] = 0;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

struct engine_model *test_load_engine_t3(const char *dir, const char *backend, int wtype, const char *label)
{
    char err[ERR_MAX] = "";
    struct engine_load_params lp = engine_load_default_params();
    lp.backend = backend ? backend : test_backend_name();
    lp.t3_only = true;
    lp.wtype = wtype;
    struct engine_model *em = NULL;
    cbx_status rc = engine_model_load(dir, &lp, &em, err);
    CHECK(rc == CBX_OK, "%s: load %s: %s", label, dir, err);
    return rc == CBX_OK ? em : NULL;
}

bool test_bf16_engine(int e)
{
    cpu_set_amx(e == 0);
    const char *name = e == 0 ? "AMX-BF16" : "AVX512-BF16";
    if (!cpu_avx512_bf16_ready() || (e == 0 && !cpu_amx_bf16_ready())) {
        printf("%s: not on this machine, not checked\n", name);
        return false;
    }
    printf("engine %s\n", name);
    return true;
}

bool test_bf16_usable(const char *what)
{
    if (cpu_avx512_bf16_ready()) return true;
    printf("AVX512-BF16 not usable on this machine (avx512_bf16 %d, level %s): the BF16 %s path is not "
           "taken, nothing to test\n",
           cpu_features()->avx512_bf16, cpu_level_name(cpu_level()), what);
    return false;
}
