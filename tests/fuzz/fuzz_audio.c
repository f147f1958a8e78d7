/* fuzz_audio.c - io_audio_read_mem on arbitrary bytes: whatever libsndfile
 * makes of them, the reader must either fail with a message or return a
 * non-empty, finite, mono signal at a sane rate. Decoded length is capped
 * at 2^20 samples so expanding formats stay within the fuzzer's memory. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "io/audio.h"

/* libsndfile 1.2.0 loses the vorbis_info of an Ogg stream whose Vorbis
 * headers fail to parse (allocated in vorbis_info_init under sf_open_*,
 * never freed on that error path). Not ours to fix; the stack seen by
 * LeakSanitizer may stop inside libvorbis, hence both names. Allocations of
 * our own code are still reported. */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void) { return "leak:libsndfile.so\nleak:libvorbis.so\n"; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct audio a;
    char err[ERR_MAX];
    if (io_audio_read_mem(data, size, "fuzz", 1 << 20, &a, err) != CBX_OK) {
        if (a.pcm || a.n || !memchr(err, 0, sizeof err) || !err[0]) __builtin_trap();
        return 0;
    }
    if (!a.pcm || a.n <= 0 || a.n > (1 << 20) || a.channels < 1 ||
        a.sample_rate < AUDIO_MIN_RATE || a.sample_rate > AUDIO_MAX_RATE)
        __builtin_trap();
    for (int64_t i = 0; i < a.n; i++)
        if (!isfinite(a.pcm[i])) __builtin_trap();
    io_audio_free(&a);
    return 0;
}
