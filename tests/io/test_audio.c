/* test_audio.c - io_audio: write/read round trips (PCM16, float, FLAC),
 * clipping, stereo mixdown, the reference voice fixtures against their raw
 * int16 samples, lossy formats libsndfile decodes (Ogg/Vorbis, Opus, MP3),
 * reading from memory, and the errors: missing, garbage, truncated,
 * zero-length, absurd rate, too long, unwritable target, non-finite. */
#include <math.h>
#include <sndfile.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "io/audio.h"
#include "testutil.h"

static const char *dir;

static const char *tpath(const char *name) { return test_path(dir, name); }

static int count_entries(const char *d)
{
    DIR *dd = opendir(d);
    if (!dd) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(dd)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
    closedir(dd);
    return n;
}

static void put16(unsigned char *p, unsigned v) { p[0] = v & 255; p[1] = (v >> 8) & 255; }
static void put32(unsigned char *p, unsigned v) { put16(p, v & 0xffff); put16(p + 2, v >> 16); }

/* A canonical 44-byte PCM WAV header. */
static void wav_header(unsigned char *h, unsigned rate, unsigned ch, unsigned bits,
                       unsigned data_bytes)
{
    memcpy(h, "RIFF", 4);
    put32(h + 4, 36 + data_bytes);
    memcpy(h + 8, "WAVEfmt ", 8);
    put32(h + 16, 16);
    put16(h + 20, 1);
    put16(h + 22, ch);
    put32(h + 24, rate);
    put32(h + 28, rate * ch * bits / 8);
    put16(h + 32, ch * bits / 8);
    put16(h + 34, bits);
    memcpy(h + 36, "data", 4);
    put32(h + 40, data_bytes);
}

static int write_bytes(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = fwrite(p, 1, n, f);
    return fclose(f) == 0 && w == n ? 0 : -1;
}

static unsigned char *read_bytes(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = len > 0 ? malloc((size_t)len) : NULL;
    *n = b ? fread(b, 1, (size_t)len, f) : 0;
    fclose(f);
    return b;
}

static void test_round_trip(void)
{
    enum { N = 10007 };
    static float x[N];
    fill_uniform(x, N, -0.999f, 0.999f, 1);
    char err[ERR_MAX];
    const struct { enum audio_format fmt; const char *name; double tol; } f[3] = {
        /* libsndfile 1.2 rounds to the nearest int16 for FLAC but floors
         * (x * 2^31 rounded, then >> 16) for WAV: both stay within 1/32768 */
        {AUDIO_WAV_PCM16, "rt16.wav", 1.0 / 32768},
        {AUDIO_WAV_FLOAT, "rtf.wav", 0},
        {AUDIO_FLAC, "rt.flac", 1.0 / 32768},
    };
    for (int k = 0; k < 3; k++) {
        struct audio a = {0};
        cbx_status rc = io_audio_write(tpath(f[k].name), x, N, 24000, f[k].fmt, err);
        CHECK(rc == CBX_OK, "write %s: %s", f[k].name, rc ? err : "");
        rc = io_audio_read(tpath(f[k].name), &a, err);
        CHECK(rc == CBX_OK, "read %s: %s", f[k].name, rc ? err : "");
        CHECK(a.n == N && a.sample_rate == 24000 && a.channels == 1,
              "%s: n %lld rate %d channels %d", f[k].name, (long long)a.n, a.sample_rate,
              a.channels);
        if (a.n == N) {
            char what[64];
            snprintf(what, sizeof what, "round trip %s", f[k].name);
            check_close(what, a.pcm, x, N, f[k].tol, 0);
            if (f[k].fmt == AUDIO_WAV_FLOAT)
                CHECK(memcmp(a.pcm, x, sizeof x) == 0, "float wav is bit-exact");
            else {
                /* every sample is a multiple of 1/32768 */
                bool grid = true;
                for (int i = 0; i < N; i++) grid &= a.pcm[i] * 32768.0f == rintf(a.pcm[i] * 32768.0f);
                CHECK(grid, "%s samples are int16 / 32768", f[k].name);
            }
        }
        io_audio_free(&a);
    }
    CHECK(count_entries(dir) == 3, "no temporary files left (%d entries)", count_entries(dir));

    /* clipping instead of wrap-around, for PCM16 and FLAC */
    const float big[4] = {2.0f, -2.0f, 1.0f, -1.5f};
    const float want[4] = {32767 / 32768.0f, -1.0f, 32767 / 32768.0f, -1.0f};
    const char *cn[2] = {"clip.wav", "clip.flac"};
    for (int k = 0; k < 2; k++) {
        struct audio a = {0};
        cbx_status rc = io_audio_write(tpath(cn[k]), big, 4, 16000,
                                       k ? AUDIO_FLAC : AUDIO_WAV_PCM16, err);
        if (rc == CBX_OK) rc = io_audio_read(tpath(cn[k]), &a, err);
        CHECK(rc == CBX_OK && a.n == 4, "clip %s: %s", cn[k], rc ? err : "");
        if (a.n == 4) check_close(cn[k], a.pcm, want, 4, 0, 0);
        io_audio_free(&a);
    }
    /* overwrite replaces the earlier file */
    float one[3] = {0.25f, -0.25f, 0.5f};
    struct audio a = {0};
    CHECK(io_audio_write(tpath("rtf.wav"), one, 3, 8000, AUDIO_WAV_FLOAT, err) == CBX_OK,
          "overwrite");
    CHECK(io_audio_read(tpath("rtf.wav"), &a, err) == CBX_OK && a.n == 3 && a.sample_rate == 8000,
          "overwritten file has the new content");
    io_audio_free(&a);
}

