/* test_safetensors.c - safetensors reader and writer.
 * Round trip of every dtype and shape kind, the writer's exact byte layout
 * against a header written by hand from the oracle's json.dumps format, a
 * hand-made file in the Python package's layout (metadata first, unpadded
 * header -> misaligned data that must be copied), streaming-writer misuse,
 * 2500-tensor lookup, and a list of malformed headers, each refused with
 * CBX_ERR_FORMAT and a message naming the problem. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/safetensors.h"
#include "alloc_hook.h"
#include "testutil.h"


/* A file image: 8-byte LE length of header, header, data_len bytes of a
 * counting pattern. Caller frees. */
static uint8_t *mk(const char *header, size_t data_len, size_t *n)
{
    size_t hl = strlen(header);
    *n = 8 + hl + data_len;
    uint8_t *b = malloc(*n + 1);
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)((uint64_t)hl >> (8 * i));
    memcpy(b + 8, header, hl);
    for (size_t i = 0; i < data_len; i++) b[8 + hl + i] = (uint8_t)(i * 7 + 1);
    return b;
}

static void test_roundtrip(const char *dir)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/all.safetensors", dir);
    /* every dtype; scalar, zero-size, 1-4 dims */
    static const struct { enum dtype t; int ndim; int64_t ne[4]; const char *name; } spec[] = {
        {TYPE_F64, 2, {3, 5}, "a.f64"},      {TYPE_F32, 3, {2, 3, 7}, "b.f32"},
        {TYPE_F16, 1, {9}, "c.f16"},         {TYPE_BF16, 4, {1, 2, 3, 2}, "d.bf16"},
        {TYPE_I64, 0, {0}, "num_batches_tracked"}, {TYPE_I32, 1, {5}, "e.i32"},
        {TYPE_I16, 1, {3}, "f.i16"},         {TYPE_I8, 2, {3, 3}, "g.i8"},
        {TYPE_U8, 1, {11}, "h.u8"},          {TYPE_BOOL, 1, {4}, "i.bool"},
        {TYPE_F32, 2, {0, 4}, "j.empty"},    {TYPE_F32, 1, {1}, "k.one"},
    };
    enum { N = sizeof spec / sizeof spec[0] };
    struct tensor t[N];
    const struct tensor *tp[N];
    void *data[N];
    for (int i = 0; i < N; i++) {
        t[i] = tensor_make(spec[i].t, spec[i].ndim, spec[i].ne, NULL, NULL);
        size_t nb = tensor_nbytes(&t[i]);
        data[i] = malloc(nb + 1);
        for (size_t k = 0; k < nb; k++) ((uint8_t *)data[i])[k] = (uint8_t)(k * 31 + (size_t)i);
        if (spec[i].t == TYPE_BOOL)
            for (size_t k = 0; k < nb; k++) ((uint8_t *)data[i])[k] &= 1;
        t[i].data = data[i];
        t[i].name = spec[i].name;
        tp[i] = &t[i];
    }
    char err[ERR_MAX] = "";
    cbx_status rc = io_safetensors_write(path, N, tp, 0, NULL, err);
    CHECK(rc == CBX_OK, "write all dtypes: %s", err);

    struct io_safetensors *st = NULL;
    rc = io_safetensors_open(path, &st, err);
    CHECK(rc == CBX_OK && st, "open written file: %s", err);
    if (!st) goto cleanup;
    CHECK(io_safetensors_count(st) == N, "count %d == %d", io_safetensors_count(st), N);
    int bad = 0;
    for (int i = 0; i < N; i++) {
        const struct tensor *r = io_safetensors_tensor(st, i);
        const struct tensor *f = io_safetensors_find(st, spec[i].name);
        size_t nb = tensor_nbytes(&t[i]);
        if (!r || r != f || strcmp(r->name, spec[i].name) != 0 || r->type != spec[i].t ||
            !tensor_same_shape(r, &t[i]) || !tensor_is_contiguous(r) || r->be != NULL ||
            (nb && memcmp(r->data, data[i], nb) != 0) ||
            (uintptr_t)r->data % dtype_traits(r->type)->size != 0) {
            bad++;
            printf("  mismatch in tensor %d '%s'\n", i, spec[i].name);
        }
    }
    CHECK(bad == 0, "round trip of %d tensors (name, order, type, shape, bytes, alignment): %d bad", N, bad);
    const char *fmt = io_safetensors_metadata(st, "format");
    CHECK(fmt && strcmp(fmt, "pt") == 0, "default metadata format = '%s'", fmt ? fmt : "(null)");
    CHECK(io_safetensors_metadata_count(st) == 1, "one metadata entry");
    CHECK(io_safetensors_find(st, "missing") == NULL, "find of a missing name is NULL");
    CHECK(io_safetensors_tensor(st, N) == NULL && io_safetensors_tensor(st, -1) == NULL,
          "tensor index out of range is NULL");
    const struct tensor *s = io_safetensors_find(st, "num_batches_tracked");
    CHECK(s && s->ndim == 0 && tensor_nelements(s) == 1, "scalar I64 shape []");
