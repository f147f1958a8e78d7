/* cpu_features.c - cpuid/xgetbv feature detection (see cpu_features.h).
 * Bits from the Intel SDM vol. 2A, CPUID: leaf 1 ecx (fma 12, osxsave 27,
 * avx 28, f16c 29), leaf 7.0 ebx (avx2 5, avx512f 16, avx512bw 30,
 * avx512vl 31), leaf 7.0 ecx (avx512_vnni 11), leaf 7.1 eax (avx_vnni 4,
 * avx512_bf16 5); XCR0 bits 1-2 (SSE/AVX state) and 5-7 (opmask, ZMM). */
#include "cpu_features.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define CBX_X86 1
#endif
#if defined(__x86_64__) && defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18
#endif

static struct cpu_features feats;
static enum cpu_level detected = CPU_GENERIC, env_cap = CPU_AVX512;
static atomic_int user_cap = CPU_AVX512;
static pthread_once_t once = PTHREAD_ONCE_INIT;

#ifdef CBX_X86
static unsigned long long xgetbv0(void)
{
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (unsigned long long)hi << 32 | lo;
}
#endif

static void detect(void)
{
#ifdef CBX_X86
    unsigned a, b, c, d, max_leaf = __get_cpuid_max(0, NULL);
    if (max_leaf >= 1 && __get_cpuid(1, &a, &b, &c, &d)) {
        bool osxsave = c & (1u << 27);
        unsigned long long xcr0 = osxsave ? xgetbv0() : 0;
        bool ymm = (xcr0 & 0x6) == 0x6, zmm = ymm && (xcr0 & 0xe0) == 0xe0;
        feats.avx = ymm && (c & (1u << 28));
        feats.fma = feats.avx && (c & (1u << 12));
        feats.f16c = feats.avx && (c & (1u << 29));
        if (max_leaf >= 7 && __get_cpuid_count(7, 0, &a, &b, &c, &d)) {
            unsigned sub = a;
            feats.avx2 = feats.avx && (b & (1u << 5));
            feats.avx512f = zmm && (b & (1u << 16));
            feats.avx512bw = feats.avx512f && (b & (1u << 30));
            feats.avx512vl = feats.avx512f && (b & (1u << 31));
            feats.avx512_vnni = feats.avx512f && (c & (1u << 11));
            /* leaf 7.0 edx: amx_bf16 22, amx_tile 24, amx_int8 25 */
            feats.amx_tile = (xcr0 & (3ull << 17)) == (3ull << 17) && (d & (1u << 24));
            feats.amx_bf16 = feats.amx_tile && (d & (1u << 22));
            feats.amx_int8 = feats.amx_tile && (d & (1u << 25));
            if (sub >= 1 && __get_cpuid_count(7, 1, &a, &b, &c, &d)) {
                feats.avx_vnni = feats.avx && (a & (1u << 4));
                feats.avx512_bf16 = feats.avx512f && (a & (1u << 5));
            }
        }
    }
#endif
    if (feats.avx2 && feats.fma && feats.f16c) {
        detected = CPU_AVX2;
        if (feats.avx512f && feats.avx512bw && feats.avx512vl && feats.avx512_vnni)
            detected = CPU_AVX512;
    }
    const char *e = getenv("CBX_CPU");
    if (e) {
        if (strcmp(e, "generic") == 0) env_cap = CPU_GENERIC;
        else if (strcmp(e, "avx2") == 0) env_cap = CPU_AVX2;
    }
}

const struct cpu_features *cpu_features(void)
{
    pthread_once(&once, detect);
    return &feats;
}

enum cpu_level cpu_level_detected(void)
{
    pthread_once(&once, detect);
    return detected;
}

enum cpu_level cpu_level(void)
{
    pthread_once(&once, detect);
    int l = detected;
    if ((int)env_cap < l) l = (int)env_cap;
    int u = atomic_load_explicit(&user_cap, memory_order_relaxed);
    if (u < l) l = u;
    return (enum cpu_level)l;
}

enum cpu_level cpu_set_level(enum cpu_level cap)
{
    atomic_store(&user_cap, (int)cap);
    return cpu_level();
}

const char *cpu_level_name(enum cpu_level l)
{
    switch (l) {
    case CPU_GENERIC: return "generic";
    case CPU_AVX2: return "avx2";
    case CPU_AVX512: return "avx512";
    }
    return "?";
}

static bool amx_granted;
static atomic_bool amx_allowed = true;
static pthread_once_t amx_once = PTHREAD_ONCE_INIT;

static void amx_request(void)
{
    const char *env = getenv("CBX_AMX");
    if ((env && strcmp(env, "0") == 0) || !cpu_features()->amx_tile) return;
#ifdef ARCH_REQ_XCOMP_PERM
    amx_granted = syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
#endif
}

bool cpu_amx_ready(void)
{
    pthread_once(&amx_once, amx_request);
    return amx_granted && atomic_load_explicit(&amx_allowed, memory_order_relaxed) &&
           cpu_level() >= CPU_AVX512;
}

void cpu_set_amx(bool allow) { atomic_store(&amx_allowed, allow); }

bool cpu_avx512_bf16_ready(void)
{
    return cpu_features()->avx512_bf16 && cpu_level() >= CPU_AVX512;
}

bool cpu_amx_bf16_ready(void) { return cpu_amx_ready() && cpu_features()->amx_bf16 && cpu_avx512_bf16_ready(); }
