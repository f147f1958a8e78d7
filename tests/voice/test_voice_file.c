/* test_voice_file.c - voice files (src/voice/conds.c, format in conds.h):
 * write/read round trip (every tensor and metadata field exact), the same
 * bytes for the same input, the .npy directory round trip, and bad files
 * refused with a message naming the file and the field: missing file, not
 * GGUF, GGUF that is not a voice, newer format version, missing tensor,
 * wrong shape, wrong type, out-of-range token, NaN, truncated file; an
 * incomplete voice, an unwritable target or an .npy write failing
 * half-way leaves no file. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/gguf.h"
#include "testutil.h"
#include "voice/conds.h"

static const char *dir;

static const char *tpath(const char *name) { return test_path(dir, name); }

/* A complete voice with deterministic values. */
static void make_conds(struct conds *c, int64_t P, int64_t Np, int64_t Tp)
{
    memset(c, 0, sizeof *c);
    c->n_speaker = 256;
    c->speaker_emb = malloc(256 * sizeof(float));
    fill_uniform(c->speaker_emb, 256, -1, 1, 1);
    c->n_cond_prompt = P;
    c->cond_prompt_tokens = malloc((size_t)P * sizeof(int32_t));
    for (int64_t i = 0; i < P; i++) c->cond_prompt_tokens[i] = (int32_t)((i * 97 + 5) % CONDS_SPEECH_VOCAB);
    c->emotion_adv = 0.7f;
    c->has_emotion_adv = true;
    c->n_prompt_token = Np;
    c->prompt_token = malloc((size_t)Np * sizeof(int32_t));
    for (int64_t i = 0; i < Np; i++) c->prompt_token[i] = (int32_t)((i * 31 + 6560) % CONDS_SPEECH_VOCAB);
    c->n_prompt_feat = Tp;
    c->prompt_feat = malloc((size_t)(Tp * 80) * sizeof(float));
    fill_uniform(c->prompt_feat, (size_t)(Tp * 80), -11, 2, 2);
    c->n_embedding = 192;
    c->embedding = malloc(192 * sizeof(float));
    fill_uniform(c->embedding, 192, -0.3f, 0.3f, 3);
}

static struct conds_meta make_meta(void)
{
    struct conds_meta m;
    memset(&m, 0, sizeof m);
    snprintf(m.variant, sizeof m.variant, "turbo");
    snprintf(m.source, sizeof m.source, "ref voice (take 2).flac");
    m.sample_rate = 44100;
    m.duration = 9.87654321;
    m.loudness_norm = true;
    m.loudness_lufs = -21.372987225138647;
    m.gain_db = -5.6270127748613525;
    snprintf(m.tool, sizeof m.tool, "chatterbox test");
    return m;
}

static bool same_conds(const struct conds *a, const struct conds *b, bool check_emotion_flag)
{
    return a->n_speaker == b->n_speaker && !memcmp(a->speaker_emb, b->speaker_emb, 256 * sizeof(float)) &&
           a->n_cond_prompt == b->n_cond_prompt &&
           !memcmp(a->cond_prompt_tokens, b->cond_prompt_tokens, (size_t)a->n_cond_prompt * 4) &&
           a->emotion_adv == b->emotion_adv && (!check_emotion_flag || a->has_emotion_adv == b->has_emotion_adv) &&
           a->n_prompt_token == b->n_prompt_token &&
           !memcmp(a->prompt_token, b->prompt_token, (size_t)a->n_prompt_token * 4) &&
           a->n_prompt_feat == b->n_prompt_feat &&
           !memcmp(a->prompt_feat, b->prompt_feat, (size_t)(a->n_prompt_feat * 80) * sizeof(float)) &&
           a->n_embedding == b->n_embedding && !memcmp(a->embedding, b->embedding, 192 * sizeof(float));
}

static bool zeroed(const struct conds *c)
{
    static const struct conds z;
    return !memcmp(c, &z, sizeof z);
}

static long file_size(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 ? (long)st.st_size : -1;
}

/* ---- hand-built GGUFs for the bad cases --------------------------------- */

enum mutation {
    M_NONE, M_NO_TYPE, M_VERSION_2, M_NO_EMBEDDING, M_SPEAKER_255, M_SPEAKER_F16, M_TOKEN_6561, M_FEAT_NAN,
    M_FEAT_79, M_NO_VARIANT,
};