/* Stereo written by libsndfile directly, mixed down by averaging. */
static void test_mixdown(void)
{
    enum { N = 999 };
    static float lr[2 * N], want[N];
    fill_uniform(lr, 2 * N, -1, 1, 2);
    for (int i = 0; i < N; i++) want[i] = (lr[2 * i] + lr[2 * i + 1]) / 2;
    SF_INFO info = {.samplerate = 44100, .channels = 2, .format = SF_FORMAT_WAV | SF_FORMAT_FLOAT};
    SNDFILE *sf = sf_open(tpath("stereo.wav"), SFM_WRITE, &info);
    CHECK(sf != NULL, "libsndfile writes stereo");
    if (!sf) return;
    sf_writef_float(sf, lr, N);
    sf_close(sf);
    struct audio a = {0};
    char err[ERR_MAX];
    cbx_status rc = io_audio_read(tpath("stereo.wav"), &a, err);
    CHECK(rc == CBX_OK && a.n == N && a.channels == 2 && a.sample_rate == 44100,
          "stereo read: %s", rc ? err : "");
    if (a.n == N) check_close("stereo mixdown = channel mean", a.pcm, want, N, 0, 0);
    io_audio_free(&a);
}

/* The fixtures: 16-bit mono, exactly 10 s; compare with the raw samples
 * found by walking the RIFF chunks here. */
static void test_fixtures(void)
{
    const char *names[2] = {"ref_voice_24k.wav", "ref_voice_16k.wav"};
    const int rates[2] = {24000, 16000};
    for (int k = 0; k < 2; k++) {
        char err[ERR_MAX];
        struct audio a = {0};
        size_t nb = 0;
        unsigned char *raw = read_bytes(test_data(names[k]), &nb);
        cbx_status rc = io_audio_read(test_data(names[k]), &a, err);
        CHECK(rc == CBX_OK, "%s: %s", names[k], rc ? err : "");
        CHECK(a.sample_rate == rates[k] && a.channels == 1 && a.n == 10 * (int64_t)rates[k],
              "%s: rate %d channels %d n %lld", names[k], a.sample_rate, a.channels,
              (long long)a.n);
        const unsigned char *data = NULL;
        size_t dn = 0;
        for (size_t p = 12; raw && p + 8 <= nb;) {
            size_t len = raw[p + 4] | raw[p + 5] << 8 | raw[p + 6] << 16 | (size_t)raw[p + 7] << 24;
            if (!memcmp(raw + p, "data", 4)) { data = raw + p + 8; dn = len; break; }
            p += 8 + len + (len & 1);
        }
        CHECK(data && dn / 2 == (size_t)a.n, "%s: data chunk of %zu samples", names[k], dn / 2);
        if (data && dn / 2 == (size_t)a.n) {
            float *want = malloc(dn / 2 * sizeof *want);
            for (size_t i = 0; want && i < dn / 2; i++)
                want[i] = (float)(int16_t)(data[2 * i] | data[2 * i + 1] << 8) / 32768.0f;
            if (want) check_close(names[k], a.pcm, want, dn / 2, 0, 0);
            free(want);
        }
        /* the same bytes from memory */
        struct audio m = {0};
        rc = io_audio_read_mem(raw, nb, names[k], 0, &m, err);
        CHECK(rc == CBX_OK && m.n == a.n && a.pcm && m.pcm &&
              memcmp(m.pcm, a.pcm, (size_t)a.n * sizeof *a.pcm) == 0,
              "%s read from memory equals the file read", names[k]);
        io_audio_free(&m);
        free(raw);
        io_audio_free(&a);
    }
}

