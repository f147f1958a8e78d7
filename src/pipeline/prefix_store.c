/* prefix_store.c - T3 voice prefixes on disk (see prefix_store.h). */
#include "prefix_store.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "chatterbox.h"
#include "core/backend.h"
#include "core/build_id.h"
#include "core/cpu_features.h"
#include "io/atomic_file.h"
#include "io/sha256.h"

static const char magic[8] = {'C', 'B', 'X', 'P', 'F', 'X', '1', '\n'};
#define BOM 0x01020304u
#define SUFFIX ".cbxpfx"

/* The file's header; host byte order (the byte-order mark refuses others). */
struct header {
    char magic[8];
    uint32_t bom;
    uint32_t header_bytes;            /* sizeof(struct header) */
    uint8_t id[PREFIX_STORE_ID_SIZE]; /* the model id */
    uint32_t n;                       /* positions: 1 + n_prompt */
    uint32_t n_layer, d_model;
    uint32_t n_speaker;               /* speaker_embed_size */
    int64_t n_prompt;
    uint32_t kv_type;                 /* enum dtype of the stored values */
    uint32_t n_unc;                   /* positions of the unconditional
                                       * tail after the values (t3.h;
                                       * CFG models), 0: none */
    uint64_t payload_bytes;           /* everything after the header */
    uint64_t checksum;                /* payload_hash of the payload */
};

/* 64-bit hash of the payload (a torn or corrupted file is what it guards
 * against, not an adversary: the file is the user's own): four lanes of
 * eight bytes a step, so the multiplies overlap, then folded */
static uint64_t payload_hash(const void *data, size_t n)
{
    const unsigned char *p = data;
    uint64_t h[4] = {0x9E3779B97F4A7C15u ^ n, 0xC2B2AE3D27D4EB4Fu, 0x165667B19E3779F9u, 0x27D4EB2F165667C5u};
    size_t i = 0;
    for (; i + 32 <= n; i += 32)
        for (int l = 0; l < 4; l++) {
            uint64_t w;
            memcpy(&w, p + i + 8 * l, 8);
            h[l] = (h[l] ^ (w * 0xC2B2AE3D27D4EB4Fu)) * 0x9E3779B185EBCA87u;
            h[l] ^= h[l] >> 29;
        }
    uint64_t r = h[0];
    for (int l = 1; l < 4; l++) r = (r ^ h[l]) * 0x9E3779B185EBCA87u;
    for (; i < n; i++) r = (r ^ p[i]) * 0x100000001B3u;
    return r ^ (r >> 32);
}

/* ---- model id ---------------------------------------------------------- */

static void hash_u64(struct sha256 *s, uint64_t v) { sha256_update(s, &v, sizeof v); }

/* name, type, shape and up to 8 spans of 2 KiB of t (all of it when small) */
static void hash_tensor(struct sha256 *s, const char *what, const struct tensor *t)
{
    sha256_update(s, what, strlen(what) + 1);
    if (!t) {
        hash_u64(s, UINT64_MAX);
        return;
    }
    hash_u64(s, (uint64_t)t->type);
    hash_u64(s, (uint64_t)t->ndim);
    for (int d = 0; d < t->ndim; d++) hash_u64(s, (uint64_t)t->ne[d]);
    hash_u64(s, t->extra != NULL); /* a backend layout (was: the packed flag) */
    const size_t nb = tensor_nbytes(t), span = 1024, spans = 4;
    if (!t->data) return;
    /* device weights: the spans are copied to the host first, and the
     * backend is part of the key (its kernels computed the prefix); a
     * failed copy (its line printed) hashes NaN bytes, an id no stored
     * prefix has, so the store is only missed */
    const bool dev = t->be && !t->be->host;
    if (dev) sha256_update(s, t->be->name, strlen(t->be->name) + 1);
    char buf[1024 * 4];
    if (nb <= span * spans) {
        if (dev) t->be->to_host(t->be, buf, t->data, nb);
        sha256_update(s, dev ? buf : t->data, nb);
        return;
    }
    for (size_t i = 0; i < spans; i++) {
        size_t off = (nb - span) / (spans - 1) * i;
        const char *p = (const char *)t->data + off;
        if (dev) t->be->to_host(t->be, buf, p, span);
        sha256_update(s, dev ? buf : p, span);
    }
}

