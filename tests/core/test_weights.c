/* test_weights.c - weight placement (core/weights.h) on the cpu and ref
 * backends.
 *  - as stored: the source's bytes borrowed, shape/type/name kept;
 *  - converted (F32 -> F16 / BF16 / Q8_0 / Q4_0, Q8_0 -> F32) and
 *    transposed ([in, out] -> [out, in]): bytes equal to quantize_row of
 *    the same floats (what the loaders did before);
 *  - a q4_0 / q8_0 linear flagged WEIGHT_DECODE: the cpu backend repacks
 *    it for its GEMV where linear_pack supports it (CPU_WEIGHT_GEMV16 in
 *    tensor.extra; a set-owned weight in place, a borrowed one into set
 *    memory, the source left as it was only in value), ref keeps the
 *    plain layout; op_linear through each placement agrees with ref over
 *    the plain weight (max abs error printed, bound 1e-4 relative);
 *  - weight_new + weight_place: no copy of set memory;
 *  - conv1d / conv_transpose1d weights on cpu: an AMX panel slot where
 *    AMX-BF16 is ready, results equal to the unplaced weight's;
 *  - errors: an unconvertible type, rows not a whole number of blocks,
 *    chaining on *rc (a NULL source or an earlier failure does nothing);
 *  - weight_drop_source on a file mapping: the whole pages inside the
 *    tensor leave this process's resident memory (smaps), the bytes read
 *    back unchanged from the file.
 * Extras are released with the set (ASan / LSan builds check the
 * memory). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/arena.h"
#include "core/backend.h"
#include "core/cpu/cpu_weight.h"
#include "core/cpu/linear_kernels.h"
#include "core/cpu_features.h"
#include "core/quant.h"
#include "core/weights.h"
#include "testutil.h"

static float frand(uint32_t *s)
{
    *s = *s * 1664525u + 1013904223u;
    return (float)((*s >> 8) & 0xffff) / 32768.0f - 1.0f;
}

/* y = x w^T on backend be with weight w; NULL on failure */
static float *linear_on(const struct backend *be, const float *x, int64_t m, int64_t k, const struct tensor *w)
{
    struct arena *a = arena_create(be, 0);
    if (!a) return NULL;
    struct tensor *xt = op_from_host(a, TYPE_F32, 2, (int64_t[]){m, k}, x);
    struct tensor *y = op_linear(a, xt, w, NULL);
    float *out = NULL;
    if (y && (out = malloc(tensor_nbytes(y)))) memcpy(out, y->data, tensor_nbytes(y));
    if (!y) printf("op_linear on %s: %s\n", be->name, arena_errmsg(a));
    arena_free(a);
    return out;
}