/* Lossy formats are decoded as long as libsndfile can write them here. */
static void test_lossy(void)
{
    const struct { int format; const char *name; } f[3] = {
        {SF_FORMAT_OGG | SF_FORMAT_VORBIS, "sine.ogg"},
        {SF_FORMAT_OGG | SF_FORMAT_OPUS, "sine.opus"},
        {SF_FORMAT_MPEG | SF_FORMAT_MPEG_LAYER_III, "sine.mp3"},
    };
    static float s[24000];
    for (int i = 0; i < 24000; i++) s[i] = 0.5f * sinf(2 * (float)M_PI * 440 * i / 24000);
    for (int k = 0; k < 3; k++) {
        SF_INFO info = {.samplerate = k == 1 ? 48000 : 24000, .channels = 1, .format = f[k].format};
        if (!sf_format_check(&info)) { printf("skip %s: not in this libsndfile\n", f[k].name); continue; }
        SNDFILE *sf = sf_open(tpath(f[k].name), SFM_WRITE, &info);
        if (!sf) { printf("skip %s: %s\n", f[k].name, sf_strerror(NULL)); continue; }
        sf_writef_float(sf, s, 24000);
        sf_close(sf);
        struct audio a = {0};
        char err[ERR_MAX];
        cbx_status rc = io_audio_read(tpath(f[k].name), &a, err);
        double e2 = 0;
        for (int64_t i = 0; i < a.n; i++) e2 += (double)a.pcm[i] * a.pcm[i];
        double rms = a.n ? sqrt(e2 / (double)a.n) : 0;
        CHECK(rc == CBX_OK && a.sample_rate == info.samplerate && llabs(a.n - 24000) <= 3000 &&
              rms > 0.3 && rms < 0.4, "%s: %s n %lld rms %.3f (want ~24000, 0.354)", f[k].name,
              rc ? err : "ok", (long long)a.n, rms);
        printf("%-48s n=%lld rms=%.4f\n", f[k].name, (long long)a.n, rms);
        io_audio_free(&a);
    }
}

static void expect_fail(const char *what, cbx_status rc, const char *err, cbx_status want,
                        const char *needle)
{
    bool ok = rc == want && strstr(err, needle);
    printf("%-48s %s: %s\n", what, ok ? "PASS" : "FAIL", rc ? err : "(no error)");
    CHECK(ok, "%s: status %d (want %d), message '%s' should mention '%s'", what, rc, want,
          rc ? err : "(no error)", needle);
}

