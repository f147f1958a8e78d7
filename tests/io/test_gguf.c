/* test_gguf.c - GGUF v3 reader and writer.
 * 1. A file assembled byte by byte here from the spec (gguf.md) is read:
 *    metadata, shape order (innermost-first dims -> outermost-first shape),
 *    data placement; every truncation of it is refused.
 * 2. Writer -> reader round trip of every metadata type (nested arrays,
 *    empty and NUL-containing strings) and every tensor type, quantised
 *    data made with quantize_row; quantise -> write -> read -> dequantise
 *    error against the format's bound.
 * 3. The writer's bytes: dims reversed, alignment padding (default 32 and
 *    general.alignment = 64), padding after the last tensor.
 * 4. Streaming writer, its misuse, and no partial file on failure.
 * 5. Malformed files (one defect each) refused with CBX_ERR_FORMAT and a
 *    message naming the defect. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/quant.h"
#include "io/gguf.h"
#include "alloc_hook.h"
#include "testutil.h"

struct bb {
    uint8_t *b;
    size_t n, cap;
};

static void bb_put(struct bb *b, const void *p, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->b = realloc(b->b, b->cap);
    }
    memcpy(b->b + b->n, p, n);
    b->n += n;
}
static void bb_u8(struct bb *b, uint8_t v) { bb_put(b, &v, 1); }
static void bb_u32(struct bb *b, uint32_t v) { bb_put(b, &v, 4); }
static void bb_u64(struct bb *b, uint64_t v) { bb_put(b, &v, 8); }
static void bb_str(struct bb *b, const char *s)
{
    bb_u64(b, strlen(s));
    bb_put(b, s, strlen(s));
}
static void bb_pad(struct bb *b, size_t a)
{
    while (b->n % a) bb_u8(b, 0);
}


/* ---- 1 + 5: hand-made files ------------------------------------------ */

enum defect {
    OK, BAD_MAGIC, VERSION_1, VERSION_BE, HUGE_NT, HUGE_NKV, KEY_LEN_EOF, VALUE_TYPE, ARRAY_HUGE,
    ARRAY_DEEP, BOOL_2, DUP_KEY, ALIGN_TYPE, ALIGN_NPOT, NDIMS_5, TYPE_Q4K, TYPE_200, OFF_UNALIGNED,
    OFF_RANGE, OVERLAP, DUP_TENSOR, Q8_ROW, DIM_OVERFLOW, KEY_NUL, STR_LEN_EOF, ARR_ELEM_TYPE,
    VERSION_2, N_DEFECTS
};

/* A small valid file (version 3, 5 keys, tensors "w" f32 ne {4, 3} and "q"
 * q8_0 ne {32}; the file ends with q's last byte), or the same with one
 * defect. */
static void build(struct bb *b, enum defect d)
{
    b->n = 0;
    bb_put(b, d == BAD_MAGIC ? "GGUX" : "GGUF", 4);
    bb_u32(b, d == VERSION_1 ? 1 : d == VERSION_BE ? 0x03000000u : d == VERSION_2 ? 2 : 3);
    bb_u64(b, d == HUGE_NT ? (uint64_t)1 << 40 : 2);
    bb_u64(b, d == HUGE_NKV ? (uint64_t)1 << 40 : 5);

    if (d == KEY_LEN_EOF) bb_u64(b, (uint64_t)1 << 50);
    else bb_str(b, "general.architecture");
    bb_u32(b, d == VALUE_TYPE ? 13 : GGUF_TYPE_STRING);
    if (d == STR_LEN_EOF) bb_u64(b, 1000000);
    else bb_str(b, "chatterbox");

    bb_str(b, d == KEY_NUL ? "test.u32\0x" : "test.u32"); /* strlen stops at the NUL... */
    if (d == KEY_NUL) { b->n -= 8 + 8; bb_u64(b, 10); bb_put(b, "test.u\0xx", 10); }
    bb_u32(b, GGUF_TYPE_UINT32);
    bb_u32(b, 7);

    bb_str(b, "test.arr");
    bb_u32(b, GGUF_TYPE_ARRAY);
    if (d == ARRAY_DEEP) {
        for (int k = 0; k < 9; k++) { bb_u32(b, GGUF_TYPE_ARRAY); bb_u64(b, 1); }
        bb_u32(b, GGUF_TYPE_INT16);
        bb_u64(b, 0);
    } else {
        bb_u32(b, d == ARR_ELEM_TYPE ? 77 : GGUF_TYPE_INT16);
        bb_u64(b, d == ARRAY_HUGE ? (uint64_t)1 << 40 : 3);
        int16_t v[3] = {1, -2, 3};
        bb_put(b, v, 6);
    }

    bb_str(b, d == DUP_KEY ? "test.u32" : "test.flag");
    bb_u32(b, GGUF_TYPE_BOOL);
    bb_u8(b, d == BOOL_2 ? 2 : 1);

    bb_str(b, "general.alignment");
    bb_u32(b, d == ALIGN_TYPE ? GGUF_TYPE_UINT64 : GGUF_TYPE_UINT32);
    if (d == ALIGN_TYPE) bb_u64(b, 32);
    else bb_u32(b, d == ALIGN_NPOT ? 48 : 32);

    /* tensor infos */
    bb_str(b, "w");
    bb_u32(b, d == NDIMS_5 ? 5 : 2);
    bb_u64(b, 4); /* ne[0]: innermost */
    bb_u64(b, 3);
    if (d == NDIMS_5) { bb_u64(b, 1); bb_u64(b, 1); bb_u64(b, 1); }
    if (d == DIM_OVERFLOW) { b->n -= 16; bb_u64(b, (uint64_t)1 << 40); bb_u64(b, (uint64_t)1 << 40); }
    bb_u32(b, d == TYPE_Q4K ? 12 : d == TYPE_200 ? 200 : TYPE_F32);
    bb_u64(b, 0);

    bb_str(b, d == DUP_TENSOR ? "w" : "q");
    bb_u32(b, 1);
    bb_u64(b, d == Q8_ROW ? 31 : 32);
    bb_u32(b, TYPE_Q8_0);
    bb_u64(b, d == OFF_UNALIGNED ? 68 : d == OFF_RANGE ? 4096 : d == OVERLAP ? 32 : 64);

    bb_pad(b, 32);
    float w[12];
    for (int i = 0; i < 12; i++) w[i] = (float)i * 0.5f - 1.0f;
    bb_put(b, w, 48);
    bb_pad(b, 32);
    uint8_t q[34];
    q[0] = 0x00; q[1] = 0x3c; /* d = fp16 1.0 */
    for (int i = 0; i < 32; i++) q[2 + i] = (uint8_t)(int8_t)(i - 16);
    bb_put(b, q, 34);
}

