/* parity_turbo_prefix_store.c - T3 voice prefixes kept on disk
 * (pipeline/prefix_store.h) through the engine, on the synthetic Turbo
 * directory with Q8_0 linears (a Q8_0 cache: values stored as Q8_0) and
 * with F32 (values stored as F32):
 *   - a call builds the prefix and saves it; with the in-memory cache off
 *     the next call, and a freshly loaded model, load it from the file,
 *     and their audio is bit-identical to the building call's;
 *   - a corrupted byte, a truncated file and a file for another model are
 *     refused with a message; the prefix is then built (same audio) and
 *     the file rewritten;
 *   - a store that cannot be written does not fail the call;
 *   - saving trims the directory to PREFIX_STORE_MAX files, oldest first;
 *   - directly (t3.h): a prefix read back equals the one saved, value for
 *     value (Q8_0 and F32 storage), and its model id is stable across loads
 *     and differs between weight types.
 * Workload: a few speech tokens per call. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/backend.h"
#include "io/model_file.h"
#include "pipeline/engine.h"
#include "pipeline/prefix_store.h"
#include "testutil.h"
#include "voice/conds.h"

struct out { float *pcm; int64_t n; struct engine_stats st; };

static bool say(const struct engine_model *m, const struct backend *be, const struct conds *v, struct out *o)
{
    char err[ERR_MAX] = "";
    struct engine_params p = engine_default_params();
    p.max_tokens = 6;
    p.max_retries = 0;
    p.seed = 3;
    free(o->pcm);
    memset(o, 0, sizeof *o);
    cbx_status rc = engine_synthesize(m, be, v, "Hello there.", &p, NULL, NULL, NULL, &o->pcm, &o->n, &o->st, err);
    CHECK(rc == CBX_OK && o->n > 0, "engine_synthesize: %s", err);
    return rc == CBX_OK;
}

static const char *src_name(int s)
{
    return s == ENGINE_PREFIX_BUILT ? "built" : s == ENGINE_PREFIX_DISK ? "loaded" : "memory";
}

/* o against the reference audio: same samples, prefix from where */
static void expect(const char *what, const struct out *o, const struct out *ref, int source, bool saved,
                   const char *note)
{
    const bool same = o->n == ref->n && !memcmp(o->pcm, ref->pcm, sizeof(float) * (size_t)o->n);
    printf("%-34s prefix %-6s in %.3f s, saved %d, audio %s, note: %s\n", what, src_name(o->st.prefix_source),
           o->st.t_t3_prefix, o->st.prefix_saved, same ? "identical" : "DIFFERS", o->st.prefix_note);
    CHECK(o->st.prefix_source == source, "%s: prefix %s, want %s", what, src_name(o->st.prefix_source),
          src_name(source));
    CHECK(o->st.prefix_saved == saved, "%s: saved %d", what, o->st.prefix_saved);
    CHECK(same, "%s: the audio differs from the building call's", what);
    if (note) CHECK(strstr(o->st.prefix_note, note) != NULL, "%s: note '%s' lacks '%s'", what, o->st.prefix_note, note);
    else CHECK(o->st.prefix_note[0] == 0, "%s: unexpected note '%s'", what, o->st.prefix_note);
}

/* the only *.cbxpfx file of dir (path into buf) and the count */
static long file_size(const char *path)
{
    struct stat sb;
    return stat(path, &sb) ? -1 : (long)sb.st_size;
}

