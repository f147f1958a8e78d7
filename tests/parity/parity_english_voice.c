/* parity_english_voice.c - the voice-cloning pipeline with the original
 * English Chatterbox rules (tts.py prepare_conditionals): the T3 prompt is
 * tokenised from the first 6 s of the 16 kHz reference with max_len 150
 * (not Turbo's 15 s / 375), there is no loudness step and no 5 s minimum.
 *   1. `voice create --ref16` against the english fixtures (speaker_emb,
 *      150 T3 prompt tokens, prompt_token, prompt_feat, embedding);
 *   2. a 3 s clip is accepted (Turbo refuses it) and gives 75 T3 tokens;
 *   3. a 0.5 s clip is refused (our 1 s floor) with one line and no file. */
#define VARIANT "english"
#include "voice_parity.inc"

int main(void)
{
    setup("parity_english_voice");
    char args[9000], err[ERR_MAX] = "";

    /* 1. ref16[:6 s] -> 150 tokens */
    fixture_path(150);

    /* 2. and 3. short clips */
    struct audio a = {0};
    cbx_status st = io_audio_read(ref24, &a, err);
    if (st == CBX_OK) st = io_audio_write(tpath("3s.wav"), a.pcm, 3 * 24000, 24000, AUDIO_WAV_PCM16, err);
    if (st == CBX_OK) st = io_audio_write(tpath("half.wav"), a.pcm, 12000, 24000, AUDIO_WAV_PCM16, err);
    CHECK(st == CBX_OK, "write short clips: %s", st ? err : "ok");
    io_audio_free(&a);
    snprintf(args, sizeof args, "create '%s' --model '%s' -o '%s' --quiet", tpath("3s.wav"), MODEL,
             tpath("3s.voice"));
    int rc = run(args);
    struct conds c;
    st = rc == 0 ? conds_read_voice(tpath("3s.voice"), &c, NULL, err) : CBX_ERR_IO;
    CHECK(st == CBX_OK && c.n_cond_prompt == 75 && c.n_prompt_token == 75 && c.n_prompt_feat == 150,
          "3 s clip: exit %d, %lld T3 tokens (want 75), %lld prompt tokens, %lld frames %s", rc,
          st == CBX_OK ? (long long)c.n_cond_prompt : -1LL, st == CBX_OK ? (long long)c.n_prompt_token : -1LL,
          st == CBX_OK ? (long long)c.n_prompt_feat : -1LL, err_text);
    if (st == CBX_OK) conds_free(&c);
    check_bad("0.5 s clip", tpath("half.wav"), "english needs at least 1 s");
    return test_summary();
}
