/* test_torch_pt.c - io/torch_pt: the real conds.pt samples (torch 1.13
 * layout), a torch 2.x layout variant (renamed directory, byteorder,
 * serialization_id, a deflated entry), write -> read round trips (tree and
 * streaming), hand-written pickles for strided/offset/shared storages, and
 * refusal of malicious or malformed pickles with their messages.
 *
 * Hand-written pickles and archives here are built with libzip and raw
 * opcode bytes (Lib/pickletools.py names), independently of the code
 * under test. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zip.h>

#include "io/torch_pt.h"
#include "torch_pt_write.h"
#include "testutil.h"

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static const char *tmp;

static const char *tmp_path(const char *name) { return test_path(tmp, name); }

/* ---------------------------------------------------------------- samples */

static void check_tensor(const struct pt_value *root, const char *path, enum dtype type,
                         int ndim, int64_t n0, int64_t n1, int64_t n2)
{
    const struct pt_tensor *t = pt_as_tensor(pt_get_path(root, path));
    int64_t want[3] = {n0, n1, n2};
    bool ok = t && t->type == type && t->ndim == ndim && t->data && t->owned;
    for (int i = 0; ok && i < ndim; i++) ok = t->ne[i] == want[i];
    CHECK(ok, "%s: %s ndim %d [%lld, %lld, %lld] (got %s ndim %d)", path, dtype_name(type), ndim,
          (long long)n0, (long long)n1, (long long)n2, t ? dtype_name(t->type) : "none", t ? t->ndim : -1);
}

struct names { char s[16][64]; int n; };

static int collect_names(void *user, const char *name, const struct pt_value *v)
{
    struct names *nm = user;
    (void)v;
    if (nm->n < 16) snprintf(nm->s[nm->n], sizeof nm->s[0], "%s", name);
    nm->n++;
    return 0;
}

/* Values below were read from the files with Python's zipfile + struct
 * (conds/data/<k> as little-endian f32/i64), not with this reader:
 * speaker_emb[0] = 0xbc25ab0d, speaker_emb[255] = 0x3d83485a,
 * cond_prompt_speech_tokens[0..2] = 6015 5559 424 (last: 2610 turbo, 3784
 * mtl-v2), prompt_token[0], [249] = 5805, 5831, prompt_feat[0,0,0] =
 * 0xc102c9a2, prompt_feat[0,1,3] = 0xc09fe610, prompt_feat[0,499,79] =
 * 0xc1033f9f, embedding[191] = 0xbf41a772. */
static void check_conds(const struct pt_value *root, int64_t P, int64_t last_tok, const char *what)
{
    CHECK(root && root->kind == PT_DICT && !root->u.dict.ordered && pt_len(root) == 2 &&
          strcmp(pt_dict_key(root, 0), "t3") == 0 && strcmp(pt_dict_key(root, 1), "gen") == 0,
          "%s: root is a plain dict {t3, gen}", what);
    const struct pt_value *t3 = pt_dict_get(root, "t3"), *gen = pt_dict_get(root, "gen");
    static const char *t3k[] = {"speaker_emb", "clap_emb", "cond_prompt_speech_tokens",
                                "cond_prompt_speech_emb", "emotion_adv"};
    static const char *genk[] = {"prompt_token", "prompt_token_len", "prompt_feat",
                                 "prompt_feat_len", "embedding"};
    bool order = pt_len(t3) == 5 && pt_len(gen) == 5;
    for (size_t i = 0; order && i < 5; i++)
        order = strcmp(pt_dict_key(t3, i), t3k[i]) == 0 && strcmp(pt_dict_key(gen, i), genk[i]) == 0;
    CHECK(order, "%s: t3 and gen keys in file order", what);
    check_tensor(root, "t3.speaker_emb", TYPE_F32, 2, 1, 256, 0);
    check_tensor(root, "t3.cond_prompt_speech_tokens", TYPE_I64, 2, 1, P, 0);
    check_tensor(root, "t3.emotion_adv", TYPE_F32, 3, 1, 1, 1);
    check_tensor(root, "gen.prompt_token", TYPE_I64, 2, 1, 250, 0);
    check_tensor(root, "gen.prompt_token_len", TYPE_I64, 1, 1, 0, 0);
    check_tensor(root, "gen.prompt_feat", TYPE_F32, 3, 1, 500, 80);
    check_tensor(root, "gen.embedding", TYPE_F32, 2, 1, 192, 0);
    const struct pt_value *none1 = pt_get_path(root, "t3.clap_emb"),
                          *none2 = pt_get_path(root, "gen.prompt_feat_len");
    CHECK(none1 && none1->kind == PT_NONE && none2 && none2->kind == PT_NONE,
          "%s: clap_emb and prompt_feat_len are None", what);
    CHECK(!pt_get_path(root, "t3.nope") && !pt_get_path(root, "t3.speaker_emb.x"),
          "%s: absent paths give NULL", what);

    const struct pt_tensor *t;
    if ((t = pt_as_tensor(pt_get_path(root, "t3.speaker_emb"))))
        CHECK(f32_bits(((float *)t->data)[0]) == 0xbc25ab0du && f32_bits(((float *)t->data)[255]) == 0x3d83485au,
              "%s: speaker_emb[0], [255] bits %08x %08x (want bc25ab0d 3d83485a)", what,
              f32_bits(((float *)t->data)[0]), f32_bits(((float *)t->data)[255]));
    if ((t = pt_as_tensor(pt_get_path(root, "t3.cond_prompt_speech_tokens")))) {
        const int64_t *d = t->data;
        CHECK(d[0] == 6015 && d[1] == 5559 && d[2] == 424 && d[P - 1] == last_tok,
              "%s: speech tokens %lld %lld %lld .. %lld (want 6015 5559 424 .. %lld)", what,
              (long long)d[0], (long long)d[1], (long long)d[2], (long long)d[P - 1], (long long)last_tok);
    }
    if ((t = pt_as_tensor(pt_get_path(root, "t3.emotion_adv"))))
        CHECK(((float *)t->data)[0] == 0.5f, "%s: emotion_adv = %g (want 0.5)", what, ((float *)t->data)[0]);
    if ((t = pt_as_tensor(pt_get_path(root, "gen.prompt_token")))) {
        const int64_t *d = t->data;
        CHECK(d[0] == 5805 && d[249] == 5831, "%s: prompt_token[0], [249] = %lld %lld (want 5805 5831)",
              what, (long long)d[0], (long long)d[249]);
    }
    if ((t = pt_as_tensor(pt_get_path(root, "gen.prompt_token_len"))))
        CHECK(((int64_t *)t->data)[0] == 250, "%s: prompt_token_len = %lld (want 250)", what,
              (long long)((int64_t *)t->data)[0]);
    if ((t = pt_as_tensor(pt_get_path(root, "gen.prompt_feat")))) {
        const float *d = t->data;
        CHECK(f32_bits(d[0]) == 0xc102c9a2u && f32_bits(d[83]) == 0xc09fe610u &&
              f32_bits(d[39999]) == 0xc1033f9fu,
              "%s: prompt_feat [0,0,0] [0,1,3] [0,499,79] bits %08x %08x %08x", what,
              f32_bits(d[0]), f32_bits(d[83]), f32_bits(d[39999]));
        struct tensor v = pt_tensor_view(t);
        CHECK(v.ndim == 3 && v.ne[2] == 80 && v.nb[1] == 320 && v.data == t->data,
              "%s: pt_tensor_view gives a contiguous descriptor", what);
    }
    if ((t = pt_as_tensor(pt_get_path(root, "gen.embedding"))))
        CHECK(f32_bits(((float *)t->data)[191]) == 0xbf41a772u, "%s: embedding[191] bits %08x",
              what, f32_bits(((float *)t->data)[191]));
    struct names nm = {.n = 0};
    pt_foreach_tensor(root, collect_names, &nm);
    CHECK(nm.n == 7 && strcmp(nm.s[0], "t3.speaker_emb") == 0 &&
          strcmp(nm.s[2], "t3.emotion_adv") == 0 && strcmp(nm.s[6], "gen.embedding") == 0,
          "%s: pt_foreach_tensor visits 7 tensors in order (got %d, first '%s')", what, nm.n, nm.s[0]);
}