/* one model type: build, load, refusals, rebuild */
static void run(const char *dir, int wtype, const char *tag, long want_value_bytes)
{
    char err[ERR_MAX] = "", file[4096] = "";
    const char *store = test_tmpdir(tag);
    char sdir[4096];
    snprintf(sdir, sizeof sdir, "%s", store);
    struct engine_load_params lp = engine_load_default_params();
    lp.backend = test_backend_name();
    lp.wtype = wtype;
    lp.voice_cache = -1; /* every call looks in the store */
    lp.prefix_dir = sdir;
    struct engine_model *m = NULL, *m2 = NULL;
    struct backend *be = test_compute_backend(0);
    cbx_status rc = engine_model_load(dir, &lp, &m, err);
    CHECK(rc == CBX_OK, "load %s: %s", dir, err);
    if (rc != CBX_OK) return;
    struct out ref = {0}, o = {0};
    char bad[4200];
    if (!say(m, be, NULL, &ref)) goto done;
    expect("first call", &ref, &ref, ENGINE_PREFIX_BUILT, true, NULL);
    CHECK(test_count_files(sdir, ".cbxpfx", file, sizeof file) == 1, "one file in the store");
    /* header (~100 bytes) + speaker + prompt + values */
    const long sz = file_size(file), extra = sz - want_value_bytes;
    printf("%s: file %ld bytes, values %ld bytes\n", tag, sz, want_value_bytes);
    CHECK(extra > 0 && extra < 8192, "%s: the file holds the values in the expected type (%ld bytes over)", tag, extra);

    if (say(m, be, NULL, &o)) expect("second call (store)", &o, &ref, ENGINE_PREFIX_DISK, false, NULL);
    lp.voice_cache = 0;
    rc = engine_model_load(dir, &lp, &m2, err);
    CHECK(rc == CBX_OK, "second load: %s", err);
    if (rc == CBX_OK && say(m2, be, NULL, &o)) expect("freshly loaded model", &o, &ref, ENGINE_PREFIX_DISK, false, NULL);

    /* one byte of the values flipped */
    size_t n = 0;
    unsigned char *bytes = test_read_file(file, &n);
    CHECK(bytes && n == (size_t)sz, "read the file back");
    if (!bytes) goto done;
    int fd = open(file, O_WRONLY);
    unsigned char b = bytes[n / 2] ^ 0x10;
    CHECK(fd >= 0 && pwrite(fd, &b, 1, (off_t)(n / 2)) == 1, "corrupt a byte");
    if (fd >= 0) close(fd);
    if (say(m, be, NULL, &o)) expect("corrupted byte", &o, &ref, ENGINE_PREFIX_BUILT, true, "checksum");
    if (say(m, be, NULL, &o)) expect("after the rewrite", &o, &ref, ENGINE_PREFIX_DISK, false, NULL);
    CHECK(truncate(file, (off_t)(n - 100)) == 0, "truncate");
    if (say(m, be, NULL, &o)) expect("truncated", &o, &ref, ENGINE_PREFIX_BUILT, true, "size");
    /* the file of another model at this name: the id differs */
    uint8_t id[PREFIX_STORE_ID_SIZE];
    memset(id, 0xA5, sizeof id);
    struct t3_prefix *p = NULL;
    rc = prefix_store_parse(bytes, n, id, NULL, NULL, &p, err);
    printf("parse with another model id: %s\n", err);
    CHECK(rc == CBX_ERR_FORMAT && p == NULL && strstr(err, "another model"), "another model's file is refused");
    free(bytes);

    /* a store that cannot be created: the call still speaks */
    engine_model_free(m2);
    m2 = NULL;
    snprintf(bad, sizeof bad, "%s/file", sdir);
    FILE *f = fopen(bad, "w");
    if (f) fclose(f);
    snprintf(bad, sizeof bad, "%s/file/sub", sdir);
    lp.prefix_dir = bad;
    rc = engine_model_load(dir, &lp, &m2, err);
    CHECK(rc == CBX_OK, "load with a bad store: %s", err);
    if (rc == CBX_OK && say(m2, be, NULL, &o)) expect("store cannot be created", &o, &ref, ENGINE_PREFIX_BUILT, false, "directory");
done:
    free(ref.pcm);
    free(o.pcm);
    engine_model_free(m2);
    engine_model_free(m);
    backend_free(be);
    snprintf(bad, sizeof bad, "rm -rf '%s'", sdir); /* ~0.1 GB */
    CHECK(system(bad) == 0, "remove %s", sdir);
}

/* PREFIX_STORE_MAX + 4 old files, then one save: the oldest go */
static void trim(const char *dir)
{
    char err[ERR_MAX] = "", path[4200];
    const char *t = test_tmpdir("prefix-trim");
    char sdir[4096];
    snprintf(sdir, sizeof sdir, "%s", t);
    for (int i = 0; i < PREFIX_STORE_MAX + 4; i++) {
        snprintf(path, sizeof path, "%s/old%02d.cbxpfx", sdir, i);
        FILE *f = fopen(path, "w");
        CHECK(f != NULL, "create %s", path);
        if (f) fclose(f);
        struct timespec ts[2] = {{1000000 + i, 0}, {1000000 + i, 0}};
        utimensat(AT_FDCWD, path, ts, 0);
    }
    struct engine_load_params lp = engine_load_default_params();
    lp.backend = test_backend_name();
    lp.prefix_dir = sdir;
    struct engine_model *m = NULL;
    struct backend *be = test_compute_backend(0);
    if (engine_model_load(dir, &lp, &m, err) == CBX_OK) {
        struct out o = {0};
        if (say(m, be, NULL, &o)) CHECK(o.st.prefix_saved, "saved");
        free(o.pcm);
        char first[4096];
        int k = test_count_files(sdir, ".cbxpfx", first, sizeof first);
        snprintf(path, sizeof path, "%s/old04.cbxpfx", sdir);
        bool old4 = test_exists(path);
        snprintf(path, sizeof path, "%s/old05.cbxpfx", sdir);
        bool old5 = test_exists(path);
        printf("trim: %d files after the save (max %d); old04 %s, old05 %s\n", k, PREFIX_STORE_MAX,
               old4 ? "kept" : "removed", old5 ? "kept" : "removed");
        CHECK(k == PREFIX_STORE_MAX && !old4 && old5, "the store keeps the %d most recent files", PREFIX_STORE_MAX);
    } else {
        CHECK(false, "load: %s", err);
    }
    engine_model_free(m);
    backend_free(be);
}