cleanup:
    io_safetensors_close(st);
    for (int i = 0; i < N; i++) free(data[i]);
}

/* The writer's bytes against the layout of the oracle's writer
 * (json.dumps(header, separators=(",", ":")), tensors in order then
 * __metadata__, space padding to 8), written out by hand here. */
static void test_layout(const char *dir)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/layout.safetensors", dir);
    struct io_st_entry e[3] = {
        {"w", TYPE_F32, 2, {2, 1}},
        {"caf\xc3\xa9.\xf0\x9f\x98\x80\"q\\\n", TYPE_I64, 0, {0}},
        {"b", TYPE_F16, 1, {3}},
    };
    struct io_safetensors_writer *w = NULL;
    char err[ERR_MAX] = "";
    cbx_status rc = io_safetensors_writer_open(path, 3, e, 0, NULL, &w, err);
    CHECK(rc == CBX_OK, "writer_open: %s", err);
    if (rc != CBX_OK) return;
    uint8_t payload[8 + 8 + 6];
    for (size_t i = 0; i < sizeof payload; i++) payload[i] = (uint8_t)(200 - i);
    /* odd split of the stream */
    rc = io_safetensors_writer_write(w, payload, 5, err);
    if (rc == CBX_OK) rc = io_safetensors_writer_write(w, payload + 5, 0, err);
    if (rc == CBX_OK) rc = io_safetensors_writer_write(w, payload + 5, sizeof payload - 5, err);
    CHECK(rc == CBX_OK && io_safetensors_writer_remaining(w) == 0, "streamed writes: %s", err);
    rc = io_safetensors_writer_close(w, err);
    CHECK(rc == CBX_OK, "writer_close: %s", err);

    const char *json =
        "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,1],\"data_offsets\":[0,8]},"
        "\"caf\\u00e9.\\ud83d\\ude00\\\"q\\\\\\n\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[8,16]},"
        "\"b\":{\"dtype\":\"F16\",\"shape\":[3],\"data_offsets\":[16,22]},"
        "\"__metadata__\":{\"format\":\"pt\"}}";
    size_t jl = strlen(json), hl = (jl + 7) / 8 * 8;
    size_t n = 0;
    uint8_t *got = test_read_file(path, &n);
    bool ok = got && n == 8 + hl + sizeof payload;
    uint64_t len = 0;
    for (int i = 7; ok && i >= 0; i--) len = (len << 8) | got[i];
    ok = ok && len == hl && memcmp(got + 8, json, jl) == 0;
    for (size_t i = jl; ok && i < hl; i++) ok = got[8 + i] == ' ';
    ok = ok && memcmp(got + 8 + hl, payload, sizeof payload) == 0;
    CHECK(ok, "byte layout equals the hand-written oracle layout (%zu bytes, header %zu)", n, hl);
    if (!ok && got && n > 8) printf("  got header: %.*s\n", (int)(n - 8 < 400 ? n - 8 : 400), got + 8);

    struct io_safetensors *st = NULL;
    rc = io_safetensors_open(path, &st, err);
    CHECK(rc == CBX_OK, "reopen layout file: %s", err);
    if (st) {
        const struct tensor *t = io_safetensors_find(st, e[1].name);
        CHECK(t && t->type == TYPE_I64 && t->ndim == 0 && memcmp(t->data, payload + 8, 8) == 0,
              "escaped UTF-8 name found after round trip");
    }
    io_safetensors_close(st);
    free(got);

    /* custom metadata replaces the default */
    struct io_st_kv kv[2] = {{"format", "np"}, {"note", "\xc3\xa9t\xc3\xa9"}};
    rc = io_safetensors_writer_open(path, 0, NULL, 2, kv, &w, err);
    if (rc == CBX_OK) rc = io_safetensors_writer_close(w, err);
    st = NULL;
    if (rc == CBX_OK) rc = io_safetensors_open(path, &st, err);
    CHECK(rc == CBX_OK && st && io_safetensors_count(st) == 0 && io_safetensors_metadata_count(st) == 2 &&
              strcmp(io_safetensors_metadata(st, "note"), "\xc3\xa9t\xc3\xa9") == 0 &&
              strcmp(io_safetensors_metadata(st, "format"), "np") == 0,
          "custom metadata, no tensors: %s", err);
    io_safetensors_close(st);
}