static void test_handmade(void)
{
    struct bb b = {0};
    char err[ERR_MAX] = "";
    struct io_gguf *g = NULL;
    build(&b, OK);
    cbx_status rc = io_gguf_open_memory(b.b, b.n, &g, err);
    CHECK(rc == CBX_OK, "hand-made v3 file opens: %s", err);
    if (g) {
        CHECK(io_gguf_version(g) == 3 && io_gguf_alignment(g) == 32 && io_gguf_data_offset(g) % 32 == 0,
              "version 3, alignment 32");
        const char *arch = NULL;
        uint32_t u = 0;
        bool flag = false;
        const int16_t *arr = NULL;
        uint64_t n = 0, len = 0;
        rc = io_gguf_get_str(g, "general.architecture", &arch, &len, err);
        CHECK(rc == CBX_OK && strcmp(arch, "chatterbox") == 0 && len == 10, "string kv");
        rc = io_gguf_get_u32(g, "test.u32", &u, err);
        CHECK(rc == CBX_OK && u == 7, "uint32 kv = %u", u);
        rc = io_gguf_get_bool(g, "test.flag", &flag, err);
        CHECK(rc == CBX_OK && flag, "bool kv");
        rc = io_gguf_get_arr(g, "test.arr", GGUF_TYPE_INT16, (const void **)&arr, &n, err);
        CHECK(rc == CBX_OK && n == 3 && arr[0] == 1 && arr[1] == -2 && arr[2] == 3, "int16 array kv");
        rc = io_gguf_get_u64(g, "test.u32", (uint64_t *)&n, err);
        CHECK(rc == CBX_ERR_FORMAT && strstr(err, "uint32") && strstr(err, "uint64"), "wrong type: %s", err);
        rc = io_gguf_get_u32(g, "nope", &u, err);
        CHECK(rc == CBX_ERR_NOT_FOUND && strstr(err, "nope"), "missing key: %s", err);
        rc = io_gguf_get_arr(g, "test.arr", GGUF_TYPE_INT32, (const void **)&arr, &n, err);
        CHECK(rc == CBX_ERR_FORMAT && strstr(err, "int16"), "wrong array type: %s", err);
        CHECK(io_gguf_n_kv(g) == 5 && strcmp(io_gguf_kv_key(g, 1), "test.u32") == 0 &&
                  io_gguf_find_kv(g, "test.flag") == 3,
              "kv order and lookup");

        const struct tensor *w = io_gguf_find_tensor(g, "w"), *q = io_gguf_find_tensor(g, "q");
        CHECK(w && w->type == TYPE_F32 && w->ndim == 2 && w->ne[0] == 3 && w->ne[1] == 4,
              "ggml ne {4, 3} read as shape [3, 4]");
        if (w) {
            float want[12];
            for (int i = 0; i < 12; i++) want[i] = (float)i * 0.5f - 1.0f;
            check_close("hand-made f32 tensor values", w->data, want, 12, 0, 0);
            CHECK(w->nb[0] == 16 && w->nb[1] == 4, "row-major strides [16, 4]");
        }
        if (q) {
            float got[32], want[32];
            dequantize_row(TYPE_Q8_0, q->data, got, 32);
            for (int i = 0; i < 32; i++) want[i] = (float)(i - 16);
            check_close("hand-made q8_0 block dequantised", got, want, 32, 0, 0);
            CHECK((const uint8_t *)q->data - b.b == (ptrdiff_t)(io_gguf_data_offset(g) + 64) &&
                      io_gguf_tensor_offset(g, 1) == 64,
                  "q8_0 data at data section + 64, zero-copy");
        }
        CHECK(io_gguf_tensor(g, 2) == NULL && io_gguf_kv_value(g, 5) == NULL, "index out of range is NULL");
    }
    io_gguf_close(g);

    /* version 2 reads the same */
    build(&b, VERSION_2);
    rc = io_gguf_open_memory(b.b, b.n, &g, err);
    CHECK(rc == CBX_OK && io_gguf_version(g) == 2, "version 2 accepted: %s", err);
    io_gguf_close(g);

    /* every truncation refused */
    build(&b, OK);
    int accepted = 0;
    for (size_t k = 0; k < b.n; k++) {
        rc = io_gguf_open_memory(b.b, k, &g, err);
        if (rc == CBX_OK) { accepted++; io_gguf_close(g); }
        else if (rc != CBX_ERR_FORMAT) accepted += 1000;
    }
    CHECK(accepted == 0, "all %zu truncations refused with CBX_ERR_FORMAT (%d not)", b.n, accepted);
    rc = io_gguf_open_memory(b.b, 22, &g, err);
    CHECK(strstr(err, "truncated at byte 16") && strstr(err, "key/value count"), "truncation message: %s", err);
    free(b.b);
}

