/* parity_mtl_v2_say.c - Multilingual v2 END TO END through the product, vs
 * the upstream fixture: the mtl-v2 row of say_parity.inc. The fixture's
 * waveform is recorded before mtl_tts.py's cut of the last token's audio,
 * which the row applies to it; the streamed output must have the cut too.
 * The text front-end case: French with its [fr] tag, ids from the model's
 * own (synthetic) tokenizer. Needs the synth_mtl-v2 model directory. */
#include "say_parity.inc"

static const struct say_row mtl_v2 = {
    .variant = "mtl-v2",
    .text_ids = "75 164 59 216 207 229 77 65 22 181 204 14 126 197 177 130 62 178 92 160",
    .tol = 1e-2,
    .trim = true,
    .stream = true,
    .text = "Bonjour, ça va très bien.",
    .language = "fr",
    .ids = NULL,
    .bad_language = {"--language xx 'Hola.'", "unsupported language \"xx\""},
};

int main(void)
{
    say_parity(&mtl_v2);
    return test_summary();
}
