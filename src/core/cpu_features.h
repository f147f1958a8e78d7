/* cpu_features.h - run-time x86 feature detection and the SIMD level the
 * cpu kernels use.
 *
 * Detection reads cpuid and, for the AVX and AVX-512 register state, the
 * OS-enabled bits of XCR0 (xgetbv): a CPU flag without OS support counts
 * as absent. Levels are nested: CPU_AVX2 needs avx2+fma+f16c, CPU_AVX512
 * additionally avx512f/bw/vl and avx512_vnni. The level in use is the
 * detected one, lowered by the environment variable CBX_CPU=generic|avx2|
 * avx512 (read once) or by cpu_set_level() (tests and benchmarks force a
 * lower path to compare it); it can never be raised above what the CPU
 * supports.
 * Thread safety: any thread, concurrently (cpu_set_level races only with
 * kernels already running, which keep the level they started with). */
#ifndef CBX_CPU_FEATURES_H
#define CBX_CPU_FEATURES_H

#include <stdbool.h>

struct cpu_features {
    bool avx, avx2, fma, f16c;
    bool avx512f, avx512bw, avx512vl, avx512_vnni, avx512_bf16;
    bool avx_vnni;
    bool amx_tile, amx_int8, amx_bf16; /* CPU and OS (XCR0 17-18) support;
                                        * use needs cpu_amx_ready() too */
};

enum cpu_level { CPU_GENERIC = 0, CPU_AVX2 = 1, CPU_AVX512 = 2 };

/* Detected once; borrowed, static. */
const struct cpu_features *cpu_features(void);
/* Highest level the CPU and OS support. */
enum cpu_level cpu_level_detected(void);
/* Level in use now (detected, capped by CBX_CPU and cpu_set_level). */
enum cpu_level cpu_level(void);
/* Cap the level (CPU_AVX512 = no cap beyond CBX_CPU); returns the level
 * in use afterwards. */
enum cpu_level cpu_set_level(enum cpu_level cap);
/* AMX for kernels: the CPU has AMX tiles, the OS saves their state, the
 * process was granted the tile data state (arch_prctl, asked once) and
 * CBX_AMX is not "0" (read once), and cpu_set_amx has not forbidden it.
 * False below CPU_AVX512. */
bool cpu_amx_ready(void);
/* Allow (true, the default) or forbid AMX for kernels from now on, as
 * cpu_set_level caps the level: tests and benchmarks compare a kernel's
 * AMX path with the one it takes without AMX. */
void cpu_set_amx(bool allow);
/* AVX512-BF16 for kernels (VDPBF16PS, VCVTNE2PS2BF16): avx512_bf16 with
 * the CPU_AVX512 level in use. */
bool cpu_avx512_bf16_ready(void);
/* The BF16 kernels' engine is AMX tiles: cpu_amx_ready() with AMX-BF16
 * and cpu_avx512_bf16_ready() (their conversions); else, with AVX512-BF16
 * alone, VDPBF16PS. */
bool cpu_amx_bf16_ready(void);
/* "generic", "avx2", "avx512". */
const char *cpu_level_name(enum cpu_level l);

#endif