/* A file as the Python package lays it out (metadata first, no padding:
 * header of odd length), so F32 data lands misaligned and must be copied. */
static void test_python_layout(void)
{
    const char *h = "{\"__metadata__\":{\"format\":\"pt\"},\"x\":{\"dtype\":\"F32\",\"shape\":[2,2],"
                    "\"data_offsets\":[0,16]},\"y\":{\"dtype\":\"BF16\",\"shape\":[1],\"data_offsets\":[16,18]}}";
    size_t hl = strlen(h), n = 8 + hl + 18;
    /* offset the image by 1 byte so the data is misaligned whatever hl is */
    uint8_t *raw = malloc(n + 8);
    uint8_t *b = raw + ((hl % 4) == 3 ? 0 : 1);
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)((uint64_t)hl >> (8 * i));
    memcpy(b + 8, h, hl);
    const float want[4] = {1.5f, -2.0f, 0.25f, 1e-3f};
    memcpy(b + 8 + hl, want, 16);
    uint16_t one = 0x3f80; /* bf16 1.0 */
    memcpy(b + 8 + hl + 16, &one, 2);
    CHECK((uintptr_t)(b + 8 + hl) % 4 != 0, "test image has misaligned F32 data");
    struct io_safetensors *st = NULL;
    char err[ERR_MAX] = "";
    cbx_status rc = io_safetensors_open_memory(b, n, &st, err);
    CHECK(rc == CBX_OK, "open Python-layout image: %s", err);
    if (st) {
        const struct tensor *x = io_safetensors_find(st, "x"), *y = io_safetensors_find(st, "y");
        CHECK(x && (uintptr_t)x->data % 4 == 0, "misaligned F32 tensor copied to an aligned buffer");
        if (x) check_close("python-layout F32 values", x->data, want, 4, 0, 0);
        CHECK(y && bf16_to_f32(*(const uint16_t *)y->data) == 1.0f, "BF16 value 1.0");
        CHECK(strcmp(io_safetensors_tensor(st, 0)->name, "x") == 0, "order: x first after __metadata__");
    }
    io_safetensors_close(st);
    free(raw);
}