static void write_mutant(const char *path, enum mutation mu)
{
    struct conds c;
    make_conds(&c, 10, 6, 12);
    char err[ERR_MAX];
    struct io_gguf_writer *w = NULL;
    io_gguf_writer_create(&w, err);
    if (mu != M_NO_TYPE) io_gguf_writer_set_str(w, "general.type", CONDS_VOICE_TYPE, err);
    io_gguf_writer_set_u32(w, "chatterbox.voice.format_version", mu == M_VERSION_2 ? 2 : 1, err);
    if (mu != M_NO_VARIANT) io_gguf_writer_set_str(w, "chatterbox.voice.variant", "turbo", err);
    io_gguf_writer_set_str(w, "chatterbox.voice.source", "x.wav", err);
    io_gguf_writer_set_u32(w, "chatterbox.voice.sample_rate", 24000, err);
    io_gguf_writer_set_f64(w, "chatterbox.voice.duration", 10.0, err);
    io_gguf_writer_set_bool(w, "chatterbox.voice.loudness_norm", false, err);
    io_gguf_writer_set_f64(w, "chatterbox.voice.loudness_lufs", NAN, err);
    io_gguf_writer_set_f64(w, "chatterbox.voice.gain_db", 0, err);
    io_gguf_writer_set_str(w, "chatterbox.voice.tool", "test", err);
    uint16_t f16[256] = {0};
    float emo = 0.5f;
    if (mu == M_TOKEN_6561) c.prompt_token[3] = 6561;
    if (mu == M_FEAT_NAN) c.prompt_feat[77] = NAN;
    io_gguf_writer_add_tensor(w, "t3.speaker_emb", mu == M_SPEAKER_F16 ? TYPE_F16 : TYPE_F32, 2,
                              (int64_t[]){1, mu == M_SPEAKER_255 ? 255 : 256},
                              mu == M_SPEAKER_F16 ? (const void *)f16 : c.speaker_emb, err);
    io_gguf_writer_add_tensor(w, "t3.cond_prompt_speech_tokens", TYPE_I32, 2, (int64_t[]){1, 10},
                              c.cond_prompt_tokens, err);
    io_gguf_writer_add_tensor(w, "t3.emotion_adv", TYPE_F32, 3, (int64_t[]){1, 1, 1}, &emo, err);
    io_gguf_writer_add_tensor(w, "gen.prompt_token", TYPE_I32, 2, (int64_t[]){1, 6}, c.prompt_token, err);
    if (mu == M_FEAT_79)
        io_gguf_writer_add_tensor(w, "gen.prompt_feat", TYPE_F32, 3, (int64_t[]){1, 12, 79}, c.prompt_feat, err);
    else
        io_gguf_writer_add_tensor(w, "gen.prompt_feat", TYPE_F32, 3, (int64_t[]){1, 12, 80}, c.prompt_feat, err);
    if (mu != M_NO_EMBEDDING)
        io_gguf_writer_add_tensor(w, "gen.embedding", TYPE_F32, 2, (int64_t[]){1, 192}, c.embedding, err);
    if (io_gguf_writer_write(w, path, err) != CBX_OK) fprintf(stderr, "write_mutant: %s\n", err);
    io_gguf_writer_free(w);
    conds_free(&c);
}

static void expect_bad(const char *what, const char *path, const char *needle)
{
    struct conds c;
    struct conds_meta m;
    char err[ERR_MAX] = "";
    memset(&c, 0x5a, sizeof c);
    cbx_status rc = conds_read_voice(path, &c, &m, err);
    bool ok = rc != CBX_OK && zeroed(&c) && strstr(err, needle) && strstr(err, path) && !strchr(err, '\n');
    CHECK(ok, "%s refused: rc %d, message: %s", what, (int)rc, err);
    if (rc == CBX_OK) conds_free(&c);
}