static void test_samples(void)
{
    char err[ERR_MAX] = "";
    struct pt_value *v = NULL;
    cbx_status rc = io_pt_read(test_data("turbo/conds.pt"), &v, err);
    CHECK(rc == CBX_OK, "read turbo/conds.pt: %s", rc ? err : "ok");
    if (v) check_conds(v, 375, 2610, "turbo");
    pt_value_free(v);
    v = NULL;
    rc = io_pt_read(test_data("mtl-v2/conds.pt"), &v, err);
    CHECK(rc == CBX_OK, "read mtl-v2/conds.pt: %s", rc ? err : "ok");
    if (v) check_conds(v, 150, 3784, "mtl-v2");
    pt_value_free(v);

    v = NULL;
    rc = io_pt_read(tmp_path("absent.pt"), &v, err);
    CHECK(rc == CBX_ERR_IO && !v && strstr(err, "absent.pt"), "missing file: IO error '%s'", err);
}

/* A torch 2.x variant of the sample: every entry moved to "archive/",
 * byteorder and .data/serialization_id added, prompt_feat deflated. */
static void test_torch2_layout(void)
{
    const char *path = tmp_path("torch2.pt");
    char err[ERR_MAX] = "";
    char cmd[9000];
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", test_data("turbo/conds.pt"), path);
    CHECK(system(cmd) == 0, "copy sample");
    int ze;
    zip_t *za = zip_open(path, 0, &ze);
    CHECK(za != NULL, "libzip opens the copy");
    if (!za) return;
    zip_int64_t n = zip_get_num_entries(za, 0);
    for (zip_int64_t i = 0; i < n; i++) {
        char nn[256];
        snprintf(nn, sizeof nn, "archive/%s", zip_get_name(za, (zip_uint64_t)i, 0) + strlen("conds/"));
        zip_file_rename(za, (zip_uint64_t)i, nn, 0);
    }
    zip_int64_t feat = zip_name_locate(za, "archive/data/5", 0);
    zip_set_file_compression(za, (zip_uint64_t)feat, ZIP_CM_DEFLATE, 9);
    zip_source_t *s1 = zip_source_buffer(za, "little", 6, 0);
    zip_file_add(za, "archive/byteorder", s1, 0);
    zip_source_t *s2 = zip_source_buffer(za, "1234567890", 10, 0);
    zip_file_add(za, "archive/.data/serialization_id", s2, 0);
    CHECK(zip_close(za) == 0, "libzip writes the torch 2.x variant");

    struct pt_value *v = NULL;
    cbx_status rc = io_pt_read(path, &v, err);
    CHECK(rc == CBX_OK, "read torch 2.x layout (archive/, byteorder, deflated entry): %s", rc ? err : "ok");
    if (v) check_conds(v, 375, 2610, "torch2");
    pt_value_free(v);

    /* byteorder "big" is refused */
    za = zip_open(path, 0, &ze);
    if (!za) return;
    zip_source_t *s3 = zip_source_buffer(za, "big", 3, 0);
    zip_file_add(za, "archive/byteorder", s3, ZIP_FL_OVERWRITE);
    zip_close(za);
    v = NULL;
    rc = io_pt_read(path, &v, err);
    CHECK(rc != CBX_OK && !v && strstr(err, "byteorder"), "byteorder 'big' refused: '%s'", err);
}

/* --------------------------------------------------------------- round trip */

static bool same(const struct pt_value *a, const struct pt_value *b, const char *path)
{
    if (a->kind != b->kind) {
        printf("  mismatch at %s: kind %d vs %d\n", path, a->kind, b->kind);
        return false;
    }
    char sub[512];
    switch (a->kind) {
    case PT_NONE: return true;
    case PT_BOOL: return a->u.b == b->u.b;
    case PT_INT: return a->u.i == b->u.i;
    case PT_FLOAT: return memcmp(&a->u.f, &b->u.f, 8) == 0;
    case PT_STR: return a->u.str.len == b->u.str.len && memcmp(a->u.str.s, b->u.str.s, a->u.str.len) == 0;
    case PT_TENSOR: {
        const struct pt_tensor *x = &a->u.t, *y = &b->u.t;
        if (x->type != y->type || x->ndim != y->ndim || x->nbytes != y->nbytes) return false;
        for (int i = 0; i < x->ndim; i++)
            if (x->ne[i] != y->ne[i]) return false;
        return x->nbytes == 0 || memcmp(x->data, y->data, x->nbytes) == 0;
    }
    case PT_LIST: case PT_TUPLE:
        if (a->u.seq.n != b->u.seq.n) return false;
        for (size_t i = 0; i < a->u.seq.n; i++) {
            snprintf(sub, sizeof sub, "%s.%zu", path, i);
            if (!same(a->u.seq.v[i], b->u.seq.v[i], sub)) return false;
        }
        return true;
    case PT_DICT:
        if (a->u.dict.n != b->u.dict.n || a->u.dict.ordered != b->u.dict.ordered) return false;
        for (size_t i = 0; i < a->u.dict.n; i++) {
            snprintf(sub, sizeof sub, "%s.%s", path, a->u.dict.k[i]);
            if (strcmp(a->u.dict.k[i], b->u.dict.k[i]) != 0 || !same(a->u.dict.v[i], b->u.dict.v[i], sub)) {
                printf("  mismatch at %s\n", sub);
                return false;
            }
        }
        return true;
    default: return false;
    }
}