static void conversions(const struct backend *be)
{
    char err[ERR_MAX] = "";
    const int64_t N = 48, K = 128;
    uint32_t seed = 7;
    float *f = malloc(sizeof(float) * (size_t)(N * K)), *ft = malloc(sizeof(float) * (size_t)(N * K));
    char *want = malloc((size_t)(N * K) * 4);
    struct weight_set *s = weight_set_create(be);
    CHECK(f && ft && want && s, "set-up");
    if (!f || !ft || !want || !s) goto done;
    for (int64_t i = 0; i < N * K; i++) f[i] = frand(&seed);
    /* ft: f transposed, [K, N] */
    for (int64_t o = 0; o < N; o++)
        for (int64_t i = 0; i < K; i++) ft[i * N + o] = f[o * K + i];
    struct tensor src = tensor_make(TYPE_F32, 2, (int64_t[]){N, K}, f, NULL);
    src.name = "w";
    struct tensor srct = tensor_make(TYPE_F32, 2, (int64_t[]){K, N}, ft, NULL);
    srct.name = "wt";
    cbx_status rc = CBX_OK;

    const struct tensor *p = weight_place(s, &src, WEIGHT_PLAIN, WEIGHT_AS_STORED, 0, &rc, err);
    CHECK(rc == CBX_OK && p && p != &src && p->data == f && p->type == TYPE_F32 && p->ne[0] == N &&
              p->ne[1] == K && p->name == src.name && !p->extra,
          "%s: as stored: borrowed, descriptor of the set", be->name);

    const enum dtype types[4] = {TYPE_F16, TYPE_BF16, TYPE_Q8_0, TYPE_Q4_0};
    for (int i = 0; i < 4; i++) {
        const size_t rs = dtype_row_size(types[i], K);
        for (int64_t o = 0; o < N; o++) quantize_row(types[i], f + o * K, want + (size_t)o * rs, K);
        p = weight_place(s, &src, WEIGHT_LINEAR, types[i], 0, &rc, err);
        CHECK(rc == CBX_OK && p && p->type == types[i] && p->ne[0] == N && p->ne[1] == K && p->data != f &&
                  weight_set_owns(s, p->data) && !memcmp(p->data, want, rs * (size_t)N),
              "%s: f32 -> %s: quantize_row's bytes (%s)", be->name, dtype_name(types[i]), err);
        const struct tensor *pt = weight_place(s, &srct, WEIGHT_LINEAR, types[i], WEIGHT_TRANSPOSE, &rc, err);
        CHECK(rc == CBX_OK && pt && pt->type == types[i] && pt->ne[0] == N && pt->ne[1] == K &&
                  !memcmp(pt->data, want, rs * (size_t)N),
              "%s: f32 [in, out] -> %s [out, in]: the same bytes (%s)", be->name, dtype_name(types[i]), err);
    }
    /* back: Q8_0 -> F32 is dequantize_row */
    {
        const size_t rs = dtype_row_size(TYPE_Q8_0, K);
        for (int64_t o = 0; o < N; o++) quantize_row(TYPE_Q8_0, f + o * K, want + (size_t)o * rs, K);
        struct tensor q = tensor_make(TYPE_Q8_0, 2, (int64_t[]){N, K}, want, NULL);
        p = weight_place(s, &q, WEIGHT_PLAIN, TYPE_F32, 0, &rc, err);
        float *row = malloc(sizeof(float) * (size_t)K);
        bool same = p && row;
        for (int64_t o = 0; same && o < N; o++) {
            dequantize_row(TYPE_Q8_0, want + (size_t)o * rs, row, K);
            same = !memcmp(row, (const float *)p->data + o * K, sizeof(float) * (size_t)K);
        }
        free(row);
        CHECK(rc == CBX_OK && same, "%s: q8_0 -> f32: dequantize_row's values (%s)", be->name, err);
    }
    /* weight_new: placed without a copy */
    struct tensor *d = weight_new(s, TYPE_F32, 1, (int64_t[]){K}, "derived", &rc, err);
    if (d) memcpy(d->data, f, sizeof(float) * (size_t)K);
    p = weight_place(s, d, WEIGHT_NORM, WEIGHT_AS_STORED, 0, &rc, err);
    CHECK(rc == CBX_OK && d && p && p->data == d->data && !strcmp(p->name, "derived"),
          "%s: weight_new then placed in place (%s)", be->name, err);

    /* errors, and chaining */
    CHECK(!weight_place(s, NULL, WEIGHT_PLAIN, WEIGHT_AS_STORED, 0, &rc, err) && rc == CBX_OK,
          "%s: a NULL source places nothing and sets no error", be->name);
    struct tensor odd = tensor_make(TYPE_F32, 2, (int64_t[]){2, 33}, f, NULL);
    p = weight_place(s, &odd, WEIGHT_LINEAR, TYPE_Q4_0, 0, &rc, err);
    CHECK(!p && rc == CBX_ERR_INVALID_ARG && strstr(err, "33"), "%s: rows of 33 as q4_0 refused: '%s'",
          be->name, err);
    p = weight_place(s, &src, WEIGHT_PLAIN, WEIGHT_AS_STORED, 0, &rc, err);
    CHECK(!p && rc == CBX_ERR_INVALID_ARG, "%s: after a failure placement does nothing", be->name);
    rc = CBX_OK;
    struct tensor ints = tensor_make(TYPE_I32, 1, (int64_t[]){4}, f, NULL);
    p = weight_place(s, &ints, WEIGHT_PLAIN, TYPE_F32, 0, &rc, err);
    CHECK(!p && rc == CBX_ERR_INVALID_ARG, "%s: an i32 tensor is no weight to convert: '%s'", be->name, err);
done:
    weight_set_free(s);
    free(f);
    free(ft);
    free(want);
}