void prefix_store_model_id(const struct t3_model *m, uint8_t id[PREFIX_STORE_ID_SIZE])
{
    struct sha256 s;
    sha256_init(&s);
    static const char tag[] = "chatterbox.c T3 voice prefix " CBX_VERSION_STRING " ";
    sha256_update(&s, tag, sizeof tag);
    sha256_update(&s, cbx_build_commit, strlen(cbx_build_commit) + 1);
    /* the kernels that computed it: results differ between CPU families */
    hash_u64(&s, (uint64_t)cpu_level());
    hash_u64(&s, cpu_amx_ready());
    hash_u64(&s, cpu_avx512_bf16_ready());
    const struct t3_backbone *g = &m->tfmr;
    hash_u64(&s, (uint64_t)g->arch);
    hash_u64(&s, (uint64_t)g->kv_type);
    hash_u64(&s, (uint64_t)g->n_layer);
    hash_u64(&s, (uint64_t)g->n_head);
    hash_u64(&s, (uint64_t)g->d_model);
    hash_u64(&s, (uint64_t)m->hp.speaker_embed_size);
    const struct tensor *ts[T3_MAX_COND_TENSORS];
    const int nt = t3_cond_tensors(m, ts, T3_MAX_COND_TENSORS);
    for (int i = 0; i < nt; i++) hash_tensor(&s, "t", ts[i]);
    sha256_final(&s, id);
}

cbx_status prefix_store_path(const char *dir, const uint8_t id[PREFIX_STORE_ID_SIZE],
                             const struct t3_model *m, const struct t3_cond *c, char *buf,
                             size_t n)
{
    struct sha256 s;
    uint8_t d[SHA256_DIGEST_SIZE];
    char hex[65];
    sha256_init(&s);
    sha256_update(&s, id, PREFIX_STORE_ID_SIZE);
    sha256_update(&s, c->speaker_emb, sizeof(float) * (size_t)m->hp.speaker_embed_size);
    hash_u64(&s, (uint64_t)c->n_prompt);
    if (c->n_prompt > 0) sha256_update(&s, c->prompt_tokens, sizeof(int32_t) * (size_t)c->n_prompt);
    if (t3_has_emotion(m)) sha256_update(&s, &c->emotion_adv, sizeof c->emotion_adv);
    sha256_final(&s, d);
    sha256_hex(d, hex);
    int k = snprintf(buf, n, "%s/%s" SUFFIX, dir, hex);
    return k < 0 || (size_t)k >= n ? CBX_ERR_INVALID_ARG : CBX_OK;
}

/* ---- reading ------------------------------------------------------------ */

static cbx_status bad(char *err, const char *why)
{
    return err_setf(err, CBX_ERR_FORMAT, "voice prefix file: %s", why);
}

/* prefix_store_parse; with in_place the prefix's values stay in data (a
 * mapping the caller hands over on success) instead of a copy. */
static cbx_status parse(const void *data, size_t n, const uint8_t id[PREFIX_STORE_ID_SIZE],
                        const struct t3_model *m, const struct t3_cond *c, bool in_place,
                        struct t3_prefix **out, char *err)
{
    *out = NULL;
    struct header h;
    if (n < sizeof h) return bad(err, "shorter than its header");
    memcpy(&h, data, sizeof h);
    if (memcmp(h.magic, magic, sizeof magic)) return bad(err, "not a prefix file (bad magic)");
    if (h.bom != BOM || h.header_bytes != sizeof h) return bad(err, "written by another build or byte order");
    if (memcmp(h.id, id, PREFIX_STORE_ID_SIZE)) return bad(err, "made with another model or build");
    const struct t3_backbone *g = &m->tfmr;
    const int64_t ns = m->hp.speaker_embed_size;
    if (h.n_layer != (uint32_t)g->n_layer || h.d_model != (uint32_t)g->d_model ||
        h.n_speaker != (uint64_t)ns || h.n_prompt != c->n_prompt || (int64_t)h.n != t3_cond_len(m, c->n_prompt))
        return bad(err, "sizes differ from the model's or the voice's");
    if ((enum dtype)h.kv_type != g->kv_type) return bad(err, "values in another type than the model's cache");
    const size_t kvb = t3_backbone_kv_bytes(g, (int)h.n);
    if (!kvb) return bad(err, "values in an unexpected type");
    const size_t head = sizeof(float) * (size_t)ns + sizeof(int32_t) * (size_t)h.n_prompt;
    if (h.payload_bytes < head + kvb || n - sizeof h != h.payload_bytes)
        return bad(err, "truncated or of the wrong size");
    const size_t want = h.payload_bytes, ub = want - head - kvb;
    const char *pl = (const char *)data + sizeof h;
    if (payload_hash(pl, want) != h.checksum) return bad(err, "checksum mismatch (corrupt)");
    if (memcmp(pl, c->speaker_emb, sizeof(float) * (size_t)ns) ||
        (c->n_prompt > 0 && memcmp(pl + sizeof(float) * (size_t)ns, c->prompt_tokens,
                                   sizeof(int32_t) * (size_t)c->n_prompt)))
        return bad(err, "made for another voice");