static void test_defects(void)
{
    static const struct { enum defect d; const char *expect; } cases[] = {
        {BAD_MAGIC, "bad magic"},
        {VERSION_1, "version 1 not supported"},
        {VERSION_BE, "big-endian"},
        {HUGE_NT, "tensor count"},
        {HUGE_NKV, "key/value count"},
        {KEY_LEN_EOF, "beyond the end"},
        {VALUE_TYPE, "value type 13"},
        {ARRAY_HUGE, "array of 1099511627776"},
        {ARRAY_DEEP, "nested deeper"},
        {BOOL_2, "bool value 2"},
        {DUP_KEY, "'test.u32' appears twice"},
        {ALIGN_TYPE, "general.alignment has type uint64"},
        {ALIGN_NPOT, "48 is not a power of two"},
        {NDIMS_5, "n_dims 5"},
        {TYPE_Q4K, "type id 12"},
        {TYPE_200, "type id 200"},
        {OFF_UNALIGNED, "not a multiple of the alignment"},
        {OFF_RANGE, "runs past the end"},
        {OVERLAP, "overlap"},
        {DUP_TENSOR, "tensor 'w' appears twice"},
        {Q8_ROW, "whole number"},
        {DIM_OVERFLOW, "runs past the end"},
        {KEY_NUL, "NUL"},
        {STR_LEN_EOF, "beyond the end"},
        {ARR_ELEM_TYPE, "element type 77"},
    };
    struct bb b = {0};
    char err[ERR_MAX];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        build(&b, cases[i].d);
        struct io_gguf *g = (void *)1;
        err[0] = 0;
        cbx_status rc = io_gguf_open_memory(b.b, b.n, &g, err);
        printf("  defect %-2d: %s\n", (int)cases[i].d, err);
        CHECK(rc == CBX_ERR_FORMAT && g == NULL && strstr(err, cases[i].expect), "defect %-2d refused: %s",
              (int)cases[i].d, err);
        if (rc == CBX_OK) io_gguf_close(g);
    }
    free(b.b);
}

/* ---- 2: writer -> reader round trip ---------------------------------- */