static void test_writer_misuse(const char *dir)
{
    char path[1024], tmp[1100];
    snprintf(path, sizeof path, "%s/partial.safetensors", dir);
    struct io_st_entry e[2] = {{"a", TYPE_F32, 1, {4}}, {"b", TYPE_I8, 1, {3}}};
    struct io_safetensors_writer *w = NULL;
    char err[ERR_MAX] = "";
    uint8_t zeros[64] = {0};

    cbx_status rc = io_safetensors_writer_open(path, 2, e, 0, NULL, &w, err);
    if (rc == CBX_OK) rc = io_safetensors_writer_write(w, zeros, 10, err);
    rc = rc == CBX_OK ? io_safetensors_writer_close(w, err) : rc;
    printf("  short data: %s\n", err);
    CHECK(rc == CBX_ERR_INVALID_ARG && strstr(err, "missing"), "too little data refused at close");
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    CHECK(!test_exists(path) && !test_exists(tmp), "no target and no temp file after a failed close");

    rc = io_safetensors_writer_open(path, 2, e, 0, NULL, &w, err);
    if (rc == CBX_OK) rc = io_safetensors_writer_write(w, zeros, 20, err);
    printf("  long data: %s\n", err);
    CHECK(rc == CBX_ERR_INVALID_ARG, "too much data refused at write");
    rc = io_safetensors_writer_close(w, err);
    CHECK(rc != CBX_OK && !test_exists(path), "close after a failed write fails and leaves no file");

    struct io_st_entry dup[2] = {{"a", TYPE_F32, 1, {4}}, {"a", TYPE_F32, 1, {4}}};
    rc = io_safetensors_writer_open(path, 2, dup, 0, NULL, &w, err);
    CHECK(rc == CBX_ERR_INVALID_ARG && !w, "duplicate names refused: %s", err);
    struct io_st_entry q[1] = {{"q", TYPE_Q8_0, 1, {32}}};
    rc = io_safetensors_writer_open(path, 1, q, 0, NULL, &w, err);
    CHECK(rc == CBX_ERR_INVALID_ARG, "Q8_0 refused: %s", err);
    struct io_st_entry bad[1] = {{"\xff", TYPE_F32, 1, {1}}};
    rc = io_safetensors_writer_open(path, 1, bad, 0, NULL, &w, err);
    CHECK(rc == CBX_ERR_INVALID_ARG, "invalid UTF-8 name refused: %s", err);
    struct io_st_entry neg[1] = {{"n", TYPE_F32, 1, {-1}}};
    rc = io_safetensors_writer_open(path, 1, neg, 0, NULL, &w, err);
    CHECK(rc == CBX_ERR_INVALID_ARG, "negative dim refused: %s", err);
    CHECK(!test_exists(path), "no file left behind");

    snprintf(path, sizeof path, "%s/no/such/dir/x.safetensors", dir);
    rc = io_safetensors_writer_open(path, 1, e, 0, NULL, &w, err);
    CHECK(rc == CBX_ERR_IO, "unwritable path: %s", err);
}

static void test_many(const char *dir)
{
    enum { N = 2500 };
    char path[1024];
    snprintf(path, sizeof path, "%s/many.safetensors", dir);
    struct io_st_entry *e = calloc(N, sizeof *e);
    char (*names)[48] = calloc(N, 48);
    for (int i = 0; i < N; i++) {
        snprintf(names[i], 48, "tfmr.layers.%d.self_attn.q_proj.weight", i);
        e[i] = (struct io_st_entry){names[i], TYPE_F32, 1, {(i % 5) + 1}};
    }
    struct io_safetensors_writer *w = NULL;
    char err[ERR_MAX] = "";
    cbx_status rc = io_safetensors_writer_open(path, N, e, 0, NULL, &w, err);
    for (int i = 0; rc == CBX_OK && i < N; i++) {
        float v[5] = {(float)i, (float)i, (float)i, (float)i, (float)i};
        rc = io_safetensors_writer_write(w, v, (size_t)((i % 5) + 1) * 4, err);
    }
    if (rc == CBX_OK) rc = io_safetensors_writer_close(w, err);
    else io_safetensors_writer_abort(w);
    CHECK(rc == CBX_OK, "write %d tensors: %s", N, err);
    struct io_safetensors *st = NULL;
    rc = io_safetensors_open(path, &st, err);
    CHECK(rc == CBX_OK, "open %d tensors: %s", N, err);
    int bad = 0;
    for (int i = 0; st && i < N; i++) {
        const struct tensor *t = io_safetensors_find(st, names[i]);
        if (!t || t != io_safetensors_tensor(st, i) || ((const float *)t->data)[t->ne[0] - 1] != (float)i) bad++;
    }
    CHECK(st && bad == 0, "find each of %d names by hash: %d wrong", N, bad);
    io_safetensors_close(st);
    free(e);
    free(names);
}