    struct t3_prefix *p = t3_prefix_new(m);
    if (p && (h.n_unc > INT32_MAX || t3_prefix_unc_bytes(p, (int)h.n_unc) != ub ||
              (ub == 0 && h.n_unc != 0))) {
        t3_prefix_free(p);
        return bad(err, "an unconditional tail of the wrong size");
    }
    if (p) {
        /* in place: the caller's mapping (prefix_store_load); else a copy */
        p->kv = in_place ? (void *)(pl + head) : malloc(kvb);
        p->speaker_emb = malloc(sizeof(float) * (size_t)ns);
        p->prompt_tokens = malloc(sizeof(int32_t) * (size_t)(c->n_prompt > 0 ? c->n_prompt : 1));
    }
    if (!p || !p->kv || !p->speaker_emb || !p->prompt_tokens) {
        if (p && in_place) p->kv = NULL; /* the caller's */
        t3_prefix_free(p);
        return err_setf(err, CBX_ERR_NOMEM, "out of memory for a voice prefix of %u positions", h.n);
    }
    p->m = m;
    p->n = (int)h.n;
    p->kv_type = g->kv_type;
    p->n_prompt = c->n_prompt;
    p->emotion_adv = t3_has_emotion(m) ? c->emotion_adv : 0.0f;
    memcpy(p->speaker_emb, c->speaker_emb, sizeof(float) * (size_t)ns);
    if (c->n_prompt > 0) memcpy(p->prompt_tokens, c->prompt_tokens, sizeof(int32_t) * (size_t)c->n_prompt);
    if (!in_place) memcpy(p->kv, pl + head, kvb);
    p->bytes = sizeof *p + kvb + sizeof(float) * (size_t)ns + sizeof(int32_t) * (size_t)c->n_prompt;
    cbx_status rc = h.n_unc ? t3_prefix_unc_put(p, (int)h.n_unc, pl + head + kvb, err) : CBX_OK;
    if (rc != CBX_OK) {
        if (in_place) p->kv = NULL; /* the caller's */
        t3_prefix_free(p);
        return rc;
    }
    *out = p;
    return CBX_OK;
}

cbx_status prefix_store_parse(const void *data, size_t n, const uint8_t id[PREFIX_STORE_ID_SIZE],
                              const struct t3_model *m, const struct t3_cond *c,
                              struct t3_prefix **out, char *err)
{
    return parse(data, n, id, m, c, false, out, err);
}

cbx_status prefix_store_load(const char *dir, const uint8_t id[PREFIX_STORE_ID_SIZE],
                             const struct t3_model *m, const struct t3_cond *c,
                             struct t3_prefix **out, char *err)
{
    *out = NULL;
    char path[4096];
    if (prefix_store_path(dir, id, m, c, path, sizeof path) != CBX_OK)
        return err_setf(err, CBX_ERR_INVALID_ARG, "voice prefix directory name too long: %s", dir);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT) return CBX_OK;
        return err_setf(err, CBX_ERR_IO, "%s: %s", path, strerror(errno));
    }
    struct stat sb;
    cbx_status rc = CBX_OK;
    if (fstat(fd, &sb) || !S_ISREG(sb.st_mode)) {
        rc = err_setf(err, CBX_ERR_IO, "%s: not a regular file", path);
    } else if (sb.st_size == 0) {
        rc = err_setf(err, CBX_ERR_FORMAT, "%s: voice prefix file: empty", path);
    } else {
        void *map = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map == MAP_FAILED) {
            rc = err_setf(err, CBX_ERR_IO, "%s: %s", path, strerror(errno));
        } else {
            /* the values are used where they lie: no copy, no fresh
             * memory (files are replaced by rename, never rewritten in
             * place, so the mapped bytes stay as checked) */
            char e[ERR_MAX];
            rc = parse(map, (size_t)sb.st_size, id, m, c, true, out, e);
            if (rc == CBX_OK) {
                (*out)->map = map;
                (*out)->map_bytes = (size_t)sb.st_size;
            } else {
                err_setf(err, rc, "%s: %s", path, e);
                munmap(map, (size_t)sb.st_size);
            }
        }
    }
    close(fd);
    if (rc == CBX_OK) (void)utimensat(AT_FDCWD, path, NULL, 0); /* recently used */
    return rc;
}

