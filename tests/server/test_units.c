/* test_units.c - the server's pieces without a model (ctest server_units):
 * WSOLA keeps pitch and scales duration, and gives the same samples
 * streamed in odd chunks as in one piece; base64 against RFC 4648's
 * vectors; the encoders' bytes (streamed wav header, pcm conversion,
 * every format readable back by libsndfile with the right length); the
 * multipart parser on a well-formed upload; the request parser's
 * defaults. */
#include <math.h>
#include <sndfile.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/encode.h"
#include "serve/multipart.h"
#include "serve/request.h"
#include "serve/wsola.h"
#include "testutil.h"

#define SR 24000

/* zero crossings per second of x[0..n) (upward), a pitch estimate for a sine */
static double crossings(const float *x, size_t n)
{
    size_t c = 0;
    for (size_t i = 1; i < n; i++) c += x[i - 1] < 0 && x[i] >= 0;
    return (double)c * SR / (double)n;
}

static void test_wsola(void)
{
    const size_t n = 2 * SR;
    float *x = malloc(sizeof *x * n);
    for (size_t i = 0; i < n; i++) x[i] = 0.5f * sinf(2.0f * (float)M_PI * 200.0f * (float)i / SR);
    const double f_in = crossings(x, n);
    const double speeds[] = {0.5, 0.8, 1.25, 2.0, 4.0};
    for (size_t s = 0; s < sizeof speeds / sizeof speeds[0]; s++) {
        struct wsola w;
        CHECK(wsola_init(&w, speeds[s], SR) == 0, "wsola_init");
        CHECK(wsola_push(&w, x, n) == 0 && wsola_flush(&w) == 0, "wsola push/flush");
        const float *y;
        size_t m;
        wsola_take(&w, &y, &m);
        const double want = (double)n / speeds[s];
        const double f_out = crossings(y + SR / 10, m - SR / 5);
        CHECK(fabs((double)m - want) <= 1, "speed %.2f: %zu samples (want %.0f)", speeds[s], m, want);
        CHECK(fabs(f_out - f_in) / f_in < 0.02, "speed %.2f: pitch %.1f Hz (input %.1f Hz, tolerance 2 %%)",
              speeds[s], f_out, f_in);
        /* the same input in odd pieces: identical output */
        struct wsola v;
        wsola_init(&v, speeds[s], SR);
        float *z = malloc(sizeof *z * (m + SR));
        size_t got = 0, off = 0, step = 1;
        while (off < n) {
            size_t k = step * 97 % 3001 + 1;
            if (k > n - off) k = n - off;
            wsola_push(&v, x + off, k);
            off += k;
            step++;
            const float *p;
            size_t q;
            wsola_take(&v, &p, &q);
            if (q) memcpy(z + got, p, sizeof *p * q);
            got += q;
        }
        wsola_flush(&v);
        const float *p;
        size_t q;
        wsola_take(&v, &p, &q);
        if (q) memcpy(z + got, p, sizeof *p * q);
        got += q;
        CHECK(got == m && memcmp(z, y, sizeof *z * m) == 0, "speed %.2f: streamed in pieces equals whole (%zu vs %zu)",
              speeds[s], got, m);
        free(z);
        wsola_free(&v);
        wsola_free(&w);
    }
    free(x);
}

static void test_base64(void)
{
    static const char *const in[] = {"", "f", "fo", "foo", "foob", "fooba", "foobar"};
    static const char *const out[] = {"", "Zg==", "Zm8=", "Zm9v", "Zm9vYg==", "Zm9vYmE=", "Zm9vYmFy"};
    for (int i = 0; i < 7; i++) {
        char b[16];
        base64_encode((const uint8_t *)in[i], strlen(in[i]), b);
        CHECK(!strcmp(b, out[i]), "base64('%s') = '%s' (want '%s')", in[i], b, out[i]);
    }
}

static sf_count_t frames_of(const uint8_t *p, size_t n)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/x", test_tmpdir("server_units"));
    FILE *f = fopen(path, "wb");
    fwrite(p, 1, n, f);
    fclose(f);
    SF_INFO info = {0};
    SNDFILE *s = sf_open(path, SFM_READ, &info);
    if (!s) return -1;
    /* count by reading (streamed files may claim no length) */
    float b[4096];
    sf_count_t t = 0, k;
    while ((k = sf_readf_float(s, b, 4096)) > 0) t += k;
    sf_close(s);
    return t;
}

/* what the encoder has ready (enc_take) appended to *all (na bytes, one
 * spare byte kept); false when out of memory */
static bool take_into(struct enc *e, uint8_t **all, size_t *na)
{
    const uint8_t *p;
    size_t k;
    enc_take(e, &p, &k);
    uint8_t *grown = realloc(*all, *na + k + 1);
    if (!grown) return false;
    if (k) memcpy(grown + *na, p, k);
    *all = grown;
    *na += k;
    return true;
}