struct bad_case {
    const char *what;
    const char *header;  /* NULL: use raw below */
    size_t data_len;
    const char *expect;  /* substring of the message */
};

static void test_bad_inputs(const char *dir)
{
    static const struct bad_case cases[] = {
        {"not JSON", "{\"a\":{\"dtype\":\"F32\",", 0, "not valid JSON"},
        {"JSON array", "[1,2]   ", 0, "not an object"},
        {"trailing garbage", "{} x", 0, "trailing"},
        {"unknown dtype", "{\"a\":{\"dtype\":\"F8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, "F8"},
        {"dtype not a string", "{\"a\":{\"dtype\":4,\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "dtype"},
        {"five dims", "{\"a\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1],\"data_offsets\":[0,1]}}", 1, "5 dimensions"},
        {"negative dim", "{\"a\":{\"dtype\":\"U8\",\"shape\":[-1],\"data_offsets\":[0,1]}}", 1, "shape[0]"},
        {"fractional dim", "{\"a\":{\"dtype\":\"U8\",\"shape\":[1.5],\"data_offsets\":[0,1]}}", 1, "shape[0]"},
        {"shape not array", "{\"a\":{\"dtype\":\"U8\",\"shape\":3,\"data_offsets\":[0,3]}}", 3, "shape"},
        {"end beyond data", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 7, "outside"},
        {"begin > end", "{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,4]}}", 8, "outside"},
        {"size mismatch", "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 16, "needs 12 bytes"},
        {"huge shape", "{\"a\":{\"dtype\":\"F64\",\"shape\":[4294967296,4294967296,4294967296],\"data_offsets\":[0,8]}}",
         8, "more than 2^63"},
        {"overlap",
         "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
         12, "overlap"},
        {"unknown key", "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1],\"x\":1}}", 1, "unknown key"},
        {"missing data_offsets", "{\"a\":{\"dtype\":\"U8\",\"shape\":[1]}}", 1, "missing 'data_offsets'"},
        {"offsets of 3", "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1,2]}}", 1, "data_offsets"},
        {"duplicate name",
         "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
         "\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}",
         2, "appears twice"},
        {"entry not object", "{\"a\":[1]}", 0, "not a JSON object"},
        {"metadata value not string", "{\"__metadata__\":{\"format\":1}}", 0, "not a string"},
        {"metadata not object", "{\"__metadata__\":[]}", 0, "__metadata__ is not"},
        {"offset not integer", "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,\"1\"]}}", 1,
         "data_offsets"},
    };
    char err[ERR_MAX];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t n;
        uint8_t *b = mk(cases[i].header, cases[i].data_len, &n);
        struct io_safetensors *st = (void *)1;
        err[0] = 0;
        cbx_status rc = io_safetensors_open_memory(b, n, &st, err);
        bool ok = rc == CBX_ERR_FORMAT && st == NULL && strstr(err, cases[i].expect);
        printf("  %-26s: %s\n", cases[i].what, err);
        CHECK(ok, "%-26s refused: %s", cases[i].what, err);
        if (rc == CBX_OK) io_safetensors_close(st);
        free(b);
    }

    /* header-length problems (raw images) */
    uint8_t img[32] = {0};
    struct io_safetensors *st = NULL;
    cbx_status rc = io_safetensors_open_memory(img, 5, &st, err);
    CHECK(rc == CBX_ERR_FORMAT && strstr(err, "too short"), "5-byte file refused: %s", err);
    img[0] = 100; /* header of 100 bytes in a 32-byte file */
    rc = io_safetensors_open_memory(img, sizeof img, &st, err);
    CHECK(rc == CBX_ERR_FORMAT && strstr(err, "exceeds"), "header length beyond file refused: %s", err);
    memset(img, 0xff, 8);
    rc = io_safetensors_open_memory(img, sizeof img, &st, err);
    CHECK(rc == CBX_ERR_FORMAT && strstr(err, "exceeds"), "header length 2^64-1 refused: %s", err);
    size_t n;
    uint8_t *b = mk("{\"a\":1}", 0, &n);
    b[8 + 2] = 0; /* NUL inside the header */
    rc = io_safetensors_open_memory(b, n, &st, err);
    CHECK(rc == CBX_ERR_FORMAT && strstr(err, "NUL"), "NUL in header refused: %s", err);
    free(b);

    /* through a real file: truncated copy of a valid one */
    char path[1024];
    snprintf(path, sizeof path, "%s/trunc.safetensors", dir);
    b = mk("{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 16, &n);
    FILE *f = fopen(path, "wb");
    fwrite(b, 1, n - 1, f);
    fclose(f);
    rc = io_safetensors_open(path, &st, err);
    CHECK(rc == CBX_ERR_FORMAT && strstr(err, path) && strstr(err, "outside"),
          "truncated file refused, message names path: %s", err);
    /* every truncation of a valid image must fail cleanly (never crash) */
    int accepted = 0;
    for (size_t k = 0; k < n; k++) {
        rc = io_safetensors_open_memory(b, k, &st, err);
        if (rc == CBX_OK) { accepted++; io_safetensors_close(st); }
    }
    CHECK(accepted == 0, "all %zu truncations refused (%d accepted)", n, accepted);
    free(b);
    rc = io_safetensors_open("/nonexistent/x.safetensors", &st, err);
    CHECK(rc == CBX_ERR_NOT_FOUND && st == NULL, "missing file: %s", err);
}

/* An allocation failure inside cJSON reads as invalid JSON (cJSON does not
 * tell the two apart); every other one must be CBX_ERR_NOMEM. */
static void test_alloc_failures(const char *dir)
{
#ifdef HAVE_ALLOC_HOOK
    char path[1024], err[ERR_MAX];
    snprintf(path, sizeof path, "%s/all.safetensors", dir);
    size_t n = 0;
    uint8_t *b = test_read_file(path, &n);
    int bad = 0, json = 0;
    long k = 0;
    for (; b && k < 100000; k++) {
        struct io_safetensors *st = NULL;
        alloc_hook_arm(k);
        cbx_status rc = io_safetensors_open_memory(b, n, &st, err);
        alloc_hook_disarm();
        if (rc == CBX_OK) io_safetensors_close(st);
        if (alloc_hook_hit() && rc == CBX_ERR_FORMAT && strstr(err, "not valid JSON")) json++;
        else if (alloc_hook_hit() ? rc != CBX_ERR_NOMEM || st : rc != CBX_OK) bad++;
        if (!alloc_hook_hit()) break;
    }
    printf("  alloc-failure run: %ld allocations, %d inside cJSON, %d wrong\n", k, json, bad);
    CHECK(b && bad == 0 && k > 5,
          "reader fails cleanly at each of %ld allocations (%d inside cJSON, %d wrong)", k, json, bad);
    free(b);
#else
    (void)dir;
    printf("  allocation-failure run skipped (sanitizer build owns malloc)\n");
#endif
}

int main(void)
{
    const char *dir = test_tmpdir("safetensors");
    test_roundtrip(dir);
    test_layout(dir);
    test_python_layout();
    test_writer_misuse(dir);
    test_many(dir);
    test_bad_inputs(dir);
    test_alloc_failures(dir);
    return test_summary();
}
