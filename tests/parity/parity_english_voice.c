/* parity_english_voice.c - the voice-cloning pipeline with the original
 * English Chatterbox rules (tts.py prepare_conditionals): the T3 prompt is
 * tokenised from the first 6 s of the 16 kHz reference with max_len 150
 * (not Turbo's 15 s / 375), there is no loudness step and no 5 s minimum.
 *   1. `voice create --ref16` against the english fixtures (speaker_emb,
 *      150 T3 prompt tokens, prompt_token, prompt_feat, embedding);
 *   2. a 3 s clip is accepted (Turbo refuses it) and gives 75 T3 tokens;
 *   3. a 0.5 s clip is refused (our 1 s floor) with one line and no file. */
#define VARIANT "english"
#define VOICE_1S_FLOOR
#include "voice_parity.inc"

int main(void)
{
    setup("parity_english_voice");

    /* 1. ref16[:6 s] -> 150 tokens */
    fixture_path(150);

    /* 2. and 3. short clips */
    check_short_clips();
    return test_summary();
}