/* A q4_0 / q8_0 decode linear: packed by cpu (where supported), plain on
 * ref; op_linear agrees. */
static void decode_linear(struct backend *cpu, enum dtype t)
{
    char err[ERR_MAX] = "";
    const int64_t N = 80, K = 256, M = 2; /* 5 groups of 16 rows */
    uint32_t seed = 11;
    float *f = malloc(sizeof(float) * (size_t)(N * K)), *x = malloc(sizeof(float) * (size_t)(M * K));
    const size_t rs = dtype_row_size(t, K), nb = rs * (size_t)N;
    char *q = aligned_alloc(64, (nb + 63) & ~(size_t)63), *q0 = malloc(nb);
    struct weight_set *sc = weight_set_create(cpu), *sr = weight_set_create(backend_ref());
    if (!f || !x || !q || !q0 || !sc || !sr) {
        CHECK(0, "set-up");
        goto done;
    }
    for (int64_t i = 0; i < N * K; i++) f[i] = frand(&seed);
    for (int64_t i = 0; i < M * K; i++) x[i] = frand(&seed);
    for (int64_t o = 0; o < N; o++) quantize_row(t, f + o * K, q + (size_t)o * rs, K);
    memcpy(q0, q, nb);
    struct tensor src = tensor_make(t, 2, (int64_t[]){N, K}, q, NULL);
    cbx_status rc = CBX_OK;
    const struct tensor *pr = weight_place(sr, &src, WEIGHT_LINEAR, WEIGHT_AS_STORED, WEIGHT_DECODE, &rc, err);
    CHECK(rc == CBX_OK && pr && pr->data == q && !pr->extra, "ref %s: plain layout, borrowed", dtype_name(t));
    /* borrowed: packed into set memory (the source's pages may be dropped,
     * so compare against the copy q0) */
    const struct tensor *pb = weight_place(sc, &src, WEIGHT_LINEAR, WEIGHT_AS_STORED, WEIGHT_DECODE, &rc, err);
    /* owned (converted from f32): packed in place */
    struct tensor srcf = tensor_make(TYPE_F32, 2, (int64_t[]){N, K}, f, NULL);
    const struct tensor *po = weight_place(sc, &srcf, WEIGHT_LINEAR, t, WEIGHT_DECODE, &rc, err);
    /* not flagged for decode: plain */
    const struct tensor *pp = weight_place(sc, &srcf, WEIGHT_LINEAR, t, 0, &rc, err);
    CHECK(rc == CBX_OK && pb && po && pp, "cpu %s placements: %s", dtype_name(t), err);
    if (rc != CBX_OK) goto done;
    const bool packs = linear_pack_supported(&src) && linear_pack_copies();
    CHECK(!pp->extra && !memcmp(pp->data, q0, nb), "cpu %s without WEIGHT_DECODE: plain bytes", dtype_name(t));
    if (packs) {
        CHECK(cpu_weight_is(pb, CPU_WEIGHT_GEMV16) && pb->data != q && weight_set_owns(sc, pb->data),
              "cpu %s borrowed decode linear: packed into set memory", dtype_name(t));
        CHECK(cpu_weight_is(po, CPU_WEIGHT_GEMV16) && weight_set_owns(sc, po->data),
              "cpu %s converted decode linear: packed in place", dtype_name(t));
    } else {
        printf("cpu %s: no packed GEMV here (level %s or CBX_PACK): plain layout checked\n", dtype_name(t),
               cpu_level_name(cpu_level()));
        CHECK(!pb->extra && !po->extra, "cpu %s: unpacked where packing is not supported", dtype_name(t));
    }
    struct tensor plain = tensor_make(t, 2, (int64_t[]){N, K}, q0, NULL);
    /* the cpu's plain path (x quantised to q8_0 as on the packed one: only
     * the summation order differs) and ref's (float x: the activation's
     * rounding, <= ~1% here) */
    float *yr = linear_on(backend_ref(), x, M, K, &plain), *yc = linear_on(cpu, x, M, K, &plain),
          *yb = linear_on(cpu, x, M, K, pb), *yo = linear_on(cpu, x, M, K, po);
    if (!yr || !yc || !yb || !yo) {
        CHECK(0, "op_linear %s", dtype_name(t));
    } else {
        double eb = 0, eo = 0, er = 0, ymax = 0;
        for (int64_t i = 0; i < M * N; i++) {
            eb = fmax(eb, fabs((double)yb[i] - yc[i]));
            eo = fmax(eo, fabs((double)yo[i] - yc[i]));
            er = fmax(er, fabs((double)yb[i] - yr[i]));
            ymax = fmax(ymax, fabs((double)yr[i]));
        }
        printf("cpu %s decode linear vs the cpu's plain weight: max abs %.3g (borrowed), %.3g (converted); "
               "vs ref: %.3g; max |y| %.3g\n",
               dtype_name(t), eb, eo, er, ymax);
        CHECK(eb <= 1e-5 * (ymax + 1) && eo <= 1e-5 * (ymax + 1), "cpu %s placed linears agree with plain ones",
              dtype_name(t));
        CHECK(er <= 1e-2 * (ymax + 1), "cpu %s placed linear within the activation rounding of ref", dtype_name(t));
    }
    free(yc);
    free(yr);
    free(yb);
    free(yo);
done:
    weight_set_free(sc);
    weight_set_free(sr);
    free(f);
    free(x);
    free(q);
    free(q0);
}