static void test_kv_roundtrip(const char *dir)
{
    char path[1024], err[ERR_MAX] = "";
    snprintf(path, sizeof path, "%s/kv.gguf", dir);
    struct io_gguf_writer *w = NULL;
    cbx_status rc = io_gguf_writer_create(&w, err);
    int fails = 0;
#define S(call) fails += (call) != CBX_OK
    S(io_gguf_writer_set_u8(w, "u8", 250, err));
    S(io_gguf_writer_set_i8(w, "i8", -100, err));
    S(io_gguf_writer_set_u16(w, "u16", 65000, err));
    S(io_gguf_writer_set_i16(w, "i16", -32000, err));
    S(io_gguf_writer_set_u32(w, "u32", 4000000000u, err));
    S(io_gguf_writer_set_i32(w, "i32", -2000000000, err));
    S(io_gguf_writer_set_u64(w, "u64", 18000000000000000000ull, err));
    S(io_gguf_writer_set_i64(w, "i64", -9000000000000000000ll, err));
    S(io_gguf_writer_set_f32(w, "f32", 3.25f, err));
    S(io_gguf_writer_set_f64(w, "f64", -1e300, err));
    S(io_gguf_writer_set_bool(w, "bool", true, err));
    S(io_gguf_writer_set_str(w, "str", "h\xc3\xa9llo", err));
    S(io_gguf_writer_set_str(w, "empty", "", err));
    S(io_gguf_writer_set_u32(w, "replaced", 1, err));
    S(io_gguf_writer_set_u32(w, "replaced", 2, err));
    struct io_gguf_value nul = {.type = GGUF_TYPE_STRING, .v.str = {"a\0b", 3}};
    S(io_gguf_writer_set(w, "nul", &nul, err));
    uint8_t a_u8[3] = {1, 2, 255};
    int8_t a_i8[2] = {-128, 127};
    uint16_t a_u16[2] = {1, 65535};
    int16_t a_i16[2] = {-32768, 32767};
    uint32_t a_u32[2] = {0, 4294967295u};
    int32_t a_i32[3] = {-1, 0, 1};
    float a_f32[2] = {1.5f, -0.0f};
    uint8_t a_bool[3] = {1, 0, 1};
    uint64_t a_u64[1] = {~0ull};
    int64_t a_i64[2] = {INT64_MIN, INT64_MAX};
    double a_f64[2] = {0.1, 1e-300};
    const char *a_str[3] = {"<|endoftext|>", "", "\xe4\xb8\xad"};
    S(io_gguf_writer_set_arr(w, "a.u8", GGUF_TYPE_UINT8, a_u8, 3, err));
    S(io_gguf_writer_set_arr(w, "a.i8", GGUF_TYPE_INT8, a_i8, 2, err));
    S(io_gguf_writer_set_arr(w, "a.u16", GGUF_TYPE_UINT16, a_u16, 2, err));
    S(io_gguf_writer_set_arr(w, "a.i16", GGUF_TYPE_INT16, a_i16, 2, err));
    S(io_gguf_writer_set_arr(w, "a.u32", GGUF_TYPE_UINT32, a_u32, 2, err));
    S(io_gguf_writer_set_arr(w, "a.i32", GGUF_TYPE_INT32, a_i32, 3, err));
    S(io_gguf_writer_set_arr(w, "a.f32", GGUF_TYPE_FLOAT32, a_f32, 2, err));
    S(io_gguf_writer_set_arr(w, "a.bool", GGUF_TYPE_BOOL, a_bool, 3, err));
    S(io_gguf_writer_set_arr(w, "a.u64", GGUF_TYPE_UINT64, a_u64, 1, err));
    S(io_gguf_writer_set_arr(w, "a.i64", GGUF_TYPE_INT64, a_i64, 2, err));
    S(io_gguf_writer_set_arr(w, "a.f64", GGUF_TYPE_FLOAT64, a_f64, 2, err));
    S(io_gguf_writer_set_arr(w, "a.str", GGUF_TYPE_STRING, a_str, 3, err));
    S(io_gguf_writer_set_arr(w, "a.empty", GGUF_TYPE_FLOAT32, NULL, 0, err));
    /* [[1, 2], [3]] of int32 and [["x"], []] of strings, as arrays of arrays */
    int32_t r0[2] = {1, 2}, r1[1] = {3};
    struct io_gguf_value rows[2] = {
        {.type = GGUF_TYPE_ARRAY, .v.arr = {GGUF_TYPE_INT32, 2, r0}},
        {.type = GGUF_TYPE_ARRAY, .v.arr = {GGUF_TYPE_INT32, 1, r1}},
    };
    struct io_gguf_value nested = {.type = GGUF_TYPE_ARRAY, .v.arr = {GGUF_TYPE_ARRAY, 2, rows}};
    S(io_gguf_writer_set(w, "a.nested", &nested, err));
    struct io_gguf_str sx[1] = {{"x", 1}};
    struct io_gguf_value srows[2] = {
        {.type = GGUF_TYPE_ARRAY, .v.arr = {GGUF_TYPE_STRING, 1, sx}},
        {.type = GGUF_TYPE_ARRAY, .v.arr = {GGUF_TYPE_STRING, 0, NULL}},
    };
    struct io_gguf_value snested = {.type = GGUF_TYPE_ARRAY, .v.arr = {GGUF_TYPE_ARRAY, 2, srows}};
    S(io_gguf_writer_set(w, "a.snested", &snested, err));
#undef S
    CHECK(rc == CBX_OK && fails == 0, "set every metadata type (%d failed): %s", fails, err);
    /* refusals */
    rc = io_gguf_writer_set_u64(w, "general.alignment", 32, err);
    CHECK(rc == CBX_ERR_INVALID_ARG, "general.alignment as u64 refused: %s", err);
    rc = io_gguf_writer_set_u32(w, "", 1, err);
    CHECK(rc == CBX_ERR_INVALID_ARG, "empty key refused: %s", err);
    struct io_gguf_value bad_nest = {.type = GGUF_TYPE_ARRAY, .v.arr = {GGUF_TYPE_ARRAY, 1, &nul}};
    rc = io_gguf_writer_set(w, "bad", &bad_nest, err);
    CHECK(rc == CBX_ERR_INVALID_ARG && io_gguf_writer_set_u8(w, "after", 1, err) == CBX_OK,
          "array of arrays holding a string refused, writer still usable: %s", err);
    rc = io_gguf_writer_write(w, path, err);
    CHECK(rc == CBX_OK, "write kv file: %s", err);
    io_gguf_writer_free(w);

    struct io_gguf *g = NULL;
    rc = io_gguf_open(path, &g, err);
    CHECK(rc == CBX_OK, "open kv file: %s", err);
    if (!g) return;
    int bad = 0;
    uint8_t u8; int8_t i8; uint16_t u16; int16_t i16; uint32_t u32; int32_t i32;
    uint64_t u64; int64_t i64; float f32; double f64; bool b;
    const char *s;
    uint64_t len, n;
    const void *d;
    bad += io_gguf_get_u8(g, "u8", &u8, err) || u8 != 250;
    bad += io_gguf_get_i8(g, "i8", &i8, err) || i8 != -100;
    bad += io_gguf_get_u16(g, "u16", &u16, err) || u16 != 65000;
    bad += io_gguf_get_i16(g, "i16", &i16, err) || i16 != -32000;
    bad += io_gguf_get_u32(g, "u32", &u32, err) || u32 != 4000000000u;
    bad += io_gguf_get_i32(g, "i32", &i32, err) || i32 != -2000000000;
    bad += io_gguf_get_u64(g, "u64", &u64, err) || u64 != 18000000000000000000ull;
    bad += io_gguf_get_i64(g, "i64", &i64, err) || i64 != -9000000000000000000ll;
    bad += io_gguf_get_f32(g, "f32", &f32, err) || f32 != 3.25f;
    bad += io_gguf_get_f64(g, "f64", &f64, err) || f64 != -1e300;
    bad += io_gguf_get_bool(g, "bool", &b, err) || !b;
    bad += io_gguf_get_str(g, "str", &s, &len, err) || strcmp(s, "h\xc3\xa9llo") || len != 6;
    bad += io_gguf_get_str(g, "empty", &s, &len, err) || s[0] || len != 0;
    bad += io_gguf_get_u32(g, "replaced", &u32, err) || u32 != 2;
    bad += io_gguf_get_str(g, "nul", &s, &len, err) || len != 3 || memcmp(s, "a\0b", 4) != 0;
    CHECK(bad == 0, "scalar and string values round trip (%d wrong)", bad);
    CHECK(io_gguf_find_kv(g, "replaced") == 13 && io_gguf_find_kv(g, "bad") < 0 &&
              io_gguf_find_kv(g, "after") == io_gguf_n_kv(g) - 1,
          "insertion order kept, replace in place");
    bad = 0;
#define A(key, T, arr, cnt) \
    bad += io_gguf_get_arr(g, key, T, &d, &n, err) || n != cnt || (cnt && memcmp(d, arr, sizeof arr) != 0)
    A("a.u8", GGUF_TYPE_UINT8, a_u8, 3);
    A("a.i8", GGUF_TYPE_INT8, a_i8, 2);
    A("a.u16", GGUF_TYPE_UINT16, a_u16, 2);
    A("a.i16", GGUF_TYPE_INT16, a_i16, 2);
    A("a.u32", GGUF_TYPE_UINT32, a_u32, 2);
    A("a.i32", GGUF_TYPE_INT32, a_i32, 3);
    A("a.f32", GGUF_TYPE_FLOAT32, a_f32, 2);
    A("a.bool", GGUF_TYPE_BOOL, a_bool, 3);
    A("a.u64", GGUF_TYPE_UINT64, a_u64, 1);
    A("a.i64", GGUF_TYPE_INT64, a_i64, 2);
    A("a.f64", GGUF_TYPE_FLOAT64, a_f64, 2);
#undef A
    bad += io_gguf_get_arr(g, "a.empty", GGUF_TYPE_FLOAT32, &d, &n, err) || n != 0;
    if (io_gguf_get_arr(g, "a.str", GGUF_TYPE_STRING, &d, &n, err) == CBX_OK && n == 3) {
        const struct io_gguf_str *st = d;
        for (int i = 0; i < 3; i++) bad += strcmp(st[i].s, a_str[i]) != 0 || st[i].len != strlen(a_str[i]);
    } else {
        bad++;
    }
    if (io_gguf_get_arr(g, "a.nested", GGUF_TYPE_ARRAY, &d, &n, err) == CBX_OK && n == 2) {
        const struct io_gguf_value *rv = d;
        bad += rv[0].v.arr.type != GGUF_TYPE_INT32 || rv[0].v.arr.n != 2 || memcmp(rv[0].v.arr.data, r0, 8) ||
               rv[1].v.arr.n != 1 || memcmp(rv[1].v.arr.data, r1, 4);
    } else {
        bad++;
    }
    if (io_gguf_get_arr(g, "a.snested", GGUF_TYPE_ARRAY, &d, &n, err) == CBX_OK && n == 2) {
        const struct io_gguf_value *rv = d;
        const struct io_gguf_str *x = rv[0].v.arr.data;
        bad += rv[0].v.arr.type != GGUF_TYPE_STRING || rv[0].v.arr.n != 1 || strcmp(x[0].s, "x") ||
               rv[1].v.arr.type != GGUF_TYPE_STRING || rv[1].v.arr.n != 0;
    } else {
        bad++;
    }
    CHECK(bad == 0, "arrays of every type, strings and nested arrays round trip (%d wrong)", bad);
    CHECK(io_gguf_n_tensors(g) == 0, "no tensors");
    io_gguf_close(g);
}