/* Every local header's data starts on a 64-byte boundary; the entries are
 * stored. Parsed by hand from the zip bytes. */
static bool aligned_stored(const char *path, int *nent)
{
    FILE *f = fopen(path, "rb");
    if (!f) return false;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc((size_t)n);
    bool ok = b && fread(b, 1, (size_t)n, f) == (size_t)n;
    fclose(f);
    size_t off = 0;
    *nent = 0;
    while (ok && off + 30 <= (size_t)n && memcmp(b + off, "PK\3\4", 4) == 0) {
        unsigned method = b[off + 8] | b[off + 9] << 8;
        size_t size = b[off + 22] | b[off + 23] << 8 | (size_t)b[off + 24] << 16 | (size_t)b[off + 25] << 24;
        size_t nl = b[off + 26] | b[off + 27] << 8, el = b[off + 28] | b[off + 29] << 8;
        size_t data = off + 30 + nl + el;
        if (method != 0 || data % 64 != 0) ok = false;
        off = data + size;
        (*nent)++;
    }
    free(b);
    return ok && *nent > 0;
}

static void test_roundtrip(void)
{
    char err[ERR_MAX] = "";
    struct pt_value *root = pt_dict_new(false), *sd = pt_dict_new(true), *lst = pt_list_new(),
                    *tup = pt_tuple_new(), *t1 = pt_tuple_new(), *t5 = pt_tuple_new(),
                    *empty_t = pt_tuple_new();
    float f32[6];
    fill_uniform(f32, 6, -2, 2, 1);
    double f64[3] = {1.0 / 3, -1e300, 5e-324};
    uint16_t h16[5] = {0x3c00, 0xc000, 0x7bff, 0x0001, 0x8000};
    uint16_t bf[8] = {0x3f80, 0xbf80, 0x7f7f, 0x0001, 0x4049, 0xc2f7, 0x0000, 0x8000};
    int64_t i64[3] = {-9223372036854775807LL - 1, 0, 9223372036854775807LL};
    int32_t i32[2] = {-7, 2147483647};
    int16_t i16[2] = {-32768, 12};
    int8_t i8[3] = {-128, 0, 127};
    uint8_t u8[2] = {0, 255}, b1[3] = {1, 0, 1};
    float scalar = 3.25f;
    cbx_status rc = CBX_OK;
    rc |= pt_dict_set(sd, "a.weight", pt_tensor_new(TYPE_F32, 2, (int64_t[]){2, 3}, f32));
    rc |= pt_dict_set(sd, "a.f64", pt_tensor_new(TYPE_F64, 1, (int64_t[]){3}, f64));
    rc |= pt_dict_set(sd, "a.f16", pt_tensor_new(TYPE_F16, 1, (int64_t[]){5}, h16));
    rc |= pt_dict_set(sd, "a.bf16", pt_tensor_new(TYPE_BF16, 3, (int64_t[]){2, 2, 2}, bf));
    rc |= pt_dict_set(sd, "b.i64", pt_tensor_new(TYPE_I64, 1, (int64_t[]){3}, i64));
    rc |= pt_dict_set(sd, "b.i32", pt_tensor_new(TYPE_I32, 2, (int64_t[]){1, 2}, i32));
    rc |= pt_dict_set(sd, "b.i16", pt_tensor_new(TYPE_I16, 1, (int64_t[]){2}, i16));
    rc |= pt_dict_set(sd, "b.i8", pt_tensor_new(TYPE_I8, 1, (int64_t[]){3}, i8));
    rc |= pt_dict_set(sd, "b.u8", pt_tensor_new(TYPE_U8, 1, (int64_t[]){2}, u8));
    rc |= pt_dict_set(sd, "b.bool", pt_tensor_new(TYPE_BOOL, 1, (int64_t[]){3}, b1));
    rc |= pt_dict_set(sd, "scalar", pt_tensor_new(TYPE_F32, 0, NULL, &scalar));
    rc |= pt_dict_set(sd, "empty", pt_tensor_new(TYPE_F32, 2, (int64_t[]){0, 3}, NULL));
    rc |= pt_dict_set(sd, "four_d", pt_tensor_new(TYPE_F32, 4, (int64_t[]){1, 2, 1, 3}, f32));
    rc |= pt_append(lst, pt_int(0));
    rc |= pt_append(lst, pt_int(255));
    rc |= pt_append(lst, pt_int(256));
    rc |= pt_append(lst, pt_int(65536));
    rc |= pt_append(lst, pt_int(-1));
    rc |= pt_append(lst, pt_int(-2147483648LL));
    rc |= pt_append(lst, pt_int(2147483648LL));
    rc |= pt_append(lst, pt_int(-1099511627776LL));
    rc |= pt_append(lst, pt_int(9223372036854775807LL));
    rc |= pt_append(lst, pt_int(-9223372036854775807LL - 1));
    rc |= pt_append(lst, pt_float(-0.0));
    rc |= pt_append(lst, pt_float(1e-310));
    rc |= pt_append(lst, pt_bool(true));
    rc |= pt_append(lst, pt_bool(false));
    rc |= pt_append(lst, pt_none());
    rc |= pt_append(lst, pt_str(""));
    rc |= pt_append(lst, pt_str("h\xc3\xa9llo \xe2\x82\xac \xf0\x9f\x8e\xb5"));
    rc |= pt_append(t1, pt_int(7));
    for (int i = 0; i < 5; i++) rc |= pt_append(t5, pt_int(i));
    rc |= pt_append(tup, empty_t);
    rc |= pt_append(tup, t1);
    rc |= pt_append(tup, t5);
    rc |= pt_append(tup, pt_list_new());
    rc |= pt_append(tup, pt_dict_new(false));
    rc |= pt_dict_set(root, "sd", sd);
    rc |= pt_dict_set(root, "values", lst);
    rc |= pt_dict_set(root, "tuples", tup);
    rc |= pt_dict_set(root, "replaced", pt_int(1));
    rc |= pt_dict_set(root, "replaced", pt_str("second"));
    CHECK(rc == CBX_OK && pt_len(root) == 4, "build a tree with every kind (replace keeps 4 keys)");

    const char *path = tmp_path("rt.pt");
    rc = io_pt_write(path, root, err);
    CHECK(rc == CBX_OK, "io_pt_write: %s", rc ? err : "ok");
    int nent = 0;
    CHECK(aligned_stored(path, &nent) && nent == 13 + 4, "written entries are stored, data 64-byte aligned (%d entries)", nent);
    struct pt_value *back = NULL;
    rc = io_pt_read(path, &back, err);
    CHECK(rc == CBX_OK, "read back: %s", rc ? err : "ok");
    CHECK(back && same(root, back, ""), "round trip: identical structure, kinds, keys, dtypes, shapes and bytes");
    const struct pt_value *w = pt_get_path(back, "sd.a.weight");
    CHECK(w && w == pt_dict_get(pt_dict_get(back, "sd"), "a.weight"),
          "pt_get_path prefers the flat key 'a.weight' inside sd");
    const struct pt_value *s = pt_get_path(back, "values.16");
    CHECK(s && s->kind == PT_STR && strcmp(s->u.str.s, "h\xc3\xa9llo \xe2\x82\xac \xf0\x9f\x8e\xb5") == 0,
          "list index path values.16 gives the UTF-8 string");
    const struct pt_value *r2 = pt_dict_get(back, "replaced");
    CHECK(r2 && r2->kind == PT_STR && strcmp(pt_dict_key(back, 3), "replaced") == 0,
          "replaced key keeps its position and takes the new value");

    /* the reader's own file via memory */
    FILE *f = fopen(path, "rb");
    static uint8_t mem[1 << 16];
    size_t mn = f ? fread(mem, 1, sizeof mem, f) : 0;
    if (f) fclose(f);
    struct pt_value *back2 = NULL;
    rc = io_pt_read_mem(mem, mn, "rt.pt", &back2, err);
    CHECK(rc == CBX_OK && back2 && same(root, back2, ""), "io_pt_read_mem gives the same tree: %s", rc ? err : "ok");
    pt_value_free(back2);

    struct pt_value *w2 = (struct pt_value *)pt_get_path(back, "sd.a.weight");
    void *d = pt_tensor_take_data(w2);
    CHECK(d && !w2->u.t.data && !w2->u.t.owned && memcmp(d, f32, 24) == 0, "pt_tensor_take_data hands over the buffer");
    free(d);
    pt_value_free(back);
    pt_value_free(root);

    /* writer refuses a tensor without data when there is no fill callback */
    struct pt_value *lazy = pt_dict_new(true);
    pt_dict_set(lazy, "x", pt_tensor_borrow(TYPE_F32, 1, (int64_t[]){4}, NULL));
    rc = io_pt_write(tmp_path("lazy.pt"), lazy, err);
    CHECK(rc == CBX_ERR_INVALID_ARG && strstr(err, "'x'"), "no data, no callback: '%s'", err);
    pt_value_free(lazy);
}