/* y of a conv (transposed when tr) with weight w on cpu, BF16 products
 * asked for (AMX where ready); NULL on failure */
static float *conv_on(struct backend *cpu, const float *x, int64_t cin, int64_t T, const struct tensor *w, bool tr,
                      size_t *n)
{
    struct arena *a = arena_create(cpu, 0);
    if (!a) return NULL;
    arena_set_bf16(a, true);
    struct tensor *xt = op_from_host(a, TYPE_F32, 3, (int64_t[]){1, cin, T}, x), *y;
    if (tr) {
        const struct conv_transpose1d_params p = {4, 2, 0, 1, 1};
        y = op_conv_transpose1d(a, xt, w, NULL, &p);
    } else {
        const struct conv1d_params p = {1, 2, 1, 2, 2, PAD_ZERO};
        y = op_conv1d(a, xt, w, NULL, &p);
    }
    float *out = NULL;
    if (y && (out = malloc(tensor_nbytes(y)))) {
        memcpy(out, y->data, tensor_nbytes(y));
        *n = (size_t)tensor_nelements(y);
    }
    if (!y) printf("conv on cpu: %s\n", arena_errmsg(a));
    arena_free(a);
    return out;
}

/* Convolution weights on cpu: where AMX-BF16 is ready they get a panel
 * slot (CPU_WEIGHT_CONV) filled on first use; the results equal those of
 * the same weight unplaced (panels packed per call), bit for bit, on the
 * first and a later call; elsewhere the plain layout. */