struct tspec {
    enum dtype t;
    int ndim;
    int64_t ne[4];
    const char *name;
    double rtol; /* quantise -> dequantise bound relative to max |x| */
};

/* Bounds (x uniform in [-1, 1)): q8_0/q8_1 d = amax/127, error <= d/2
 * (+ fp16 rounding of d: 127 d 2^-11); q4_0/q5_0 d = max/-8 (-16), the
 * value opposite the maximum clamps, error <= d = amax/8 (amax/16);
 * q4_1/q5_1 d = (max-min)/15 (31), error <= d/2 <= amax/15 (amax/31), plus
 * fp16 rounding of d and m (<= 2^-10 amax); f16 2^-11, bf16 2^-8. */
static const struct tspec tensors[] = {
    {TYPE_F32, 2, {3, 5}, "f32", 0},
    {TYPE_F16, 2, {2, 7}, "f16", 4.9e-4},
    {TYPE_BF16, 1, {9}, "bf16", 3.9e-3},
    {TYPE_F64, 2, {2, 2}, "f64", -1},
    {TYPE_I8, 1, {5}, "i8", -1},
    {TYPE_I16, 1, {3}, "i16", -1},
    {TYPE_I32, 3, {1, 1, 3}, "i32", -1},
    {TYPE_I64, 1, {2}, "i64", -1},
    {TYPE_Q4_0, 2, {2, 64}, "q4_0", 0.125 + 0.004},
    {TYPE_Q4_1, 1, {64}, "q4_1", 1.0 / 15 + 0.002},
    {TYPE_Q5_0, 2, {3, 32}, "q5_0", 1.0 / 16 + 0.008},
    {TYPE_Q5_1, 3, {1, 2, 32}, "q5_1", 1.0 / 31 + 0.002},
    {TYPE_Q8_0, 4, {2, 2, 2, 32}, "q8_0", 1.0 / 254 + 0.0007},
    {TYPE_Q8_1, 1, {32}, "q8_1", 1.0 / 254 + 0.0007},
    {TYPE_F32, 0, {0}, "scalar", 0},
    {TYPE_F32, 2, {0, 8}, "empty", -1},
};
enum { NT = sizeof tensors / sizeof tensors[0] };