static void test_read_errors(void)
{
    char err[ERR_MAX] = "";
    struct audio a = {0};
    cbx_status rc = io_audio_read(tpath("missing.wav"), &a, err);
    expect_fail("missing file", rc, err, CBX_ERR_IO, "missing.wav");
    CHECK(a.pcm == NULL && a.n == 0, "failed read leaves an empty struct");

    unsigned char g[300];
    for (int i = 0; i < 300; i++) g[i] = (unsigned char)(i * 37 + 11);
    write_bytes(tpath("garbage.wav"), g, sizeof g);
    rc = io_audio_read(tpath("garbage.wav"), &a, err);
    expect_fail("garbage file", rc, err, CBX_ERR_FORMAT, "not a readable audio file");
    rc = io_audio_read_mem(g, sizeof g, "upload", 0, &a, err);
    expect_fail("garbage in memory", rc, err, CBX_ERR_FORMAT, "upload");
    rc = io_audio_read_mem(g, 0, NULL, 0, &a, err);
    expect_fail("empty buffer", rc, err, CBX_ERR_FORMAT, "empty");
    rc = io_audio_read(dir, &a, err);
    expect_fail("directory", rc, err, CBX_ERR_IO, "directory");

    unsigned char w[44 + 200];
    wav_header(w, 16000, 1, 16, 200);
    for (int i = 44; i < 244; i++) w[i] = (unsigned char)i;
    write_bytes(tpath("trunc.wav"), w, 30); /* cut inside the fmt chunk */
    rc = io_audio_read(tpath("trunc.wav"), &a, err);
    expect_fail("truncated header", rc, err, CBX_ERR_FORMAT, "trunc.wav");
    rc = io_audio_read_mem(w, 30, "trunc", 0, &a, err);
    expect_fail("truncated header in memory", rc, err, CBX_ERR_FORMAT, "trunc");

    wav_header(w, 16000, 1, 16, 0);
    write_bytes(tpath("empty.wav"), w, 44);
    rc = io_audio_read(tpath("empty.wav"), &a, err);
    expect_fail("zero-length audio", rc, err, CBX_ERR_FORMAT, "zero-length");

    wav_header(w, 50, 1, 16, 200);
    rc = io_audio_read_mem(w, sizeof w, "slow.wav", 0, &a, err);
    expect_fail("absurd sample rate 50 Hz", rc, err, CBX_ERR_FORMAT, "sample rate 50");
    wav_header(w, 5000000, 1, 16, 200);
    rc = io_audio_read_mem(w, sizeof w, "fast.wav", 0, &a, err);
    expect_fail("absurd sample rate 5 MHz", rc, err, CBX_ERR_FORMAT, "sample rate");

    wav_header(w, 16000, 1, 16, 200);
    rc = io_audio_read_mem(w, sizeof w, "long.wav", 50, &a, err);
    expect_fail("longer than max_frames", rc, err, CBX_ERR_FORMAT, "longer than 50");
    rc = io_audio_read_mem(w, sizeof w, "ok.wav", 100, &a, err);
    CHECK(rc == CBX_OK && a.n == 100, "exactly max_frames is fine: %s", rc ? err : "");
    io_audio_free(&a);

    /* NaN in a float wav */
    const float nanv[3] = {0.1f, NAN, 0.2f};
    SF_INFO info = {.samplerate = 16000, .channels = 1, .format = SF_FORMAT_WAV | SF_FORMAT_FLOAT};
    SNDFILE *sf = sf_open(tpath("nan.wav"), SFM_WRITE, &info);
    if (sf) { sf_writef_float(sf, nanv, 3); sf_close(sf); }
    rc = io_audio_read(tpath("nan.wav"), &a, err);
    expect_fail("non-finite sample in file", rc, err, CBX_ERR_FORMAT, "sample 1 is not finite");
}