/* t3_prefix_build -> save -> load: the same values, bit for bit */
static void direct(const char *dir)
{
    char err[ERR_MAX] = "";
    struct model *md = test_open_model(dir);
    if (!md) return;
    struct backend *be = test_compute_backend(0);
    struct conds v = {0};
    cbx_status rc = conds_from_model(md, &v, err);
    CHECK(rc == CBX_OK, "built-in voice: %s", err);
    const enum dtype types[3] = {TYPE_Q8_0, TYPE_F32, TYPE_Q8_0};
    uint8_t ids[3][PREFIX_STORE_ID_SIZE];
    const char *store = test_tmpdir("prefix-direct");
    char sdir[4096], cmd[4200];
    snprintf(sdir, sizeof sdir, "%s", store);
    for (int i = 0; i < 3 && rc == CBX_OK; i++) {
        struct t3_model m;
        memset(&m, 0, sizeof m);
        struct weights w = model_weights(md, MODEL_T3);
        if ((rc = t3_load(&m, &w, test_backend(), types[i], err)) != CBX_OK) {
            CHECK(false, "t3_load_gpt2: %s", err);
            break;
        }
        prefix_store_model_id(&m, ids[i]);
        if (i == 2) { /* a second load of the same weights: the same id */
            t3_free(&m);
            break;
        }
        const struct t3_cond c = {v.speaker_emb, v.cond_prompt_tokens, v.n_cond_prompt, v.emotion_adv};
        struct t3_prefix *p = NULL, *q = NULL;
        rc = t3_prefix_build(&m, be, &c, &p, err);
        CHECK(rc == CBX_OK, "t3_prefix_build: %s", err);
        if (rc == CBX_OK) rc = prefix_store_save(sdir, ids[i], p, err);
        CHECK(rc == CBX_OK, "prefix_store_save: %s", err);
        if (rc == CBX_OK) rc = prefix_store_load(sdir, ids[i], &m, &c, &q, err);
        CHECK(rc == CBX_OK && q, "prefix_store_load: %s", err);
        if (q) {
            const size_t nb = t3_backbone_kv_bytes(&m.tfmr, p->n);
            const unsigned char *x = p->kv, *y = q->kv;
            size_t differ = 0;
            for (size_t j = 0; j < nb; j++) differ += x[j] != y[j];
            printf("direct %s (cache %s): %zu bytes of values, %zu differ after save + load\n", dtype_name(types[i]),
                   dtype_name(m.tfmr.kv_type), nb, differ);
            CHECK(q->n == p->n && q->n_prompt == p->n_prompt && q->kv_type == p->kv_type && differ == 0,
                  "%s: the prefix survives the store", dtype_name(types[i]));
        }
        t3_prefix_free(p);
        t3_prefix_free(q);
        t3_free(&m);
    }
    CHECK(!memcmp(ids[0], ids[2], PREFIX_STORE_ID_SIZE), "the model id is stable across loads");
    CHECK(memcmp(ids[0], ids[1], PREFIX_STORE_ID_SIZE) != 0, "Q8_0 and F32 weights have different ids");
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", sdir);
    CHECK(system(cmd) == 0, "remove %s", sdir);
    conds_free(&v);
    backend_free(be);
    model_close(md);
}

int main(void)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s/models/turbo", CBX_BINARY_DIR);
    /* Turbo: 24 layers, D 1024, 1 + 375 positions, keys and values */
    const long values = 2L * 24 * 376 * 1024;
    run(dir, TYPE_Q8_0, "prefix-q8", values / 32 * 34);
    run(dir, -1, "prefix-f32", values * 4);
    trim(dir);
    direct(dir);
    return test_summary();
}