/* Streaming: values v[i] = i * 0.5 + index, produced chunk by chunk. */
struct fillstate { int calls; uint64_t next_off[3]; bool order_ok; };

static cbx_status fill(void *user, size_t index, const char *name, const struct pt_tensor *t,
                       uint64_t off, void *buf, size_t n, char *err)
{
    struct fillstate *fs = user;
    fs->calls++;
    if (index >= 3 || off != fs->next_off[index] || n % 4) fs->order_ok = false;
    if (index < 3) fs->next_off[index] = off + n;
    if (strcmp(name, "boom") == 0) return err_setf(err, CBX_ERR_CANCELLED, "fill refused %s", name);
    (void)t;
    float *f = buf;
    for (size_t i = 0; i < n / 4; i++) f[i] = (float)(off / 4 + i) * 0.5f + (float)index;
    return CBX_OK;
}

static void test_stream(void)
{
    char err[ERR_MAX] = "";
    int64_t big = 1500000; /* 6 MB: two chunks of at most 4 MiB */
    float small[3] = {9, 8, 7};
    struct pt_value *sd = pt_dict_new(true);
    cbx_status rc = pt_dict_set(sd, "flow.w", pt_tensor_borrow(TYPE_F32, 2, (int64_t[]){big / 100, 100}, NULL));
    rc |= pt_dict_set(sd, "flow.b", pt_tensor_borrow(TYPE_F32, 1, (int64_t[]){3}, small));
    rc |= pt_dict_set(sd, "mel2wav.x", pt_tensor_borrow(TYPE_F32, 1, (int64_t[]){10}, NULL));
    CHECK(rc == CBX_OK, "build a lazy state dict");
    struct fillstate fs = {.order_ok = true};
    const char *path = tmp_path("stream.pt");
    rc = io_pt_write_stream(path, sd, fill, &fs, err);
    CHECK(rc == CBX_OK, "io_pt_write_stream: %s", rc ? err : "ok");
    CHECK(fs.order_ok && fs.calls == 3 && fs.next_off[0] == (uint64_t)big * 4 && fs.next_off[2] == 40,
          "fill called in order with consecutive chunks (%d calls)", fs.calls);
    struct pt_value *back = NULL;
    rc = io_pt_read(path, &back, err);
    CHECK(rc == CBX_OK && back && back->kind == PT_DICT && back->u.dict.ordered, "read streamed file: %s", rc ? err : "ok");
    const struct pt_tensor *w = pt_as_tensor(pt_dict_get(back, "flow.w")),
                           *b = pt_as_tensor(pt_dict_get(back, "flow.b")),
                           *x = pt_as_tensor(pt_dict_get(back, "mel2wav.x"));
    bool ok = w && b && x && w->ne[0] == big / 100 && w->ne[1] == 100;
    for (int64_t i = 0; ok && i < big; i++) ok = ((float *)w->data)[i] == (float)i * 0.5f;
    for (int i = 0; ok && i < 10; i++) ok = ((float *)x->data)[i] == (float)i * 0.5f + 2;
    ok = ok && memcmp(b->data, small, 12) == 0;
    CHECK(ok, "streamed values match the generator across the chunk boundary");
    pt_value_free(back);
    remove(path); /* 6 MB */

    struct pt_value *bad = pt_dict_new(true);
    pt_dict_set(bad, "boom", pt_tensor_borrow(TYPE_F32, 1, (int64_t[]){4}, NULL));
    fs = (struct fillstate){.order_ok = true};
    rc = io_pt_write_stream(tmp_path("boom.pt"), bad, fill, &fs, err);
    FILE *f = fopen(tmp_path("boom.pt"), "rb");
    CHECK(rc == CBX_ERR_CANCELLED && strstr(err, "fill refused boom") && !f,
          "a failing fill aborts, keeps its message, leaves no file: '%s'", err);
    if (f) fclose(f);
    pt_value_free(bad);
    pt_value_free(sd);
}

/* ----------------------------------------------------- hand-written pickles */

struct pk { uint8_t b[8192]; size_t n; };