static void test_write_errors(void)
{
    char err[ERR_MAX] = "";
    float x[16];
    fill_uniform(x, 16, -1, 1, 3);
    const char *d = test_tmpdir("audio-w");
    char p[8400], sub[4200];

    snprintf(p, sizeof p, "%s/no/such/dir/out.wav", d);
    cbx_status rc = io_audio_write(p, x, 16, 24000, AUDIO_WAV_PCM16, err);
    expect_fail("write into a missing directory", rc, err, CBX_ERR_IO, "cannot create");

    /* target is a directory: refused, no temporary file left */
    snprintf(sub, sizeof sub, "%s/target", d);
    mkdir(sub, 0755);
    rc = io_audio_write(sub, x, 16, 24000, AUDIO_WAV_PCM16, err);
    expect_fail("write over a directory", rc, err, CBX_ERR_IO, "is a directory");
    CHECK(count_entries(d) == 1, "only the directory remains (%d entries)", count_entries(d));

    /* a target that exists and is not a regular file (a FIFO here; the
     * same rule keeps /dev/null a device: `say -o /dev/null` as root once
     * replaced it with a file) is written in place and never replaced */
    char fifo[8400], got[8400];
    snprintf(fifo, sizeof fifo, "%s/pipe", d);
    snprintf(got, sizeof got, "%s/pipe.out", d);
    CHECK(mkfifo(fifo, 0600) == 0, "mkfifo %s", fifo);
    pid_t pid = fork();
    if (pid == 0) { /* the reader: the pipe's bytes into pipe.out; gives
                     * up after 10 s (no writer ever came: the FIFO was
                     * replaced) */
        alarm(10);
        FILE *in = fopen(fifo, "rb"), *out = fopen(got, "wb");
        char buf[4096];
        size_t k;
        while (in && out && (k = fread(buf, 1, sizeof buf, in)) > 0) fwrite(buf, 1, k, out);
        _exit(in && out && fclose(out) == 0 ? 0 : 1);
    }
    rc = io_audio_write(fifo, x, 16, 24000, AUDIO_WAV_PCM16, err);
    int status = -1;
    if (pid > 0) waitpid(pid, &status, 0);
    struct stat st;
    char head[4] = {0};
    FILE *g = fopen(got, "rb");
    size_t nh = g ? fread(head, 1, 4, g) : 0;
    if (g) fclose(g);
    printf("write into a FIFO: %s; %s; reader got '%.4s'\n", rc == CBX_OK ? "ok" : err,
           stat(fifo, &st) == 0 && S_ISFIFO(st.st_mode) ? "still a FIFO" : "REPLACED", head);
    CHECK(stat(fifo, &st) == 0 && S_ISFIFO(st.st_mode), "the FIFO target is still a FIFO");
    /* libsndfile cannot write a WAV header into a pipe: a clear error (and
     * no partial header), or, with a libsndfile that can, the whole WAV */
    CHECK((rc == CBX_OK && nh == 4 && !memcmp(head, "RIFF", 4)) ||
              (rc == CBX_ERR_IO && strstr(err, "pipe") && nh == 0),
          "the FIFO's reader got a WAV, or the write failed clearly (%s)", rc == CBX_OK ? "ok" : err);
    unlink(fifo);
    unlink(got);

    /* a read-only directory (meaningless for root, who may write anyway) */
    if (geteuid() != 0) {
        snprintf(sub, sizeof sub, "%s/ro", d);
        mkdir(sub, 0555);
        snprintf(p, sizeof p, "%s/out.flac", sub);
        rc = io_audio_write(p, x, 16, 24000, AUDIO_FLAC, err);
        expect_fail("write into a read-only directory", rc, err, CBX_ERR_IO, "cannot create");
        CHECK(count_entries(sub) == 0, "read-only directory stays empty");
    }

    /* an existing file survives a failed write */
    snprintf(p, sizeof p, "%s/keep.wav", d);
    CHECK(io_audio_write(p, x, 16, 24000, AUDIO_WAV_FLOAT, err) == CBX_OK, "write keep.wav");
    const float bad[2] = {0.5f, INFINITY};
    rc = io_audio_write(p, bad, 2, 24000, AUDIO_WAV_FLOAT, err);
    expect_fail("non-finite sample", rc, err, CBX_ERR_INVALID_ARG, "sample 1 is not finite");
    rc = io_audio_write(p, x, 0, 24000, AUDIO_WAV_FLOAT, err);
    expect_fail("no samples", rc, err, CBX_ERR_INVALID_ARG, "no samples");
    rc = io_audio_write(p, x, 16, 10, AUDIO_WAV_FLOAT, err);
    expect_fail("absurd write rate", rc, err, CBX_ERR_INVALID_ARG, "sample rate 10");
    struct audio a = {0};
    CHECK(io_audio_read(p, &a, err) == CBX_OK && a.n == 16 && a.pcm && a.pcm[3] == x[3],
          "keep.wav unchanged after failed writes");
    io_audio_free(&a);

    enum audio_format f = AUDIO_WAV_FLOAT;
    CHECK(io_audio_format_from_path("dir.x/a.WAV", &f, err) == CBX_OK && f == AUDIO_WAV_PCM16,
          ".WAV -> PCM16 wav");
    CHECK(io_audio_format_from_path("a.flac", &f, err) == CBX_OK && f == AUDIO_FLAC,
          ".flac -> flac");
    rc = io_audio_format_from_path("a.mp3", &f, err);
    expect_fail("unknown extension", rc, err, CBX_ERR_INVALID_ARG, "'.mp3'");
    rc = io_audio_format_from_path("dir.wav/out", &f, err);
    expect_fail("no extension", rc, err, CBX_ERR_INVALID_ARG, "no file extension");
}

int main(void)
{
    dir = test_tmpdir("audio");
    test_round_trip();
    test_mixdown();
    test_fixtures();
    test_lossy();
    test_read_errors();
    test_write_errors();
    return test_summary();
}