int main(void)
{
    dir = test_tmpdir("voice_file");
    char err[ERR_MAX] = "";

    /* round trip */
    struct conds c, r;
    make_conds(&c, 375, 250, 500);
    struct conds_meta m = make_meta(), rm;
    cbx_status rc = conds_write_voice(tpath("a.voice"), &c, &m, err);
    CHECK(rc == CBX_OK, "write a.voice: %s", rc ? err : "ok");
    rc = conds_read_voice(tpath("a.voice"), &r, &rm, err);
    CHECK(rc == CBX_OK, "read a.voice: %s", rc ? err : "ok");
    if (rc == CBX_OK) {
        CHECK(same_conds(&c, &r, true), "round trip: every tensor identical");
        CHECK(rm.format_version == CONDS_VOICE_FORMAT_VERSION && !strcmp(rm.variant, m.variant) &&
                  !strcmp(rm.source, m.source) && rm.sample_rate == m.sample_rate && rm.duration == m.duration &&
                  rm.loudness_norm == m.loudness_norm && rm.loudness_lufs == m.loudness_lufs &&
                  rm.gain_db == m.gain_db && !strcmp(rm.tool, m.tool),
              "round trip: metadata identical (version %u, variant %s, source %s, %u Hz, %.8f s, lufs %.15g)",
              rm.format_version, rm.variant, rm.source, rm.sample_rate, rm.duration, rm.loudness_lufs);
        CHECK(conds_is_gguf(tpath("a.voice")), "conds_is_gguf(voice file)");
        conds_free(&r);
    }
    long size = file_size(tpath("a.voice"));
    CHECK(size > 0 && size < 200 * 1024, "voice file is small: %ld bytes", size);

    /* same input, same bytes (no timestamp) */
    rc = conds_write_voice(tpath("b.voice"), &c, &m, err);
    {
        FILE *fa = fopen(tpath("a.voice"), "rb"), *fb = fopen(tpath("b.voice"), "rb");
        bool same = fa && fb;
        for (int x = 0, y = 0; same && (x != EOF || y != EOF);) {
            x = fgetc(fa), y = fgetc(fb);
            same = x == y;
        }
        if (fa) fclose(fa);
        if (fb) fclose(fb);
        CHECK(rc == CBX_OK && same, "writing twice gives identical bytes");
    }

    /* memory reader, and a truncated copy */
    {
        FILE *f = fopen(tpath("a.voice"), "rb");
        unsigned char *buf = malloc((size_t)size);
        size_t k = f && buf ? fread(buf, 1, (size_t)size, f) : 0;
        if (f) fclose(f);
        rc = conds_read_voice_mem(buf, k, "mem.voice", &r, NULL, err);
        CHECK(rc == CBX_OK && same_conds(&c, &r, true), "read from memory: %s", rc ? err : "identical");
        if (rc == CBX_OK) conds_free(&r);
        FILE *t = fopen(tpath("trunc.voice"), "wb");
        if (t) fwrite(buf, 1, k - 100, t), fclose(t);
        free(buf);
        expect_bad("truncated file", tpath("trunc.voice"), "trunc.voice");
    }

    /* .npy directory round trip (what --npy writes, what --voice DIR reads) */
    rc = conds_write_npy_dir(tpath("npy"), &c, err);
    CHECK(rc == CBX_OK, "write npy dir: %s", rc ? err : "ok");
    rc = conds_from_npy_dir(tpath("npy"), &r, err);
    CHECK(rc == CBX_OK && same_conds(&c, &r, true), "npy dir round trip: %s", rc ? err : "identical");
    if (rc == CBX_OK) conds_free(&r);

    /* a write failing half-way (a directory where the second file goes)
     * removes what it wrote */
    mkdir(tpath("npy_bad"), 0777);
    mkdir(tpath("npy_bad/cond_prompt_speech_tokens.npy"), 0777);
    rc = conds_write_npy_dir(tpath("npy_bad"), &c, err);
    CHECK(rc != CBX_OK && !test_exists(tpath("npy_bad/speaker_emb.npy")) && test_exists(tpath("npy_bad")),
          "npy dir write failing half-way leaves no file: %s", err);

    /* bad files */
    expect_bad("missing file", tpath("nope.voice"), "nope.voice");
    {
        FILE *f = fopen(tpath("text.voice"), "wb");
        if (f) fputs("this is not a voice file, just some text long enough\n", f), fclose(f);
        expect_bad("text file", tpath("text.voice"), "text.voice");
        CHECK(!conds_is_gguf(tpath("text.voice")), "conds_is_gguf(text) is false");
    }
    static const struct { enum mutation mu; const char *name, *needle; } bad[] = {
        {M_NO_TYPE, "no_type.voice", "not a voice file"},
        {M_VERSION_2, "v2.voice", "format version 2 is not supported"},
        {M_NO_VARIANT, "no_variant.voice", "chatterbox.voice.variant"},
        {M_NO_EMBEDDING, "no_emb.voice", "no tensor 'gen.embedding'"},
        {M_SPEAKER_255, "spk255.voice", "'t3.speaker_emb' has shape [1, 255], need [1, 256]"},
        {M_SPEAKER_F16, "spkf16.voice", "'t3.speaker_emb' is f16, need f32"},
        {M_TOKEN_6561, "tok.voice", "'gen.prompt_token'[3] = 6561 is not a speech token"},
        {M_FEAT_NAN, "nan.voice", "'gen.prompt_feat' holds a NaN"},
        {M_FEAT_79, "feat79.voice", "'gen.prompt_feat' has shape [1, 12, 79]"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_mutant(tpath(bad[i].name), bad[i].mu);
        expect_bad(bad[i].name, tpath(bad[i].name), bad[i].needle);
    }
    /* the unmutated builder reads: the bad cases fail for their one reason */
    write_mutant(tpath("good.voice"), M_NONE);
    rc = conds_read_voice(tpath("good.voice"), &r, NULL, err);
    CHECK(rc == CBX_OK, "hand-built good file reads: %s", rc ? err : "ok");
    if (rc == CBX_OK) conds_free(&r);

    /* nothing written for an incomplete voice or an unwritable target */
    struct conds part = c;
    part.embedding = NULL;
    rc = conds_write_voice(tpath("part.voice"), &part, &m, err);
    CHECK(rc == CBX_ERR_INVALID_ARG && !test_exists(tpath("part.voice")) && strstr(err, "incomplete"),
          "incomplete voice refused, no file: %s", err);
    rc = conds_write_voice(tpath("no/such/dir/x.voice"), &c, &m, err);
    CHECK(rc != CBX_OK && !test_exists(tpath("no")), "unwritable target: %s", err);

    conds_free(&c);
    return test_summary();
}