static void op(struct pk *p, uint8_t c) { p->b[p->n++] = c; }
static void bytes(struct pk *p, const void *d, size_t n) { memcpy(p->b + p->n, d, n); p->n += n; }
static void ustr(struct pk *p, const char *s)
{
    uint32_t n = (uint32_t)strlen(s);
    op(p, 'X');
    uint8_t l[4] = {(uint8_t)n, (uint8_t)(n >> 8), (uint8_t)(n >> 16), (uint8_t)(n >> 24)};
    bytes(p, l, 4);
    bytes(p, s, n);
}
static void i1(struct pk *p, int v) { op(p, 'K'); op(p, (uint8_t)v); }
static void glob(struct pk *p, const char *mod, const char *name)
{
    op(p, 'c');
    bytes(p, mod, strlen(mod));
    op(p, '\n');
    bytes(p, name, strlen(name));
    op(p, '\n');
}
static void ints_tuple(struct pk *p, int n, const int *v)
{
    op(p, '(');
    for (int i = 0; i < n; i++) i1(p, v[i]);
    op(p, 't');
}
/* _rebuild_tensor_v2(('storage', cls, key, 'cpu', numel), off, size, stride, False, OrderedDict()) */
static void tensor(struct pk *p, const char *cls, const char *key, int numel, int off,
                   int nd, const int *ne, const int *st)
{
    glob(p, "torch._utils", "_rebuild_tensor_v2");
    op(p, '(');
    op(p, '(');
    ustr(p, "storage");
    glob(p, "torch", cls);
    ustr(p, key);
    ustr(p, "cpu");
    i1(p, numel);
    op(p, 't');
    op(p, 'Q');
    i1(p, off);
    ints_tuple(p, nd, ne);
    ints_tuple(p, nd, st);
    op(p, 0x89);
    glob(p, "collections", "OrderedDict");
    op(p, ')');
    op(p, 'R');
    op(p, 't');
    op(p, 'R');
}

/* Write dir/data.pkl + dir/data/0 (6 floats 0..5) as a zip; read it. */
static cbx_status read_pickle(const struct pk *p, struct pt_value **out, char *err)
{
    static const float st0[6] = {0, 1, 2, 3, 4, 5};
    const char *path = tmp_path("hand.pt");
    remove(path);
    int ze;
    zip_t *za = zip_open(path, ZIP_CREATE | ZIP_TRUNCATE, &ze);
    if (!za) return CBX_ERR_IO;
    zip_file_add(za, "m/data.pkl", zip_source_buffer(za, p->b, p->n, 0), 0);
    zip_file_add(za, "m/data/0", zip_source_buffer(za, st0, sizeof st0, 0), 0);
    zip_file_add(za, "m/version", zip_source_buffer(za, "3\n", 2, 0), 0);
    if (zip_close(za) != 0) return CBX_ERR_IO;
    return io_pt_read(path, out, err);
}

static void test_strided(void)
{
    char err[ERR_MAX] = "";
    struct pk p = {.n = 0};
    op(&p, 0x80); op(&p, 2);
    op(&p, '}');
    op(&p, '(');
    ustr(&p, "xt");   /* [[0,1,2],[3,4,5]].T : size (3,2), stride (1,3) */
    tensor(&p, "FloatStorage", "0", 6, 0, 2, (int[]){3, 2}, (int[]){1, 3});
    ustr(&p, "odd");  /* offset 1, stride 2: [1, 3, 5] */
    tensor(&p, "FloatStorage", "0", 6, 1, 1, (int[]){3}, (int[]){2});
    ustr(&p, "bcast"); /* stride 0: [4, 4] x [5] = row broadcast of element 4 */
    tensor(&p, "FloatStorage", "0", 6, 4, 2, (int[]){2, 2}, (int[]){0, 1});
    ustr(&p, "whole"); /* the whole storage, last user: taken without copy */
    tensor(&p, "FloatStorage", "0", 6, 0, 2, (int[]){2, 3}, (int[]){3, 1});
    op(&p, 'u');
    op(&p, '.');
    struct pt_value *v = NULL;
    cbx_status rc = read_pickle(&p, &v, err);
    CHECK(rc == CBX_OK, "hand-written pickle with views of one storage: %s", rc ? err : "ok");
    const struct pt_tensor *xt = pt_as_tensor(pt_dict_get(v, "xt")), *odd = pt_as_tensor(pt_dict_get(v, "odd")),
                           *bc = pt_as_tensor(pt_dict_get(v, "bcast")), *wh = pt_as_tensor(pt_dict_get(v, "whole"));
    static const float want_xt[6] = {0, 3, 1, 4, 2, 5}, want_odd[3] = {1, 3, 5}, want_bc[4] = {4, 5, 4, 5},
                       want_wh[6] = {0, 1, 2, 3, 4, 5};
    if (xt && odd && bc && wh) {
        CHECK(xt->ne[0] == 3 && xt->ne[1] == 2, "transposed view has shape [3, 2]");
        check_close("transposed view gathered contiguous", xt->data, want_xt, 6, 0, 0);
        check_close("offset 1 stride 2 view", odd->data, want_odd, 3, 0, 0);
        check_close("stride-0 broadcast view", bc->data, want_bc, 4, 0, 0);
        check_close("whole-storage tensor", wh->data, want_wh, 6, 0, 0);
    } else {
        CHECK(false, "all four views present");
    }
    pt_value_free(v);

    /* memoised globals and storage tuple reused via BINGET, OrderedDict root
     * with a torch-style _metadata BUILD state, STACK_GLOBAL, MEMOIZE, FRAME */
    p.n = 0;
    op(&p, 0x80); op(&p, 4);
    op(&p, 0x95); bytes(&p, "\0\0\0\0\0\0\0\0", 8);
    op(&p, 0x8c); op(&p, 11); bytes(&p, "collections", 11); op(&p, 0x94);        /* memo 0 */
    op(&p, 0x8c); op(&p, 11); bytes(&p, "OrderedDict", 11); op(&p, 0x94);        /* memo 1 */
    op(&p, 0x93); op(&p, 0x94);                                                  /* memo 2 */
    op(&p, ')'); op(&p, 'R'); op(&p, 0x94);                                      /* memo 3: root */
    op(&p, '(');
    ustr(&p, "a");
    tensor(&p, "FloatStorage", "0", 6, 0, 1, (int[]){2}, (int[]){1});
    ustr(&p, "b");
    tensor(&p, "FloatStorage", "0", 6, 2, 1, (int[]){2}, (int[]){1});
    op(&p, 'u');
    op(&p, '}');                     /* state {'_metadata': OrderedDict({'': {'version': 1}})} */
    ustr(&p, "_metadata");
    op(&p, 'h'); op(&p, 2); op(&p, ')'); op(&p, 'R');
    ustr(&p, "");
    op(&p, '}'); ustr(&p, "version"); i1(&p, 1); op(&p, 's');
    op(&p, 's');
    op(&p, 's');
    op(&p, 'b');
    op(&p, '.');
    v = NULL;
    rc = read_pickle(&p, &v, err);
    CHECK(rc == CBX_OK && v && v->kind == PT_DICT && v->u.dict.ordered && pt_len(v) == 2,
          "protocol 4 OrderedDict with STACK_GLOBAL, MEMOIZE, FRAME and a _metadata BUILD: %s",
          rc ? err : "ok");
    const struct pt_tensor *ta = pt_as_tensor(pt_dict_get(v, "a")), *tb = pt_as_tensor(pt_dict_get(v, "b"));
    static const float want_a[2] = {0, 1}, want_b[2] = {2, 3};
    if (ta && tb) {
        check_close("shared storage, first part", ta->data, want_a, 2, 0, 0);
        check_close("shared storage, second part", tb->data, want_b, 2, 0, 0);
    } else {
        CHECK(false, "tensors a and b present");
    }
    pt_value_free(v);
}