static void conv_weights(struct backend *cpu)
{
    char err[ERR_MAX] = "";
    const int64_t C = 64, T = 96, K = 3, KT = 8;
    uint32_t seed = 5;
    float *x = malloc(sizeof(float) * (size_t)(C * T)), *w = malloc(sizeof(float) * (size_t)(C * C * KT));
    struct weight_set *s = weight_set_create(cpu);
    if (!x || !w || !s) {
        CHECK(0, "set-up");
        goto done;
    }
    for (int64_t i = 0; i < C * T; i++) x[i] = frand(&seed);
    for (int64_t i = 0; i < C * C * KT; i++) w[i] = frand(&seed) * 0.1f;
    const bool bf16 = cpu_features()->avx512_bf16; /* panels for AMX-BF16 or AVX512-BF16 */
    for (int tr = 0; tr < 2; tr++) {
        struct tensor src = tensor_make(TYPE_F32, 3, (int64_t[]){C, C, tr ? KT : K}, w, NULL);
        cbx_status rc = CBX_OK;
        const struct tensor *p =
            weight_place(s, &src, tr ? WEIGHT_CONV_TRANSPOSE1D : WEIGHT_CONV1D, WEIGHT_AS_STORED, 0, &rc, err);
        CHECK(rc == CBX_OK && p && p->data == w, "conv%s weight placed in place: %s", tr ? "_transpose1d" : "1d", err);
        if (!p) continue;
        CHECK(bf16 ? cpu_weight_is(p, CPU_WEIGHT_CONV) : !p->extra, "conv%s weight: %s", tr ? "_transpose1d" : "1d",
              bf16 ? "a BF16 panel slot" : "plain (no AVX512-BF16 here)");
        size_t n0 = 0, n1 = 0, n2 = 0;
        float *y0 = conv_on(cpu, x, C, T, &src, tr, &n0), *y1 = conv_on(cpu, x, C, T, p, tr, &n1),
              *y2 = conv_on(cpu, x, C, T, p, tr, &n2);
        CHECK(y0 && y1 && y2 && n0 == n1 && n1 == n2 && !memcmp(y0, y1, n0 * sizeof *y0) &&
                  !memcmp(y0, y2, n0 * sizeof *y0),
              "conv%s%s: placed weight (first call, later call) == unplaced, bit for bit", tr ? "_transpose1d" : "1d",
              bf16 ? " with BF16 panels" : "");
        free(y0);
        free(y1);
        free(y2);
    }
    printf("conv weights: AVX512-BF16 %s\n", bf16 ? "here: panels kept with the placed weights" : "not here: plain layout");
done:
    weight_set_free(s);
    free(x);
    free(w);
}

/* Resident kB of the mapping that starts at p (/proc/self/smaps), -1 if not found. */
static long rss_kb(const void *p)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    char line[512];
    long kb = -1;
    bool in = false;
    while (f && fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) in = lo == (unsigned long)p;
        else if (in && sscanf(line, "Rss: %ld kB", &kb) == 1) break;
    }
    if (f) fclose(f);
    return kb;
}

static void drop_source(void)
{
    const size_t n = (size_t)2 << 20;
    char path[] = "/tmp/cbx_test_weights_XXXXXX";
    const int fd = mkstemp(path);
    unsigned char *buf = malloc(n);
    CHECK(fd >= 0 && buf, "temp file");
    if (fd < 0 || !buf) {
        free(buf);
        return;
    }
    for (size_t i = 0; i < n; i++) buf[i] = (unsigned char)(i * 31 + 7);
    const bool wrote = write(fd, buf, n) == (ssize_t)n;
    unsigned char *map = wrote ? mmap(NULL, n, PROT_READ, MAP_PRIVATE, fd, 0) : MAP_FAILED;
    close(fd);
    unlink(path);
    CHECK(map != MAP_FAILED, "file mapped");
    if (map != MAP_FAILED) {
        unsigned sum = 0;
        for (size_t i = 0; i < n; i += 4096) sum += map[i];
        const long before = rss_kb(map);
        /* a tensor over bytes [100, n - 100): whole pages 4096 .. n - 4096 */
        const int64_t ne[1] = {(int64_t)(n - 200) / 4};
        const struct tensor t = tensor_make(TYPE_F32, 1, ne, map + 100, NULL);
        weight_drop_source(&t);
        const long after = rss_kb(map);
        const bool same = memcmp(map, buf, n) == 0;
        printf("weight_drop_source: mapping resident %ld kB -> %ld kB, bytes %s (sum %u)\n", before, after,
               same ? "unchanged" : "CHANGED", sum);
        CHECK(before >= 2000 && after >= 0 && after <= 8, "the tensor's whole pages leave resident memory");
        CHECK(same, "and read back as the file's bytes");
        munmap(map, n);
    }
    free(buf);
}

int main(void)
{
    struct backend *cpu = backend_cpu_create(2);
    CHECK(cpu != NULL, "cpu backend");
    if (!cpu) return test_summary();
    conversions(cpu);
    conversions(backend_ref());
    decode_linear(cpu, TYPE_Q4_0);
    decode_linear(cpu, TYPE_Q8_0);
    conv_weights(cpu);
    drop_source();
    CHECK(weight_set_create(NULL) == NULL, "no set without a backend");
    backend_cpu_free(cpu);
    return test_summary();
}