static void test_tensor_roundtrip(const char *dir)
{
    char path[1024], err[ERR_MAX] = "";
    snprintf(path, sizeof path, "%s/tensors.gguf", dir);
    struct io_gguf_writer *w = NULL;
    void *data[NT] = {0};
    float *src[NT] = {0};
    size_t nbytes[NT];
    cbx_status rc = io_gguf_writer_create(&w, err);
    io_gguf_writer_set_str(w, "general.architecture", "chatterbox", err);
    for (int i = 0; i < NT; i++) {
        const struct tspec *s = &tensors[i];
        struct tensor t = tensor_make(s->t, s->ndim, s->ne, NULL, NULL);
        int64_t n = tensor_nelements(&t);
        nbytes[i] = tensor_nbytes(&t);
        data[i] = malloc(nbytes[i] + 1);
        src[i] = malloc(((size_t)n + 1) * sizeof(float));
        fill_uniform(src[i], (size_t)n, -1.0f, 1.0f, 100 + (uint64_t)i);
        if (s->rtol >= 0) {
            quantize_row(s->t, src[i], data[i], n); /* f32/f16/bf16 too */
        } else {
            for (size_t k = 0; k < nbytes[i]; k++) ((uint8_t *)data[i])[k] = (uint8_t)(k * 13 + (size_t)i);
        }
        if (rc == CBX_OK) rc = io_gguf_writer_add_tensor(w, s->name, s->t, s->ndim, s->ne, data[i], err);
    }
    CHECK(rc == CBX_OK, "add %d tensors of every type: %s", NT, err);
    int64_t ne_u8[1] = {4};
    CHECK(io_gguf_writer_add_tensor(w, "u8", TYPE_U8, 1, ne_u8, data[0], err) == CBX_ERR_INVALID_ARG,
          "U8 tensor refused (no ggml id): %s", err);
    int64_t ne_bad[1] = {33};
    CHECK(io_gguf_writer_add_tensor(w, "qbad", TYPE_Q4_0, 1, ne_bad, data[0], err) == CBX_ERR_INVALID_ARG,
          "q4_0 row of 33 refused: %s", err);
    CHECK(io_gguf_writer_add_tensor(w, "f32", TYPE_F32, 1, ne_u8, data[0], err) == CBX_ERR_INVALID_ARG,
          "duplicate tensor name refused: %s", err);
    rc = io_gguf_writer_write(w, path, err);
    CHECK(rc == CBX_OK, "write tensors file: %s", err);
    io_gguf_writer_free(w);

    struct io_gguf *g = NULL;
    rc = io_gguf_open(path, &g, err);
    CHECK(rc == CBX_OK, "open tensors file: %s", err);
    if (g) {
        CHECK(io_gguf_n_tensors(g) == NT, "tensor count %d", io_gguf_n_tensors(g));
        int bad = 0;
        for (int i = 0; i < NT && i < io_gguf_n_tensors(g); i++) {
            const struct tspec *s = &tensors[i];
            const struct tensor *t = io_gguf_tensor(g, i);
            struct tensor want = tensor_make(s->t, s->ndim ? s->ndim : 1, s->ndim ? s->ne : (int64_t[]){1}, NULL,
                                             NULL);
            bool ok = t == io_gguf_find_tensor(g, s->name) && strcmp(t->name, s->name) == 0 && t->type == s->t &&
                      tensor_same_shape(t, &want) && memcmp(t->nb, want.nb, sizeof t->nb) == 0 &&
                      (io_gguf_data_offset(g) + io_gguf_tensor_offset(g, i)) % 32 == 0 &&
                      (uintptr_t)t->data % 32 == 0 && memcmp(t->data, data[i], nbytes[i]) == 0;
            if (!ok) { bad++; printf("  tensor %s differs\n", s->name); }
            if (s->rtol >= 0 && nbytes[i]) {
                int64_t n = tensor_nelements(t);
                float *out = malloc((size_t)n * sizeof *out);
                dequantize_row(t->type, t->data, out, n);
                char what[64];
                snprintf(what, sizeof what, "%s quantise->gguf->dequantise", s->name);
                check_close(what, out, src[i], (size_t)n, 0, s->rtol);
                free(out);
            }
        }
        CHECK(bad == 0, "every tensor type: name, type, shape, strides, 32-aligned offset, bytes (%d bad)", bad);
        CHECK(io_gguf_tensor(g, NT - 2)->ndim == 1 && io_gguf_tensor(g, NT - 2)->ne[0] == 1,
              "scalar written as ne {1} reads back as [1]");
    }
    io_gguf_close(g);
    for (int i = 0; i < NT; i++) { free(data[i]); free(src[i]); }
}

/* ---- 3: the writer's bytes ------------------------------------------- */

static uint64_t le64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }
static uint32_t le32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }

static void test_layout(const char *dir)
{
    char path[1024], err[ERR_MAX] = "";
    snprintf(path, sizeof path, "%s/layout.gguf", dir);
    struct io_gguf_writer *w = NULL;
    io_gguf_writer_create(&w, err);
    float v[30];
    for (int i = 0; i < 30; i++) v[i] = (float)i;
    int64_t ne[3] = {2, 3, 5};
    cbx_status rc = io_gguf_writer_add_tensor(w, "t", TYPE_F32, 3, ne, v, err);
    if (rc == CBX_OK) rc = io_gguf_writer_write(w, path, err);
    io_gguf_writer_free(w);
    size_t n = 0;
    uint8_t *b = test_read_file(path, &n);
    /* 24-byte header; "t": 8 + 1; n_dims 4; dims 3 x 8; type 4; offset 8
     * -> 73 bytes, data at 96, 120 bytes padded to 128 -> 224. */
    bool ok = rc == CBX_OK && b && n == 224 && memcmp(b, "GGUF", 4) == 0 && le32(b + 4) == 3 &&
              le64(b + 8) == 1 && le64(b + 16) == 0 && le64(b + 24) == 1 && b[32] == 't' && le32(b + 33) == 3 &&
              le64(b + 37) == 5 && le64(b + 45) == 3 && le64(b + 53) == 2 && le32(b + 61) == 0 &&
              le64(b + 65) == 0 && memcmp(b + 96, v, 120) == 0;
    for (size_t k = 73; ok && k < 96; k++) ok = b[k] == 0;
    for (size_t k = 216; ok && k < 224; k++) ok = b[k] == 0;
    CHECK(ok, "writer bytes: dims innermost first {5, 3, 2}, data at 96, zero padding to 224 (got %zu bytes): %s", n,
          err);
    free(b);

    /* general.alignment = 64 */
    snprintf(path, sizeof path, "%s/align64.gguf", dir);
    io_gguf_writer_create(&w, err);
    int64_t n10[1] = {10}, n25[1] = {25};
    uint8_t bytes[100];
    for (int i = 0; i < 100; i++) bytes[i] = (uint8_t)(i + 1);
    rc = io_gguf_writer_set_u32(w, "general.alignment", 64, err);
    if (rc == CBX_OK) rc = io_gguf_writer_add_tensor(w, "a", TYPE_I8, 1, n10, bytes, err);
    if (rc == CBX_OK) rc = io_gguf_writer_add_tensor(w, "b", TYPE_F32, 1, n25, bytes, err);
    if (rc == CBX_OK) rc = io_gguf_writer_write(w, path, err);
    io_gguf_writer_free(w);
    struct io_gguf *g = NULL;
    if (rc == CBX_OK) rc = io_gguf_open(path, &g, err);
    b = test_read_file(path, &n);
    ok = rc == CBX_OK && g && io_gguf_alignment(g) == 64 && io_gguf_data_offset(g) % 64 == 0 &&
         io_gguf_tensor_offset(g, 0) == 0 && io_gguf_tensor_offset(g, 1) == 64 &&
         n == io_gguf_data_offset(g) + 64 + 128 && memcmp(io_gguf_find_tensor(g, "b")->data, bytes, 100) == 0;
    CHECK(ok, "general.alignment 64: offsets 0 and 64, data section 64-aligned, file %zu bytes: %s", n, err);
    io_gguf_close(g);
    free(b);
}

/* ---- 4: streaming writer --------------------------------------------- */