/* Each bad pickle is refused with a message containing `want`. */
static void refused(const struct pk *p, const char *want, const char *what)
{
    char err[ERR_MAX] = "";
    struct pt_value *v = (struct pt_value *)&err; /* must be reset to NULL */
    cbx_status rc = read_pickle(p, &v, err);
    CHECK(rc != CBX_OK && v == NULL && strstr(err, want) != NULL && !strchr(err, '\n'),
          "%s refused: '%s'", what, err);
    printf("refused %-45s %s\n", what, err);
}

static void test_malicious(void)
{
    struct pk p;
#define START() (p.n = 0, op(&p, 0x80), op(&p, 2))
    START(); glob(&p, "os", "system"); ustr(&p, "echo pwned"); op(&p, 0x85); op(&p, 'R'); op(&p, '.');
    refused(&p, "refusing global os.system", "GLOBAL os.system");
    START(); ustr(&p, "builtins"); ustr(&p, "eval"); op(&p, 0x93); op(&p, '.');
    refused(&p, "refusing global builtins.eval", "STACK_GLOBAL builtins.eval");
    START(); glob(&p, "torch", "load"); op(&p, '.');
    refused(&p, "refusing global torch.load", "GLOBAL torch.load");
    START(); op(&p, 'N'); op(&p, 'i'); op(&p, '.');
    refused(&p, "unsupported pickle opcode 0x69", "INST opcode");
    START(); op(&p, 0xff); op(&p, '.');
    refused(&p, "unsupported pickle opcode 0xff", "opcode 0xff");
    START(); op(&p, 'R'); op(&p, '.');
    refused(&p, "stack underflow in REDUCE", "REDUCE on an empty stack");
    START(); op(&p, 'N'); op(&p, 't'); op(&p, '.');
    refused(&p, "TUPLE without MARK", "TUPLE without MARK");
    START(); op(&p, '}'); op(&p, '('); op(&p, 's'); op(&p, '.');
    refused(&p, "stack underflow in SETITEM", "SETITEM across a MARK");
    START(); op(&p, 'h'); op(&p, 5); op(&p, '.');
    refused(&p, "memo index 5 was never stored", "BINGET out of range");
    START(); op(&p, 'N'); op(&p, 'r'); bytes(&p, "\xff\xff\xff\x7f", 4); op(&p, '.');
    refused(&p, "memo index 2147483647 beyond", "LONG_BINPUT huge index");
    START(); op(&p, '}'); op(&p, '('); ustr(&p, "x");
    tensor(&p, "FloatStorage", "7", 6, 0, 1, (int[]){6}, (int[]){1}); op(&p, 'u'); op(&p, '.');
    refused(&p, "storage entry m/data/7 is missing", "storage key missing");
    START(); op(&p, '}'); op(&p, '('); ustr(&p, "x");
    tensor(&p, "FloatStorage", "../0", 6, 0, 1, (int[]){6}, (int[]){1}); op(&p, 'u'); op(&p, '.');
    refused(&p, "bad storage key '../0'", "storage key with a path");
    START(); op(&p, '}'); op(&p, '('); ustr(&p, "x");
    tensor(&p, "FloatStorage", "0", 6, 0, 1, (int[]){10}, (int[]){1}); op(&p, 'u'); op(&p, '.');
    refused(&p, "lies beyond storage '0' of 6 elements", "size beyond storage");
    START(); op(&p, '}'); op(&p, '('); ustr(&p, "x");
    tensor(&p, "FloatStorage", "0", 6, 3, 2, (int[]){2, 2}, (int[]){2, 1}); op(&p, 'u'); op(&p, '.');
    refused(&p, "lies beyond storage", "offset + strides beyond storage");
    START(); op(&p, '}'); op(&p, '('); ustr(&p, "x");
    tensor(&p, "LongStorage", "0", 6, 0, 1, (int[]){6}, (int[]){1}); op(&p, 'u'); op(&p, '.');
    refused(&p, "has 24 bytes, expected 48", "storage class larger than the entry");
    START(); op(&p, ')');
    for (int i = 0; i < 70; i++) op(&p, 0x85);
    op(&p, '.');
    refused(&p, "nesting deeper than 64", "70 nested tuples");
    START(); op(&p, ']'); op(&p, 'q'); op(&p, 0); op(&p, 'h'); op(&p, 0); op(&p, 'a'); op(&p, '.');
    refused(&p, "cannot contain itself", "list appended to itself");
    START(); op(&p, ']'); op(&p, 'q'); op(&p, 0); op(&p, 0x85); op(&p, 'h'); op(&p, 0); op(&p, 'N'); op(&p, 'a'); op(&p, '.');
    refused(&p, "already inside a container", "mutating a list held by a tuple");
    START(); glob(&p, "collections", "OrderedDict"); op(&p, '.');
    refused(&p, "bare global", "a bare global as the result");
    START(); glob(&p, "torch", "FloatStorage"); op(&p, ')'); op(&p, 'R'); op(&p, '.');
    refused(&p, "not an allowed callable", "calling a storage class");
    START(); glob(&p, "collections", "OrderedDict"); op(&p, 'N'); op(&p, 0x85); op(&p, 'R'); op(&p, '.');
    refused(&p, "OrderedDict() called with arguments", "OrderedDict with arguments");
    START(); op(&p, '}'); op(&p, '('); i1(&p, 3); op(&p, 'N'); op(&p, 'u'); op(&p, '.');
    refused(&p, "dict key is not a string", "integer dict key");
    START(); op(&p, 'N'); op(&p, 'N'); op(&p, '.');
    refused(&p, "STOP with 2 values", "two values at STOP");
    START(); op(&p, 'N');
    refused(&p, "pickle ends without STOP", "missing STOP");
    START(); op(&p, 'X'); bytes(&p, "\x10\0\0\0ab", 6);
    refused(&p, "pickle truncated", "string past the end");
    START(); op(&p, 'X'); bytes(&p, "\x02\0\0\0\xc3\x28", 6); op(&p, '.');
    refused(&p, "not valid UTF-8", "invalid UTF-8 string");
    p.n = 0; op(&p, 0x80); op(&p, 1); op(&p, 'N'); op(&p, '.');
    refused(&p, "pickle protocol 1", "protocol 1");
    START(); op(&p, 0x8a); op(&p, 9); bytes(&p, "123456789", 9); op(&p, '.');
    refused(&p, "integer of 9 bytes", "LONG1 wider than 64 bits");
    /* backward hooks must be empty */
    START(); op(&p, '}'); op(&p, '('); ustr(&p, "x");
    glob(&p, "torch._utils", "_rebuild_tensor_v2"); op(&p, '('); op(&p, '('); ustr(&p, "storage");
    glob(&p, "torch", "FloatStorage"); ustr(&p, "0"); ustr(&p, "cpu"); i1(&p, 6); op(&p, 't'); op(&p, 'Q');
    i1(&p, 0); ints_tuple(&p, 1, (int[]){6}); ints_tuple(&p, 1, (int[]){1}); op(&p, 0x89);
    op(&p, '}'); ustr(&p, "hook"); op(&p, 'N'); op(&p, 's'); op(&p, 't'); op(&p, 'R'); op(&p, 'u'); op(&p, '.');
    refused(&p, "backward_hooks must be an empty OrderedDict", "non-empty backward hooks");
    /* size and stride of different lengths */
    START(); op(&p, '}'); op(&p, '('); ustr(&p, "x");
    glob(&p, "torch._utils", "_rebuild_tensor_v2"); op(&p, '('); op(&p, '('); ustr(&p, "storage");
    glob(&p, "torch", "FloatStorage"); ustr(&p, "0"); ustr(&p, "cpu"); i1(&p, 6); op(&p, 't'); op(&p, 'Q');
    i1(&p, 0); ints_tuple(&p, 2, (int[]){2, 3}); ints_tuple(&p, 1, (int[]){1}); op(&p, 0x89);
    glob(&p, "collections", "OrderedDict"); op(&p, ')'); op(&p, 'R'); op(&p, 't'); op(&p, 'R'); op(&p, 'u'); op(&p, '.');
    refused(&p, "size has 2 dims but stride 1", "size/stride length mismatch");
#undef START

    /* not a zip at all, and a zip without data.pkl */
    char err[ERR_MAX] = "";
    struct pt_value *v = NULL;
    static const uint8_t junk[64] = "this is not a zip archive, just some text padding it out";
    cbx_status rc = io_pt_read_mem(junk, sizeof junk, "junk.pt", &v, err);
    CHECK(rc == CBX_ERR_FORMAT && !v && strncmp(err, "junk.pt: ", 9) == 0, "junk bytes refused: '%s'", err);
    const char *path = tmp_path("nopkl.pt");
    int ze;
    zip_t *za = zip_open(path, ZIP_CREATE | ZIP_TRUNCATE, &ze);
    zip_file_add(za, "m/version", zip_source_buffer(za, "3\n", 2, 0), 0);
    zip_close(za);
    rc = io_pt_read(path, &v, err);
    CHECK(rc == CBX_ERR_FORMAT && !v && strstr(err, "no <dir>/data.pkl"), "zip without data.pkl refused: '%s'", err);

    /* one flipped bit inside prompt_feat's stored data: libzip's CRC check */
    FILE *f = fopen(test_data("turbo/conds.pt"), "rb");
    static uint8_t buf[1 << 18];
    size_t n = f ? fread(buf, 1, sizeof buf, f) : 0;
    if (f) fclose(f);
    uint8_t *hit = NULL;
    for (size_t i = 0; !hit && i + 12 <= n; i++)
        if (memcmp(buf + i, "conds/data/5", 12) == 0) hit = buf + i;
    if (hit && hit + 500 < buf + n) hit[500] ^= 4;
    rc = io_pt_read_mem(buf, n, "flipped.pt", &v, err);
    CHECK(hit && rc == CBX_ERR_FORMAT && !v && strstr(err, "conds/data/5") && strstr(err, "CRC"),
          "a flipped bit in a storage is caught: '%s'", err);
}