static void test_encoders(void)
{
    const size_t n = SR / 2;
    float *x = malloc(sizeof *x * n);
    for (size_t i = 0; i < n; i++) x[i] = 0.3f * sinf((float)i * 0.07f);
    x[0] = 1.5f, x[1] = -1.5f, x[2] = 1.0f / 3.0f;
    for (int streaming = 0; streaming < 2; streaming++)
        for (int f = SERVE_WAV; f <= SERVE_OPUS; f++) {
            struct enc e;
            char err[256];
            if (!enc_supported((enum serve_format)f)) {
                CHECK(false, "format %s supported by this libsndfile", serve_format_name((enum serve_format)f));
                continue;
            }
            CHECK(enc_open(&e, (enum serve_format)f, SR, streaming, err, sizeof err) == 0, "enc_open %s: %s",
                  serve_format_name((enum serve_format)f), err);
            uint8_t *all = NULL;
            size_t na = 0;
            bool mem = true;
            for (size_t off = 0; off < n && mem; off += 4000) {
                enc_write(&e, x + off, off + 4000 < n ? 4000 : n - off);
                mem = take_into(&e, &all, &na);
            }
            CHECK(enc_close(&e) == 0, "enc_close");
            mem = mem && take_into(&e, &all, &na);
            CHECK(mem, "%s: out of memory", serve_format_name((enum serve_format)f));
            if (!mem) {
                free(all);
                enc_free(&e);
                continue;
            }
            if (!streaming) memcpy(all, e.buf, na); /* whole: the final bytes, rewrites included */
            if (f == SERVE_PCM) {
                const int16_t *s = (const int16_t *)(const void *)all;
                CHECK(na == 2 * n && s[0] == 32767 && s[1] == -32767 && s[2] == 10922,
                      "pcm: %zu bytes, clipped as `say -o -` (%d %d %d)", na, s[0], s[1], s[2]);
            } else {
                const sf_count_t fr = frames_of(all, na);
                CHECK(fr >= (sf_count_t)n && fr <= (sf_count_t)n + 2400, "%s%s: %lld frames read back (wrote %zu)",
                      serve_format_name((enum serve_format)f), streaming ? " streamed" : "", (long long)fr, n);
            }
            if (f == SERVE_WAV && streaming)
                CHECK(!memcmp(all, "RIFF\xff\xff\xff\xff", 8) && !memcmp(all + 36, "data\xff\xff\xff\xff", 8),
                      "streamed wav: header with unknown sizes");
            free(all);
            enc_free(&e);
        }
    free(x);
}

static void test_parsers(void)
{
    static const char body[] = "--b1\r\nContent-Disposition: form-data; name=\"name\"\r\n\r\nme\r\n"
                               "--b1\r\nContent-Disposition: form-data; name=\"file\"; filename=\"c.wav\"\r\n"
                               "Content-Type: audio/wav\r\n\r\n\x00\x01\r\n\x02\r\n--b1--\r\n";
    char b[80], err[256];
    CHECK(multipart_boundary("multipart/form-data; boundary=b1", b, sizeof b, err, sizeof err) == 0 && !strcmp(b, "b1"),
          "boundary");
    struct mp_part parts[MULTIPART_MAX_PARTS];
    int np = 0;
    const int r = multipart_parse((const uint8_t *)body, sizeof body - 1, "b1", parts, &np, err, sizeof err);
    const struct mp_part *f = multipart_find(parts, np, "file");
    CHECK(r == 0 && np == 2 && parts[0].len == 2 && !memcmp(parts[0].data, "me", 2) && f && f->len == 5 &&
              !memcmp(f->data, "\x00\x01\r\n\x02", 5) && !strcmp(f->filename, "c.wav") && !strcmp(f->ctype, "audio/wav"),
          "multipart: two parts, binary data with CRLF inside kept (%s)", r ? err : "ok");
    struct speech_req q;
    struct api_error e;
    const char js[] = "{\"input\":\"Hi there\"}";
    CHECK(speech_req_parse(js, sizeof js - 1, 100, &q, &e) == 0 && q.format == SERVE_WAV && q.speed == 1.0 &&
              !strcmp(q.voice, "default") && q.stream == SERVE_STREAM_NONE && q.set == 0 && q.input_chars == 8,
          "request defaults");
    speech_req_free(&q);
    const char js2[] = "{\"input\":\"\xc3\xa9t\xc3\xa9\",\"seed\":\"18446744073709551615\",\"voice\":{\"id\":\"me\"}}";
    CHECK(speech_req_parse(js2, sizeof js2 - 1, 3, &q, &e) == 0 && q.seed == UINT64_MAX && q.input_chars == 3 &&
              !strcmp(q.voice, "me"),
          "64-bit seed as a string, code points counted, voice object");
    speech_req_free(&q);
    CHECK(speech_req_parse(js2, sizeof js2 - 1, 2, &q, &e) == 400 && !strcmp(e.param, "input"), "3 characters over a limit of 2");
}

int main(void)
{
    test_wsola();
    test_base64();
    test_encoders();
    test_parsers();
    return test_summary();
}
