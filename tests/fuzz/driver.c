/* driver.c - stand-in for libFuzzer when the compiler is not clang.
 * Usage: fuzz_x SECONDS CORPUS_DIR. Replays every corpus file, then runs
 * seeded random mutations (bit flips, byte sets, truncation, splices of
 * corpus inputs) until SECONDS have passed. A crash or sanitizer report
 * fails the test; the driver prints the iteration count. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/rng.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct input { uint8_t *d; size_t n; };

static int load(const char *path, struct input *in)
{
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    in->d = malloc(n > 0 ? (size_t)n : 1);
    in->n = in->d && n >= 0 ? fread(in->d, 1, (size_t)n, f) : 0;
    fclose(f);
    return in->d ? 0 : -1;
}

int main(int argc, char **argv)
{
    if (argc < 3) { fprintf(stderr, "usage: %s SECONDS CORPUS_DIR\n", argv[0]); return 2; }
    double seconds = atof(argv[1]);
    struct input corpus[512];
    int nc = 0;
    DIR *dir = opendir(argv[2]);
    if (!dir) { fprintf(stderr, "%s: cannot open corpus\n", argv[2]); return 2; }
    struct dirent *de;
    while ((de = readdir(dir)) && nc < 512) {
        if (de->d_name[0] == '.') continue;
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", argv[2], de->d_name);
        if (load(p, &corpus[nc]) == 0) nc++;
    }
    closedir(dir);
    if (nc == 0) { fprintf(stderr, "%s: empty corpus\n", argv[2]); return 2; }
    for (int i = 0; i < nc; i++) LLVMFuzzerTestOneInput(corpus[i].d, corpus[i].n);

    struct rng_stream r;
    rng_stream_init(&r, "fuzz", 1);
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    long iters = 0;
    uint8_t *buf = NULL;
    for (;; iters++) {
        if ((iters & 63) == 0) {
            clock_gettime(CLOCK_MONOTONIC, &t);
            if ((double)(t.tv_sec - t0.tv_sec) + 1e-9 * (double)(t.tv_nsec - t0.tv_nsec) > seconds) break;
        }
        struct input *src = &corpus[rng_next_m24(&r) % (uint32_t)nc];
        size_t n = src->n;
        free(buf);
        buf = malloc(n + 64);
        if (!buf) return 2;
        memcpy(buf, src->d, n);
        int muts = 1 + (int)(rng_next_m24(&r) % 8);
        for (int m = 0; m < muts; m++) {
            uint32_t k = rng_next_m24(&r) % 5;
            if (n == 0) k = 3;
            size_t pos = n ? rng_next_m24(&r) % n : 0;
            if (k == 0) buf[pos] ^= (uint8_t)(1u << (rng_next_m24(&r) % 8));
            else if (k == 1) buf[pos] = (uint8_t)rng_next_m24(&r);
            else if (k == 2) n = pos;                       /* truncate */
            else if (k == 3 && n < src->n + 64) buf[n++] = (uint8_t)rng_next_m24(&r);
            else if (k == 4) { static const uint8_t v[] = {0, 0xff, 0x7f, 0x80};
                               buf[pos] = v[rng_next_m24(&r) % 4]; }
        }
        LLVMFuzzerTestOneInput(buf, n);
    }
    free(buf);
    printf("fuzz: %d corpus inputs, %ld mutated runs in %.0f s\n", nc, iters, seconds);
    for (int i = 0; i < nc; i++) free(corpus[i].d);
    return 0;
}