/* Files written by torch 2.11.0 (torch.save of a Linear+BatchNorm1d
 * state_dict plus extra tensors; a conds-like dict), kept in the fuzz
 * corpus. They carry .format_version, .storage_alignment, byteorder,
 * .data/serialization_id and an OrderedDict _metadata BUILD. Expected
 * values are what torch printed for the same tensors: 0.weight[0] =
 * 0.393109530210495, x_t = arange(6).reshape(2,3).t(), h = f16 [1.5, -2],
 * b = bf16 [1.5, -2], view = arange(10)[3:7] (storage offset 3). */
static void test_torch211_files(void)
{
    char err[ERR_MAX] = "";
    struct pt_value *v = NULL;
    cbx_status rc = io_pt_read(CBX_SOURCE_DIR "/tests/fuzz/corpus/fuzz_torch_pt/sd_torch211.pt", &v, err);
    CHECK(rc == CBX_OK, "read a torch 2.11 state dict: %s", rc ? err : "ok");
    static const char *keys[] = {"0.weight", "0.bias", "1.weight", "1.bias", "1.running_mean",
                                 "1.running_var", "1.num_batches_tracked", "x_t", "h", "b", "view"};
    bool ok = v && v->kind == PT_DICT && v->u.dict.ordered && pt_len(v) == 11;
    for (size_t i = 0; ok && i < 11; i++) ok = strcmp(pt_dict_key(v, i), keys[i]) == 0;
    CHECK(ok, "torch 2.11 state dict: OrderedDict with 11 keys in order");
    const struct pt_tensor *w = pt_as_tensor(pt_dict_get(v, "0.weight")),
                           *nbt = pt_as_tensor(pt_dict_get(v, "1.num_batches_tracked")),
                           *xt = pt_as_tensor(pt_dict_get(v, "x_t")), *h = pt_as_tensor(pt_dict_get(v, "h")),
                           *b = pt_as_tensor(pt_dict_get(v, "b")), *view = pt_as_tensor(pt_dict_get(v, "view"));
    if (w && nbt && xt && h && b && view) {
        CHECK(w->type == TYPE_F32 && w->ndim == 2 && w->ne[0] == 4 && w->ne[1] == 3 &&
              ((float *)w->data)[0] == (float)0.393109530210495, "0.weight [4, 3], [0] = %.9g",
              ((float *)w->data)[0]);
        CHECK(nbt->type == TYPE_I64 && nbt->ndim == 0 && ((int64_t *)nbt->data)[0] == 0,
              "num_batches_tracked is an i64 scalar 0");
        static const float want_xt[6] = {0, 3, 1, 4, 2, 5};
        CHECK(xt->ne[0] == 3 && xt->ne[1] == 2, "x_t has shape [3, 2]");
        check_close("torch-written transposed tensor", xt->data, want_xt, 6, 0, 0);
        const uint16_t *hh = h->data, *bb = b->data;
        CHECK(h->type == TYPE_F16 && hh[0] == 0x3e00 && hh[1] == 0xc000, "f16 [1.5, -2] bits %04x %04x", hh[0], hh[1]);
        CHECK(b->type == TYPE_BF16 && bb[0] == 0x3fc0 && bb[1] == 0xc000, "bf16 [1.5, -2] bits %04x %04x", bb[0], bb[1]);
        const int64_t *vv = view->data;
        CHECK(view->type == TYPE_I64 && view->ne[0] == 4 && vv[0] == 3 && vv[3] == 6,
              "storage-offset view arange(10)[3:7] = %lld..%lld", (long long)vv[0], (long long)vv[3]);
    } else {
        CHECK(false, "torch 2.11 tensors present");
    }
    pt_value_free(v);

    v = NULL;
    rc = io_pt_read(CBX_SOURCE_DIR "/tests/fuzz/corpus/fuzz_torch_pt/conds_torch211.pt", &v, err);
    CHECK(rc == CBX_OK, "read a torch 2.11 conds-like dict: %s", rc ? err : "ok");
    const struct pt_tensor *se = pt_as_tensor(pt_get_path(v, "t3.speaker_emb")),
                           *pl = pt_as_tensor(pt_get_path(v, "gen.prompt_token_len"));
    const struct pt_value *ce = pt_get_path(v, "t3.clap_emb");
    CHECK(v && !v->u.dict.ordered && se && se->ne[1] == 4 && ((float *)se->data)[3] == 1.0f && pl &&
          ((int64_t *)pl->data)[0] == 250 && ce && ce->kind == PT_NONE,
          "torch 2.11 conds: ones(1,4), None, tensor([250])");
    pt_value_free(v);
}

