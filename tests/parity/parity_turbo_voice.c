/* parity_turbo_voice.c - the whole voice-cloning pipeline (voice.c,
 * cmd_voice.c) end to end against the upstream fixtures, through the CLI:
 *
 *   chatterbox voice create ref_voice_24k.wav --ref16 ref_voice_16k.wav
 *       --no-loudness-norm --model <synthetic turbo> -o V --npy DIR
 *
 * reproduces prepare_conditionals as the fixtures ran it (loudness off, the
 * given 16 kHz rendition instead of both resamplers): speaker_emb
 * (ve_embedding), cond_prompt_speech_tokens (t3_cond_prompt_tokens),
 * prompt_token (s3gen_prompt_tokens), prompt_feat (s3gen_prompt_mel) and
 * embedding (campplus_embedding); the .npy files hold the same values as
 * the voice file. Then the default path (soxr resampling, torchaudio
 * resampling inside embed_ref, loudness normalisation) runs and records
 * pyloudnorm's loudness in the file, a 44.1 kHz FLAC reference is
 * accepted, and bad inputs (missing file, a text
 * file, a 3 s clip) fail with exit 1, one line on stderr and no output. */
#define VARIANT "turbo"
#include "voice_parity.inc"

int main(void)
{
    setup("parity_turbo_voice");
    char args[9000], err[ERR_MAX] = "";
    struct conds c;
    struct conds_meta m;
    cbx_status st;
    int rc;

    /* 1. the fixture path: 15 s of audio -> all 250 tokens (max 375) */
    fixture_path(250);

    /* 2. the default path: soxr 24 -> 16 kHz, torchaudio resampling in
     * embed_ref, loudness to -27 LUFS (pyloudnorm's value recorded) */
    snprintf(args, sizeof args, "create '%s' --model '%s' -o '%s' --exaggeration 0.3 --quiet",
             ref24, MODEL, tpath("def.voice"));
    rc = run(args);
    CHECK(rc == 0, "voice create (default path): exit %d: %s", rc, err_text);
    st = conds_read_voice(tpath("def.voice"), &c, &m, err);
    CHECK(st == CBX_OK, "read def.voice: %s", st ? err : "ok");
    if (st == CBX_OK) {
        /* turbo/norm_loudness.json: -21.372987225138647 LUFS, -5.627 dB */
        CHECK(m.loudness_norm && fabs(m.loudness_lufs - -21.372987225138647) < 1e-6 &&
                  fabs(m.gain_db - -5.6270127748613525) < 1e-6 && c.emotion_adv == 0.3f &&
                  c.n_prompt_feat == 500 && c.n_cond_prompt == 250 && c.n_prompt_token == 250,
              "default path: loudness %.9f LUFS, gain %.9f dB, emotion_adv %g, %lld/%lld tokens, %lld frames",
              m.loudness_lufs, m.gain_db, c.emotion_adv, (long long)c.n_cond_prompt, (long long)c.n_prompt_token,
              (long long)c.n_prompt_feat);
        printf("default path: %.6f LUFS, gain %.4f dB, %lld T3 tokens, %lld prompt tokens\n", m.loudness_lufs,
               m.gain_db, (long long)c.n_cond_prompt, (long long)c.n_prompt_token);
        conds_free(&c);
    }

    /* 3. another rate and format: the reference as 44.1 kHz FLAC goes
     * through soxr to 24 kHz first (librosa.load(sr=24000)) */
    {
        struct audio a0 = {0};
        float *y = NULL;
        int64_t ny = 0;
        st = io_audio_read(ref24, &a0, err);
        if (st == CBX_OK) st = voice_resample(a0.pcm, a0.n, 24000, 44100, &y, &ny, err);
        if (st == CBX_OK) st = io_audio_write(tpath("ref44.flac"), y, ny, 44100, AUDIO_FLAC, err);
        CHECK(st == CBX_OK, "write ref44.flac: %s", st ? err : "ok");
        free(y);
        io_audio_free(&a0);
        snprintf(args, sizeof args, "create '%s' --model '%s' -o '%s' --quiet", tpath("ref44.flac"), MODEL,
                 tpath("flac.voice"));
        rc = run(args);
        st = rc == 0 ? conds_read_voice(tpath("flac.voice"), &c, &m, err) : CBX_ERR_IO;
        CHECK(st == CBX_OK && m.sample_rate == 44100 && c.n_prompt_feat == 500 && c.n_prompt_token == 250 &&
                  !strcmp(m.source, "ref44.flac"),
              "44.1 kHz FLAC reference: exit %d, %u Hz, %lld frames, %lld tokens %s", rc, m.sample_rate,
              (long long)c.n_prompt_feat, (long long)c.n_prompt_token, err_text);
        if (st == CBX_OK) conds_free(&c);
    }

    /* 4. bad inputs */
    check_bad("missing file", tpath("no_such.wav"), "no_such.wav");
    FILE *f = fopen(tpath("notes.wav"), "wb");
    if (f) fputs("these are not audio samples\n", f), fclose(f);
    check_bad("text file named .wav", tpath("notes.wav"), "notes.wav");
    struct audio a = {0};
    st = io_audio_read(ref24, &a, err);
    if (st == CBX_OK) st = io_audio_write(tpath("short.wav"), a.pcm, 3 * 24000, 24000, AUDIO_WAV_PCM16, err);
    CHECK(st == CBX_OK, "write short.wav: %s", st ? err : "ok");
    io_audio_free(&a);
    check_bad("3 s clip", tpath("short.wav"), "more than 5 s");

    return test_summary();
}