static void test_streaming(const char *dir)
{
    char path[1024], ref[1024], tmp[1100], err[ERR_MAX] = "";
    snprintf(path, sizeof path, "%s/stream.gguf", dir);
    snprintf(ref, sizeof ref, "%s/stream_ref.gguf", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    uint8_t data[3 * 34 + 4 * 7 + 2];
    for (size_t i = 0; i < sizeof data; i++) data[i] = (uint8_t)(i * 5);
    struct io_gguf_writer *w = NULL;
    io_gguf_writer_create(&w, err);
    int64_t nq[2] = {1, 96}, nf[1] = {7}, nz[2] = {0, 3}, nh[1] = {1};
    io_gguf_writer_set_str(w, "k", "v", err);
    io_gguf_writer_add_tensor(w, "q", TYPE_Q8_0, 2, nq, data, err);
    io_gguf_writer_add_tensor(w, "z", TYPE_F32, 2, nz, NULL, err); /* empty: no data needed */
    io_gguf_writer_add_tensor(w, "f", TYPE_F32, 1, nf, data + 102, err);
    io_gguf_writer_add_tensor(w, "h", TYPE_F16, 1, nh, data + 130, err);
    cbx_status rc = io_gguf_writer_write(w, ref, err);
    CHECK(rc == CBX_OK, "one-shot write with an empty NULL-data tensor: %s", err);
    rc = io_gguf_writer_begin(w, path, err);
    for (size_t off = 0; rc == CBX_OK && off < sizeof data; off += 7)
        rc = io_gguf_writer_append(w, data + off, sizeof data - off < 7 ? sizeof data - off : 7, err);
    if (rc == CBX_OK) rc = io_gguf_writer_finish(w, err);
    size_t n1 = 0, n2 = 0;
    uint8_t *a = test_read_file(path, &n1), *b = test_read_file(ref, &n2);
    CHECK(rc == CBX_OK && a && b && n1 == n2 && memcmp(a, b, n1) == 0,
          "streamed in 7-byte pieces == one-shot write (%zu bytes): %s", n1, err);
    free(a);
    free(b);

    unlink(path);
    rc = io_gguf_writer_begin(w, path, err);
    if (rc == CBX_OK) rc = io_gguf_writer_append(w, data, 50, err);
    rc = rc == CBX_OK ? io_gguf_writer_finish(w, err) : rc;
    CHECK(rc == CBX_ERR_INVALID_ARG && strstr(err, "'q'") && !test_exists(path) && !test_exists(tmp),
          "incomplete stream refused, no file left: %s", err);
    rc = io_gguf_writer_begin(w, path, err);
    if (rc == CBX_OK) rc = io_gguf_writer_append(w, data, sizeof data, err);
    if (rc == CBX_OK) rc = io_gguf_writer_append(w, data, 1, err);
    CHECK(rc == CBX_ERR_INVALID_ARG && strstr(err, "past the last"), "append past the end refused: %s", err);
    CHECK(io_gguf_writer_set_u8(w, "x", 1, err) == CBX_ERR_INVALID_ARG, "metadata frozen while streaming");
    rc = io_gguf_writer_finish(w, err);
    CHECK(rc != CBX_OK && !test_exists(path) && !test_exists(tmp), "finish after a failed append leaves no file: %s", err);
    io_gguf_writer_free(w);

    io_gguf_writer_create(&w, err);
    io_gguf_writer_add_tensor(w, "f", TYPE_F32, 1, nf, NULL, err);
    rc = io_gguf_writer_write(w, path, err);
    CHECK(rc == CBX_ERR_INVALID_ARG && !test_exists(path), "one-shot write with NULL data refused: %s", err);
    snprintf(path, sizeof path, "%s/no/such/dir/x.gguf", dir);
    rc = io_gguf_writer_begin(w, path, err);
    CHECK(rc == CBX_ERR_IO, "unwritable path: %s", err);
    io_gguf_writer_free(w);

    struct io_gguf *g = NULL;
    rc = io_gguf_open("/nonexistent/x.gguf", &g, err);
    CHECK(rc == CBX_ERR_NOT_FOUND && !g, "missing file: %s", err);
}

/* ---- 6: allocation failures ------------------------------------------ */

static void test_alloc_failures(const char *dir)
{
#ifdef HAVE_ALLOC_HOOK
    static const char *const files[] = {"tensors.gguf", "kv.gguf"};
    char path[1024], err[ERR_MAX];
    for (int f = 0; f < 2; f++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[f]);
        size_t n = 0;
        uint8_t *b = test_read_file(path, &n);
        int bad = 0;
        long k = 0;
        for (; b && k < 100000; k++) {
            struct io_gguf *g = NULL;
            alloc_hook_arm(k);
            cbx_status rc = io_gguf_open_memory(b, n, &g, err);
            alloc_hook_disarm();
            if (rc == CBX_OK) io_gguf_close(g);
            if (alloc_hook_hit() ? rc != CBX_ERR_NOMEM || g : rc != CBX_OK) bad++;
            if (!alloc_hook_hit()) break;
        }
        printf("  alloc-failure run %s: %ld allocations, %d wrong\n", files[f], k, bad);
        CHECK(b && bad == 0 && k > 5, "%s: reader fails with CBX_ERR_NOMEM at each of %ld allocations (%d wrong)",
              files[f], k, bad);
        free(b);
    }
    /* writer: metadata, nested arrays, tensors */
    int bad = 0;
    long k = 0;
    for (; k < 100000; k++) {
        struct io_gguf_writer *w = NULL;
        int32_t r0[2] = {1, 2};
        const char *strs[2] = {"a", "bc"};
        struct io_gguf_value rows[1] = {{.type = GGUF_TYPE_ARRAY, .v.arr = {GGUF_TYPE_INT32, 2, r0}}};
        struct io_gguf_value nested = {.type = GGUF_TYPE_ARRAY, .v.arr = {GGUF_TYPE_ARRAY, 1, rows}};
        int64_t ne[1] = {2};
        alloc_hook_arm(k);
        cbx_status rc = io_gguf_writer_create(&w, err);
        if (rc == CBX_OK) rc = io_gguf_writer_set_str(w, "s", "x", err);
        if (rc == CBX_OK) rc = io_gguf_writer_set_arr(w, "a", GGUF_TYPE_STRING, strs, 2, err);
        if (rc == CBX_OK) rc = io_gguf_writer_set(w, "n", &nested, err);
        if (rc == CBX_OK) rc = io_gguf_writer_add_tensor(w, "t", TYPE_I32, 1, ne, r0, err);
        alloc_hook_disarm();
        io_gguf_writer_free(w);
        if (alloc_hook_hit() ? rc != CBX_ERR_NOMEM : rc != CBX_OK) bad++;
        if (!alloc_hook_hit()) break;
    }
    printf("  alloc-failure run writer: %ld allocations, %d wrong\n", k, bad);
    CHECK(bad == 0 && k > 5, "writer fails with CBX_ERR_NOMEM at each of %ld allocations (%d wrong)", k, bad);
#else
    (void)dir;
    printf("  allocation-failure run skipped (sanitizer build owns malloc)\n");
#endif
}

int main(void)
{
    const char *dir = test_tmpdir("gguf");
    test_handmade();
    test_defects();
    test_kv_roundtrip(dir);
    test_tensor_roundtrip(dir);
    test_layout(dir);
    test_streaming(dir);
    test_alloc_failures(dir);
    return test_summary();
}