/* Allocation-failure run: malloc and friends are interposed (glibc exports
 * the real ones as __libc_*) so that the k-th allocation fails, for every
 * k of a successful read and write; each run must fail cleanly (or succeed)
 * and leave no allocation behind. Not under ASan, which owns malloc. */
#if defined(__SANITIZE_ADDRESS__)
#define PT_NO_ALLOC_HOOK 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PT_NO_ALLOC_HOOK 1
#endif
#endif
#if defined(__GLIBC__) && !defined(PT_NO_ALLOC_HOOK)
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void __libc_free(void *);
static long fail_at = -1, n_allocs, live;

static bool inject(void)
{
    n_allocs++;
    if (fail_at < 0) return false;
    if (fail_at-- == 0) return true;
    return false;
}
void *malloc(size_t n)
{
    if (inject()) return NULL;
    void *p = __libc_malloc(n);
    if (p) live++;
    return p;
}
void *calloc(size_t a, size_t b)
{
    if (inject()) return NULL;
    void *p = __libc_calloc(a, b);
    if (p) live++;
    return p;
}
void *realloc(void *q, size_t n)
{
    if (inject()) return NULL;
    void *p = __libc_realloc(q, n);
    if (p && !q) live++;
    return p;
}
void free(void *p)
{
    if (p) live--;
    __libc_free(p);
}

static void test_alloc_failures(void)
{
    char err[ERR_MAX];
    const char *sample = test_data("turbo/conds.pt");
    struct pt_value *v = NULL;
    long before = live;
    n_allocs = 0;
    io_pt_read(sample, &v, err);
    long total = n_allocs;
    pt_value_free(v);
    int bad_status = 0, leaks = 0, ok_runs = 0, libzip_leaks = 0;
    for (long k = 0; k < total; k++) {
        v = NULL;
        before = live;
        fail_at = k;
        cbx_status rc = io_pt_read(sample, &v, err);
        fail_at = -1;
        if (rc == CBX_OK) { ok_runs++; pt_value_free(v); }
        else if (v || !err[0]) bad_status++;
        /* libzip 1.7.3 itself leaks a block when some of its own
         * allocations fail (zip_open, zip_fopen_index: "Malloc failure");
         * those runs are counted apart */
        if (live > before && rc != CBX_OK && strstr(err, "Malloc failure")) libzip_leaks++;
        else if (live > before) leaks++;
    }
    CHECK(total > 50 && bad_status == 0 && leaks == 0,
          "read with allocation %ld..%ld failing: %d bad results, %d leaking runs (%d still succeeded)",
          0L, total - 1, bad_status, leaks, ok_runs);
    printf("allocation-failure read: %ld runs, %d succeeded, 0 leaks of ours, %d inside libzip\n",
           total, ok_runs, libzip_leaks);

    /* the writer */
    float d[4] = {1, 2, 3, 4};
    struct pt_value *root = pt_dict_new(false);
    pt_dict_set(root, "a", pt_tensor_new(TYPE_F32, 1, (int64_t[]){4}, d));
    pt_dict_set(root, "b", pt_str("x"));
    const char *path = tmp_path("oom.pt");
    n_allocs = 0;
    io_pt_write(path, root, err);
    total = n_allocs;
    bad_status = leaks = 0;
    for (long k = 0; k < total; k++) {
        remove(path);
        before = live;
        fail_at = k;
        cbx_status rc = io_pt_write(path, root, err);
        fail_at = -1;
        FILE *f = fopen(path, "rb");
        if ((rc != CBX_OK) == (f != NULL)) bad_status++;
        if (f) fclose(f);
        if (live > before) leaks++;
    }
    printf("allocation-failure write: %ld runs, %d bad, %d leaks\n", total, bad_status, leaks);
    CHECK(total > 5 && bad_status == 0 && leaks == 0,
          "write with each of %ld allocations failing: %d bad results, %d leaking runs", total,
          bad_status, leaks);
    pt_value_free(root);
}
#else
static void test_alloc_failures(void) {}
#endif

int main(void)
{
    tmp = test_tmpdir("torch_pt");
    test_samples();
    test_torch2_layout();
    test_torch211_files();
    test_roundtrip();
    test_stream();
    test_strided();
    test_malicious();
    test_alloc_failures();
    return test_summary();
}