/* ---- writing ------------------------------------------------------------ */

/* Remove the least recently modified *.cbxpfx files of dir beyond max. */
static void trim(const char *dir, int max)
{
    for (;;) {
        DIR *d = opendir(dir);
        if (!d) return;
        int count = 0;
        char oldest[512] = "";
        struct timespec ot = {0, 0};
        struct dirent *e;
        while ((e = readdir(d))) {
            size_t l = strlen(e->d_name), sl = strlen(SUFFIX);
            if (l <= sl || strcmp(e->d_name + l - sl, SUFFIX) || l >= sizeof oldest) continue;
            struct stat sb;
            if (fstatat(dirfd(d), e->d_name, &sb, 0) || !S_ISREG(sb.st_mode)) continue;
            count++;
            if (!oldest[0] || sb.st_mtim.tv_sec < ot.tv_sec ||
                (sb.st_mtim.tv_sec == ot.tv_sec && sb.st_mtim.tv_nsec < ot.tv_nsec)) {
                memcpy(oldest, e->d_name, l + 1);
                ot = sb.st_mtim;
            }
        }
        int removed = count > max && !unlinkat(dirfd(d), oldest, 0);
        closedir(d);
        if (!removed) return;
    }
}

cbx_status prefix_store_save(const char *dir, const uint8_t id[PREFIX_STORE_ID_SIZE],
                             const struct t3_prefix *p, char *err)
{
    const struct t3_model *m = p->m;
    const struct t3_cond c = {p->speaker_emb, p->prompt_tokens, p->n_prompt, p->emotion_adv};
    char path[4096];
    if (prefix_store_path(dir, id, m, &c, path, sizeof path) != CBX_OK)
        return err_setf(err, CBX_ERR_INVALID_ARG, "voice prefix directory name too long: %s", dir);
    cbx_status rc = io_mkdir_p(dir, err);
    if (rc != CBX_OK) return rc;

    /* the values as the cache holds them */
    if (p->kv_type != m->tfmr.kv_type)
        return err_setf(err, CBX_ERR_INVALID_ARG, "voice prefix of %s values for a %s cache", dtype_name(p->kv_type),
                        dtype_name(m->tfmr.kv_type));
    const size_t kvb = t3_backbone_kv_bytes(&m->tfmr, p->n), ns = (size_t)m->hp.speaker_embed_size;

    struct header h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, magic, sizeof magic);
    h.bom = BOM;
    h.header_bytes = sizeof h;
    memcpy(h.id, id, PREFIX_STORE_ID_SIZE);
    h.n = (uint32_t)p->n;
    h.n_layer = (uint32_t)m->tfmr.n_layer;
    h.d_model = (uint32_t)m->tfmr.d_model;
    h.n_speaker = (uint32_t)ns;
    h.n_prompt = p->n_prompt;
    h.kv_type = (uint32_t)p->kv_type;
    const size_t sb = sizeof(float) * ns, pb = sizeof(int32_t) * (size_t)p->n_prompt;
    /* the unconditional tail as far as p keeps it now (blocks kept later
     * are computed again by a process that loads this file) */
    const int n_unc = t3_prefix_unc_len(p);
    const size_t ub = t3_prefix_unc_bytes(p, n_unc);
    h.n_unc = (uint32_t)n_unc;
    h.payload_bytes = sb + pb + kvb + ub;
    /* the checksum covers the parts as one run of bytes */
    char *pl = malloc(h.payload_bytes);
    if (!pl) return err_setf(err, CBX_ERR_NOMEM, "out of memory writing %s", path);
    memcpy(pl, p->speaker_emb, sb);
    if (pb) memcpy(pl + sb, p->prompt_tokens, pb);
    memcpy(pl + sb + pb, p->kv, kvb);
    if (ub && (rc = t3_prefix_unc_get(p, n_unc, pl + sb + pb + kvb, err)) != CBX_OK) {
        free(pl);
        return rc;
    }
    h.checksum = payload_hash(pl, h.payload_bytes);

    struct atomic_file af;
    rc = atomic_file_open(&af, path, err);
    if (rc == CBX_OK) {
        if (fwrite(&h, sizeof h, 1, af.f) != 1 || fwrite(pl, 1, h.payload_bytes, af.f) != h.payload_bytes) {
            rc = err_setf(err, CBX_ERR_IO, "%s: write failed: %s", path, strerror(errno));
            atomic_file_abort(&af);
        } else {
            rc = atomic_file_commit(&af, err);
        }
    }
    free(pl);
    if (rc == CBX_OK) trim(dir, PREFIX_STORE_MAX);
    return rc;
}
