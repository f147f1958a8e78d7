/* test_rng.c - the shared RNG against the test vectors of spec/rng.md §6
 * and spec/synthetic-weights.md §2-3; op_randn on the ref and cpu
 * backends against rng_gaussian_fill, bit for bit. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"
#include "core/ops.h"
#include "core/rng.h"
#include "testutil.h"

static uint32_t fbits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

/* op_randn of n values on be from a stream already 6 draws in: the same
 * bits as rng_gaussian_fill from the same point, the counter moved as far */
static void check_randn(const struct backend *be, int64_t n)
{
    float *want = malloc(sizeof(float) * (size_t)n), *got = malloc(sizeof(float) * (size_t)n);
    struct arena *a = arena_create(be, 0);
    CHECK(want && got && a, "randn buffers");
    if (want && got && a) {
        struct rng_stream h, d;
        rng_stream_init(&h, "hift.sinegen.noise", 9);
        h.counter = 6;
        d = h;
        rng_gaussian_fill(&h, want, (size_t)n);
        struct tensor *t = op_randn(a, 2, (int64_t[]){9, n / 9}, &d);
        CHECK(t && arena_status(a) == CBX_OK && tensor_to_host(t, got) == CBX_OK, "op_randn on %s", be->name);
        int64_t bad = 0;
        for (int64_t i = 0; t && i < n; i++) bad += memcmp(&want[i], &got[i], sizeof(float)) != 0;
        printf("op_randn %s, %lld values: %lld differ from rng_gaussian_fill\n", be->name, (long long)n,
               (long long)bad);
        CHECK(t && bad == 0, "op_randn %s bit for bit", be->name);
        CHECK(d.counter == h.counter, "op_randn %s moves the counter by 2 n (%llu, want %llu)", be->name,
              (unsigned long long)d.counter, (unsigned long long)h.counter);
    }
    arena_free(a);
    free(want);
    free(got);
}

int main(void)
{
    CHECK(rng_fnv1a64("", 0) == 0xcbf29ce484222325ull, "fnv(\"\")");
    CHECK(rng_fnv1a64("a", 1) == 0xaf63dc4c8601ec8cull, "fnv(\"a\")");

    struct rng_stream s;
    rng_stream_init(&s, "t3.sample", 42);
    CHECK(s.key == 0xcfff638f605f98baull, "t3.sample key %llx", (unsigned long long)s.key);
    const uint32_t m[4] = {11163588, 2345619, 1700856, 4659616};
    const float u[4] = {0.6654016971588135f, 0.13980978727340698f, 0.1013789176940918f,
                        0.27773475646972656f};
    for (int i = 0; i < 4; i++) CHECK(rng_m24(s.key, (uint64_t)i) == m[i], "t3.sample m[%d]", i);
    for (int i = 0; i < 4; i++) CHECK(rng_uniform(&s) == u[i], "t3.sample u[%d]", i);
    CHECK(s.counter == 4, "counter advances by one per uniform");

    rng_stream_init(&s, "s3gen.cfm.z", 42);
    CHECK(s.key == 0x219ae1f114f09633ull, "s3gen.cfm.z key");
    const uint32_t g[4] = {0x3e533c86, 0x3fa2b70b, 0x3f51e3d8, 0x3f221dd5};
    for (int i = 0; i < 4; i++) {
        float v = rng_gaussian(&s);
        CHECK(fbits(v) == g[i], "gaussian[%d] = %08x want %08x", i, fbits(v), g[i]);
    }
    CHECK(s.counter == 8, "counter advances by two per gaussian");

    /* synthetic-weights.md §3 key test vector */
    uint64_t key = rng_fnv1a64("speech_head.weight", 18);
    CHECK(key == 0x9147e3129ed14edcull, "weight key %llx", (unsigned long long)key);
    const uint32_t wm[4] = {12209353, 2158336, 7160375, 15046929};
    for (int i = 0; i < 4; i++) CHECK(rng_m24(key, (uint64_t)i) == wm[i], "weight m[%d]", i);

    /* categorical: zero-probability entries are never chosen, result is the
     * first index whose cumulative sum exceeds u * total */
    float probs[5] = {0, 0.25f, 0, 0.75f, 0};
    int counts[5] = {0};
    rng_stream_init(&s, "test.cat", 7);
    for (int i = 0; i < 4000; i++) {
        int64_t k = rng_categorical(&s, probs, 5);
        CHECK(k >= 0 && k < 5, "categorical in range");
        if (k >= 0 && k < 5) counts[k]++;
    }
    CHECK(counts[0] == 0 && counts[2] == 0 && counts[4] == 0, "zero-probability never drawn");
    CHECK(counts[1] > 850 && counts[1] < 1150, "p=0.25 drawn %d/4000", counts[1]);
    float onehot[3] = {0, 1, 0};
    CHECK(rng_categorical(&s, onehot, 3) == 1, "one-hot returns argmax");
    float none[2] = {0, 0};
    CHECK(rng_categorical(&s, none, 2) == -1, "all-zero returns -1");

    check_randn(backend_ref(), 9 * 1001);
    struct backend *cpu = backend_cpu_create(2);
    CHECK(cpu != NULL, "cpu backend");
    if (cpu) {
        check_randn(cpu, 9 * 1001);
        check_randn(cpu, 9 * 24007); /* many chunks over the pool */
        backend_cpu_free(cpu);
    }
    return test_summary();
}
