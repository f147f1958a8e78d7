/* hf_download.c - Hugging Face Hub snapshot client (libcurl): listing,
 * resumable verified file transfers, manifest. Protocol and invariants in
 * hf_download.h; the files per variant follow spec/overview.md §3 (what
 * each upstream from_pretrained fetches, restricted to what our loaders
 * read). */
#include "hf_download.h"
#include "io/atomic_file.h"

#include <curl/curl.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "chatterbox.h"
#include "io/sha256.h"
#include "io/variant.h"

#define MAX_FILES VARIANT_MAX_DOWNLOAD_FILES

/* The files of each variant are its row's download lists (io/variant.h,
 * spec/overview.md §3.1-3.3). */
static const struct variant *find_variant(const char *name) { return variant_by_name(name); }

const char *hf_variant_repo(const char *variant)
{
    const struct variant *v = find_variant(variant);
    return v ? v->hf_repo : NULL;
}

void hf_download_default_params(struct hf_download_params *p)
{
    memset(p, 0, sizeof *p);
    p->retries = 3;
}

/* ---- paths ---------------------------------------------------------------- */

cbx_status hf_cache_root(char *buf, size_t n)
{
    if (!buf || !n) return CBX_ERR_INVALID_ARG;
    /* XDG base directory spec: a relative $XDG_CACHE_HOME is ignored */
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    int k;
    if (xdg && xdg[0] == '/')
        k = snprintf(buf, n, "%s/chatterbox", xdg);
    else if (home && home[0])
        k = snprintf(buf, n, "%s/.cache/chatterbox", home);
    else
        return CBX_ERR_NOT_FOUND;
    return k < 0 || (size_t)k >= n ? CBX_ERR_INVALID_ARG : CBX_OK;
}

cbx_status hf_cache_model_dir(const char *variant, char *buf, size_t n)
{
    const struct variant *v = find_variant(variant);
    if (!v || !buf || !n) return CBX_ERR_INVALID_ARG;
    cbx_status rc = hf_cache_root(buf, n);
    if (rc != CBX_OK) return rc;
    size_t l = strlen(buf);
    int k = snprintf(buf + l, n - l, "/%s", v->hf_cache_subdir);
    return k < 0 || (size_t)k >= n - l ? CBX_ERR_INVALID_ARG : CBX_OK;
}

static int64_t file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) || !S_ISREG(st.st_mode) ? -1 : (int64_t)st.st_size;
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* ---- manifest ------------------------------------------------------------- */

static char *slurp(const char *path, size_t max)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = malloc(max + 1);
    size_t k = buf ? fread(buf, 1, max, f) : 0;
    fclose(f);
    if (buf) buf[k] = 0;
    return buf;
}

/* Invariant 3; variant NULL: any. */
static bool manifest_complete(const char *dir, const char *variant)
{
    char path[4200];
    if (!dir || snprintf(path, sizeof path, "%s/%s", dir, HF_MANIFEST_NAME) >= (int)sizeof path)
        return false;
    char *text = slurp(path, 1 << 20);
    cJSON *j = text ? cJSON_Parse(text) : NULL;
    free(text);
    const cJSON *files = cJSON_GetObjectItemCaseSensitive(j, "files"), *f;
    const cJSON *var = cJSON_GetObjectItemCaseSensitive(j, "variant");
    bool ok = cJSON_IsArray(files) && cJSON_GetArraySize(files) > 0 &&
              (!variant || (cJSON_IsString(var) && !strcmp(var->valuestring, variant)));
    cJSON_ArrayForEach(f, files) {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(f, "name");
        const cJSON *size = cJSON_GetObjectItemCaseSensitive(f, "size");
        if (!ok || !cJSON_IsString(name) || !cJSON_IsNumber(size) || strchr(name->valuestring, '/') ||
            snprintf(path, sizeof path, "%s/%s", dir, name->valuestring) >= (int)sizeof path ||
            file_size(path) != (int64_t)size->valuedouble) {
            ok = false;
            break;
        }
    }
    cJSON_Delete(j);
    return ok;
}

bool hf_snapshot_complete(const char *dir) { return manifest_complete(dir, NULL); }

/* ---- one snapshot ----------------------------------------------------------- */

struct hf_file {
    const char *name;  /* borrowed from the variant table */
    int64_t size;
    char sha256[65];   /* "" for non-LFS files (git blobs: size check only) */
};

struct session {
    const struct variant *v;
    const char *dir, *endpoint, *token, *revision;
    const struct hf_download_params *p;
    CURL *curl;
    struct curl_slist *headers;
    char curl_err[CURL_ERROR_SIZE];
    char commit[96];
    struct hf_file files[2 * MAX_FILES];
    int n_files;
};

static void emit(struct session *s, enum hf_event ev, int index, int64_t done, int64_t total,
                 int64_t resumed_from, double seconds, int attempt)
{
    if (!s->p->progress) return;
    struct hf_progress pr = {ev, s->v->hf_repo, s->commit, index >= 0 ? s->files[index].name : NULL,
                             index, s->n_files, done, total, resumed_from, seconds, attempt};
    s->p->progress(s->p->user, &pr);
}

/* The URL without its query (CDN URLs carry long signatures). */
static void short_url(CURL *c, const char *fallback, char *out, size_t n)
{
    char *u = NULL;
    curl_easy_getinfo(c, CURLINFO_EFFECTIVE_URL, &u);
    snprintf(out, n, "%s", u ? u : fallback);
    out[strcspn(out, "?")] = 0;
}

/* One line for a failed request: the network condition a user can act on. */
static cbx_status request_error(struct session *s, CURLcode rc, const char *url, char *err)
{
    char u[2048], host[256] = "";
    short_url(s->curl, url, u, sizeof u);
    const char *h = strstr(u, "://");
    h = h ? h + 3 : u;
    snprintf(host, sizeof host, "%.*s", (int)strcspn(h, "/"), h);
    long code = 0;
    curl_easy_getinfo(s->curl, CURLINFO_RESPONSE_CODE, &code);
    const char *detail = s->curl_err[0] ? s->curl_err : curl_easy_strerror(rc);
    switch (rc) {
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
        return err_setf(err, CBX_ERR_IO, "cannot resolve host '%s' (offline? check the network or HF_ENDPOINT)",
                        host);
    case CURLE_COULDNT_CONNECT:
    {
        long os = 0;
        curl_easy_getinfo(s->curl, CURLINFO_OS_ERRNO, &os);
        return err_setf(err, CBX_ERR_IO, "cannot connect to %s: %s (offline? check the network or HF_ENDPOINT)",
                        host, os ? strerror((int)os) : detail);
    }
    case CURLE_OPERATION_TIMEDOUT:
        return err_setf(err, CBX_ERR_IO, "timed out talking to %s: %s", host, detail);
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CACERT_BADFILE:
        return err_setf(err, CBX_ERR_IO, "TLS error with %s: %s", host, detail);
    case CURLE_HTTP_RETURNED_ERROR:
        break;
    default:
        return err_setf(err, CBX_ERR_IO, "request to %s failed: %s", u, detail);
    }
    if (code == 401 || code == 403) {
        if (s->token && s->token[0])
            return err_setf(err, CBX_ERR_IO,
                            "HTTP %ld for %s: the token in HF_TOKEN was refused (check it, and that it "
                            "may read %s; gated models need their terms accepted on the Hub)",
                            code, u, s->v->hf_repo);
        return err_setf(err, CBX_ERR_IO,
                        "HTTP %ld for %s: access denied; set HF_TOKEN to a Hugging Face access token "
                        "that may read %s",
                        code, u, s->v->hf_repo);
    }
    if (code == 404)
        return err_setf(err, CBX_ERR_NOT_FOUND,
                        "HTTP 404 for %s: not found (check HF_ENDPOINT and --revision; a private repo "
                        "answers 404 without HF_TOKEN)",
                        u);
    return err_setf(err, CBX_ERR_IO, "HTTP %ld for %s", code, u);
}

struct membuf {
    char *data;
    size_t n, cap, max;
};

static size_t mem_write(char *ptr, size_t size, size_t nmemb, void *user)
{
    struct membuf *m = user;
    size_t k = size * nmemb;
    if (m->n + k > m->max) return 0;
    if (m->n + k + 1 > m->cap) {
        size_t cap = 2 * (m->n + k + 1);
        char *d = realloc(m->data, cap);
        if (!d) return 0;
        m->data = d;
        m->cap = cap;
    }
    memcpy(m->data + m->n, ptr, k);
    m->n += k;
    m->data[m->n] = 0;
    return k;
}

static void curl_reset(struct session *s)
{
    curl_easy_reset(s->curl);
    s->curl_err[0] = 0;
    curl_easy_setopt(s->curl, CURLOPT_ERRORBUFFER, s->curl_err);
    curl_easy_setopt(s->curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(s->curl, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(s->curl, CURLOPT_MAXREDIRS, 10L);
    curl_easy_setopt(s->curl, CURLOPT_FAILONERROR, 1L);
    curl_easy_setopt(s->curl, CURLOPT_CONNECTTIMEOUT, 30L);
    /* a stalled transfer (< 1 KB/s for a minute) is a dropped one */
    curl_easy_setopt(s->curl, CURLOPT_LOW_SPEED_LIMIT, 1024L);
    curl_easy_setopt(s->curl, CURLOPT_LOW_SPEED_TIME, 60L);
    curl_easy_setopt(s->curl, CURLOPT_USERAGENT, "chatterbox.c/" CBX_VERSION_STRING);
    curl_easy_setopt(s->curl, CURLOPT_HTTPHEADER, s->headers);
}

/* GET the listing and pick the variant's files from it. */
static cbx_status list_files(struct session *s, char *err)
{
    cbx_status rc = CBX_OK;
    struct membuf m = {NULL, 0, 0, 64u << 20};
    cJSON *j = NULL;
    char url[2048];
    char *rev = curl_easy_escape(s->curl, s->revision, 0);
    if (!rev) return err_setf(err, CBX_ERR_NOMEM, "out of memory");
    snprintf(url, sizeof url, "%s/api/models/%s/revision/%s?blobs=true", s->endpoint, s->v->hf_repo, rev);
    curl_free(rev);

    curl_reset(s);
    curl_easy_setopt(s->curl, CURLOPT_URL, url);
    curl_easy_setopt(s->curl, CURLOPT_WRITEFUNCTION, mem_write);
    curl_easy_setopt(s->curl, CURLOPT_WRITEDATA, &m);
    CURLcode c = curl_easy_perform(s->curl);
    if (c != CURLE_OK) {
        rc = request_error(s, c, url, err);
        goto cleanup;
    }
    j = m.data ? cJSON_Parse(m.data) : NULL;
    const cJSON *sha = cJSON_GetObjectItemCaseSensitive(j, "sha");
    const cJSON *sib = cJSON_GetObjectItemCaseSensitive(j, "siblings");
    if (!cJSON_IsArray(sib)) {
        rc = err_setf(err, CBX_ERR_FORMAT, "%s: not a Hugging Face model listing (no \"siblings\" array)", url);
        goto cleanup;
    }
    /* resolve every file at the listed commit (a 40-hex sha), else at rev */
    snprintf(s->commit, sizeof s->commit, "%s",
             cJSON_IsString(sha) && strlen(sha->valuestring) < sizeof s->commit &&
                     !strpbrk(sha->valuestring, "/?#% ")
                 ? sha->valuestring
                 : s->revision);

    for (int pass = 0; pass < 2; pass++) {
        const char *const *names = pass ? s->v->download_optional : s->v->download_required;
        for (int i = 0; names[i]; i++) {
            const cJSON *e, *found = NULL;
            cJSON_ArrayForEach(e, sib) {
                const cJSON *fn = cJSON_GetObjectItemCaseSensitive(e, "rfilename");
                if (cJSON_IsString(fn) && !strcmp(fn->valuestring, names[i])) found = e;
            }
            if (!found) {
                if (pass) continue;
                rc = err_setf(err, CBX_ERR_NOT_FOUND, "%s@%s has no file %s (needed by the %s variant)",
                              s->v->hf_repo, s->commit, names[i], s->v->name);
                goto cleanup;
            }
            const cJSON *size = cJSON_GetObjectItemCaseSensitive(found, "size");
            const cJSON *lfs = cJSON_GetObjectItemCaseSensitive(found, "lfs");
            const cJSON *lsize = cJSON_GetObjectItemCaseSensitive(lfs, "size");
            const cJSON *lsha = cJSON_GetObjectItemCaseSensitive(lfs, "sha256");
            struct hf_file *f = &s->files[s->n_files];
            f->name = names[i];
            f->size = cJSON_IsNumber(lsize) ? (int64_t)lsize->valuedouble
                      : cJSON_IsNumber(size) ? (int64_t)size->valuedouble
                                             : -1;
            f->sha256[0] = 0;
            if (cJSON_IsString(lsha)) {
                size_t n = strlen(lsha->valuestring);
                if (n != 64 || strspn(lsha->valuestring, "0123456789abcdef") != 64) {
                    rc = err_setf(err, CBX_ERR_FORMAT, "%s: %s has a malformed lfs.sha256 '%.80s'", url,
                                  names[i], lsha->valuestring);
                    goto cleanup;
                }
                memcpy(f->sha256, lsha->valuestring, 65);
            }
            if (f->size < 0) {
                rc = err_setf(err, CBX_ERR_FORMAT, "%s: no size for %s in the listing", url, names[i]);
                goto cleanup;
            }
            s->n_files++;
        }
    }

cleanup:
    cJSON_Delete(j);
    free(m.data);
    return rc;
}

/* Transfer state of one file. */
struct xfer {
    struct session *s;
    int index;
    FILE *f;
    struct sha256 sha;
    int64_t have, total, start;
    int write_errno, too_big, checked;
    double t0, last_emit;
};

static size_t file_write(char *ptr, size_t size, size_t nmemb, void *user)
{
    struct xfer *x = user;
    size_t k = size * nmemb;
    if (!x->checked) {
        /* a 200 to a Range request is the whole file: start over */
        long code = 0;
        curl_easy_getinfo(x->s->curl, CURLINFO_RESPONSE_CODE, &code);
        if (x->have > 0 && code != 206) {
            if (fflush(x->f) || ftruncate(fileno(x->f), 0)) {
                x->write_errno = errno;
                return 0;
            }
            sha256_init(&x->sha);
            x->have = x->start = 0;
        }
        x->checked = 1;
    }
    if (x->have + (int64_t)k > x->total) {
        x->too_big = 1;
        return 0;
    }
    if (fwrite(ptr, 1, k, x->f) != k) {
        x->write_errno = errno ? errno : EIO;
        return 0;
    }
    sha256_update(&x->sha, ptr, k);
    x->have += (int64_t)k;
    return k;
}

static int file_progress(void *user, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                         curl_off_t ulnow)
{
    (void)dltotal; (void)dlnow; (void)ultotal; (void)ulnow;
    struct xfer *x = user;
    double t = now_s();
    if (t - x->last_emit >= 0.1) {
        x->last_emit = t;
        emit(x->s, HF_EV_BYTES, x->index, x->have, x->total, x->start, t - x->t0, 0);
    }
    return 0;
}

/* Hash what an earlier run left in the .part (appending continues it). */
static cbx_status hash_prefix(struct xfer *x, const char *part, char *err)
{
    enum { CHUNK = 1 << 20 };
    sha256_init(&x->sha);
    if (x->have == 0) return CBX_OK;
    char *buf = malloc(CHUNK);
    if (!buf) return err_setf(err, CBX_ERR_NOMEM, "out of memory");
    cbx_status rc = CBX_OK;
    int64_t left = x->have;
    if (fseek(x->f, 0, SEEK_SET)) left = -1;
    while (left > 0) {
        size_t want = left < CHUNK ? (size_t)left : CHUNK;
        size_t k = fread(buf, 1, want, x->f);
        if (k != want) break;
        sha256_update(&x->sha, buf, k);
        left -= (int64_t)k;
    }
    if (left != 0) rc = err_setf(err, CBX_ERR_IO, "cannot read %s: %s", part, strerror(errno ? errno : EIO));
    free(buf);
    return rc;
}

static bool transient(CURLcode c, long code)
{
    switch (c) {
    case CURLE_PARTIAL_FILE:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
        return true;
    case CURLE_HTTP_RETURNED_ERROR:
        return code == 429 || code >= 500;
    default:
        return false;
    }
}

static cbx_status fetch_file(struct session *s, int index, char *err)
{
    const struct hf_file *hf = &s->files[index];
    char path[4200], part[4300], url[2048], got[65];
    struct xfer x = {.s = s, .index = index, .total = hf->size};
    cbx_status rc = CBX_OK;
    snprintf(path, sizeof path, "%s/%s", s->dir, hf->name);
    snprintf(part, sizeof part, "%s.part", path);

    if (file_size(path) == hf->size) {
        emit(s, HF_EV_PRESENT, index, hf->size, hf->size, hf->size, 0, 0);
        return CBX_OK;
    }
    char *name = curl_easy_escape(s->curl, hf->name, 0);
    if (!name) return err_setf(err, CBX_ERR_NOMEM, "out of memory");
    snprintf(url, sizeof url, "%s/%s/resolve/%s/%s", s->endpoint, s->v->hf_repo, s->commit, name);
    curl_free(name);

    int64_t hashed = -1; /* bytes of the .part the sha state covers */
    for (int attempt = 0;; attempt++) {
        /* "a" + read: writes always append to what is there (invariant 1) */
        x.f = fopen(part, "a+b");
        if (!x.f) {
            rc = err_setf(err, CBX_ERR_IO, "cannot open %s: %s", part, strerror(errno));
            goto cleanup;
        }
        struct stat st;
        x.have = fstat(fileno(x.f), &st) ? 0 : (int64_t)st.st_size;
        if (x.have > hf->size) {
            if (ftruncate(fileno(x.f), 0)) {
                rc = err_setf(err, CBX_ERR_IO, "cannot truncate %s: %s", part, strerror(errno));
                goto cleanup;
            }
            x.have = 0;
            hashed = -1;
        }
        /* a retry continues the state the previous attempt left */
        if (hashed != x.have && (rc = hash_prefix(&x, part, err)) != CBX_OK) goto cleanup;
        x.start = x.have;
        x.checked = x.too_big = x.write_errno = 0;
        x.t0 = now_s();
        x.last_emit = 0;
        if (attempt == 0) emit(s, HF_EV_START, index, x.have, x.total, x.start, 0, 0);

        CURLcode c = CURLE_OK;
        long code = 0;
        if (x.have < x.total) {
            char range[64];
            curl_reset(s);
            curl_easy_setopt(s->curl, CURLOPT_URL, url);
            curl_easy_setopt(s->curl, CURLOPT_WRITEFUNCTION, file_write);
            curl_easy_setopt(s->curl, CURLOPT_WRITEDATA, &x);
            curl_easy_setopt(s->curl, CURLOPT_XFERINFOFUNCTION, file_progress);
            curl_easy_setopt(s->curl, CURLOPT_XFERINFODATA, &x);
            curl_easy_setopt(s->curl, CURLOPT_NOPROGRESS, 0L);
            if (x.have > 0) {
                snprintf(range, sizeof range, "%lld-", (long long)x.have);
                curl_easy_setopt(s->curl, CURLOPT_RANGE, range);
            }
            c = curl_easy_perform(s->curl);
            curl_easy_getinfo(s->curl, CURLINFO_RESPONSE_CODE, &code);
        }
        int flush_errno = fflush(x.f) ? errno : 0;
        int close_errno = fclose(x.f) ? errno : 0;
        x.f = NULL;
        int werr = x.write_errno ? x.write_errno : flush_errno ? flush_errno : close_errno;
        if (werr) {
            rc = err_setf(err, CBX_ERR_IO, "cannot write %s: %s%s", part, strerror(werr),
                          werr == ENOSPC ? " (disk full: free some space and run again to resume)" : "");
            goto cleanup;
        }
        if (x.too_big) {
            unlink(part);
            rc = err_setf(err, CBX_ERR_FORMAT, "%s: the server sent more than the %lld bytes the listing gives (removed)",
                          hf->name, (long long)hf->size);
            goto cleanup;
        }
        hashed = x.have;
        if (c == CURLE_OK && x.have < x.total) c = CURLE_PARTIAL_FILE; /* closed early, no length */
        if (c == CURLE_HTTP_RETURNED_ERROR && code == 416 && attempt < s->p->retries) {
            /* the .part does not fit the file the server has: start over */
            if (truncate(part, 0)) {
                rc = err_setf(err, CBX_ERR_IO, "cannot truncate %s: %s", part, strerror(errno));
                goto cleanup;
            }
            hashed = -1;
            continue;
        }
        if (c != CURLE_OK) {
            if (transient(c, code) && attempt < s->p->retries) {
                emit(s, HF_EV_RETRY, index, x.have, x.total, x.start, now_s() - x.t0, attempt + 1);
                sleep((unsigned)(attempt + 1));
                continue;
            }
            if (c == CURLE_PARTIAL_FILE || c == CURLE_RECV_ERROR || c == CURLE_GOT_NOTHING ||
                c == CURLE_SEND_ERROR || c == CURLE_OPERATION_TIMEDOUT) {
                rc = err_setf(err, CBX_ERR_IO,
                              "connection dropped while downloading %s at %lld of %lld bytes (%s); kept in "
                              "%s.part, run again to resume",
                              hf->name, (long long)x.have, (long long)x.total,
                              s->curl_err[0] ? s->curl_err : curl_easy_strerror(c), hf->name);
                goto cleanup;
            }
            rc = request_error(s, c, url, err);
            goto cleanup;
        }
        break;
    }

    /* complete: verify, then the final name (invariant 1) */
    if (hf->sha256[0]) {
        uint8_t d[SHA256_DIGEST_SIZE];
        sha256_final(&x.sha, d);
        sha256_hex(d, got);
        if (strcmp(got, hf->sha256)) {
            unlink(part);
            rc = err_setf(err, CBX_ERR_FORMAT,
                          "checksum mismatch for %s: sha256 %s, the listing says %s (the file was removed; "
                          "run again)",
                          hf->name, got, hf->sha256);
            goto cleanup;
        }
    }
    if (rename(part, path)) {
        rc = err_setf(err, CBX_ERR_IO, "cannot rename %s to %s: %s", part, path, strerror(errno));
        goto cleanup;
    }
    emit(s, HF_EV_DONE, index, x.have, x.total, x.start, now_s() - x.t0, 0);

cleanup:
    if (x.f) fclose(x.f);
    return rc;
}

static cbx_status check_space(struct session *s, char *err)
{
    int64_t need = 0;
    char path[4300];
    for (int i = 0; i < s->n_files; i++) {
        snprintf(path, sizeof path, "%s/%s", s->dir, s->files[i].name);
        if (file_size(path) == s->files[i].size) continue;
        snprintf(path, sizeof path, "%s/%s.part", s->dir, s->files[i].name);
        int64_t have = file_size(path);
        need += s->files[i].size - (have > 0 && have <= s->files[i].size ? have : 0);
    }
    struct statvfs fs;
    if (statvfs(s->dir, &fs)) return CBX_OK; /* unknown: the writes will tell */
    int64_t avail = (int64_t)fs.f_bavail * (int64_t)fs.f_frsize;
    if (need > avail)
        return err_setf(err, CBX_ERR_IO, "not enough disk space in %s: %.2f GB needed, %.2f GB free", s->dir,
                        need / 1e9, avail / 1e9);
    return CBX_OK;
}

static cbx_status write_manifest(struct session *s, char *err)
{
    cbx_status rc = CBX_OK;
    char path[4200], tmp[4300];
    char *text = NULL;
    FILE *f = NULL;
    cJSON *j = cJSON_CreateObject(), *files = NULL;
    if (!j || !cJSON_AddStringToObject(j, "variant", s->v->name) ||
        !cJSON_AddStringToObject(j, "repo", s->v->hf_repo) || !cJSON_AddStringToObject(j, "commit", s->commit) ||
        !cJSON_AddStringToObject(j, "endpoint", s->endpoint) || !(files = cJSON_AddArrayToObject(j, "files"))) {
        rc = err_setf(err, CBX_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    for (int i = 0; i < s->n_files; i++) {
        cJSON *e = cJSON_CreateObject();
        if (!e || !cJSON_AddItemToArray(files, e) || !cJSON_AddStringToObject(e, "name", s->files[i].name) ||
            !cJSON_AddNumberToObject(e, "size", (double)s->files[i].size) ||
            (s->files[i].sha256[0] && !cJSON_AddStringToObject(e, "sha256", s->files[i].sha256))) {
            rc = err_setf(err, CBX_ERR_NOMEM, "out of memory");
            goto cleanup;
        }
    }
    text = cJSON_Print(j);
    if (!text) {
        rc = err_setf(err, CBX_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    snprintf(path, sizeof path, "%s/%s", s->dir, HF_MANIFEST_NAME);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    f = fopen(tmp, "wb");
    if (!f || fputs(text, f) < 0 || fputc('\n', f) == EOF) {
        rc = err_setf(err, CBX_ERR_IO, "cannot write %s: %s", tmp, strerror(errno));
        goto cleanup;
    }
    int e = fclose(f) ? errno : 0;
    f = NULL;
    if (e || rename(tmp, path)) {
        rc = err_setf(err, CBX_ERR_IO, "cannot write %s: %s", path, strerror(e ? e : errno));
        unlink(tmp);
        goto cleanup;
    }

cleanup:
    if (f) {
        fclose(f);
        unlink(tmp);
    }
    free(text);
    cJSON_Delete(j);
    return rc;
}

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc = CURLE_FAILED_INIT;
static void curl_init(void) { curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT); }

cbx_status hf_download_snapshot(const char *variant, const char *dir, const struct hf_download_params *p,
                                char *err)
{
    cbx_status rc = CBX_OK;
    struct hf_download_params defaults;
    struct session *s = NULL;
    char cache[4096], auth[4200];
    int dfd = -1;

    const struct variant *v = find_variant(variant);
    if (!v)
        return err_setf(err, CBX_ERR_INVALID_ARG,
                        "unknown variant '%s' (%s; multilingual = mtl-v2)", variant ? variant : "",
                        variant_names());
    if (!p) {
        hf_download_default_params(&defaults);
        p = &defaults;
    }
    if (!dir) {
        cbx_status c = hf_cache_model_dir(variant, cache, sizeof cache);
        if (c != CBX_OK)
            return err_setf(err, c, "no cache directory: set XDG_CACHE_HOME or HOME, or give a directory");
        dir = cache;
    }
    if ((rc = io_mkdir_p(dir, err)) != CBX_OK) return rc;

    /* invariant 4 */
    dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) return err_setf(err, CBX_ERR_IO, "cannot open %s: %s", dir, strerror(errno));
    if (flock(dfd, LOCK_EX | LOCK_NB)) {
        rc = err_setf(err, CBX_ERR_INVALID_ARG, "another download into %s is running", dir);
        goto cleanup;
    }
    if (manifest_complete(dir, v->name)) goto cleanup; /* invariant 3 */

    s = calloc(1, sizeof *s);
    if (!s) {
        rc = err_setf(err, CBX_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    s->v = v;
    s->p = p;
    s->dir = dir;
    s->endpoint = p->endpoint ? p->endpoint : getenv("HF_ENDPOINT");
    if (!s->endpoint || !s->endpoint[0]) s->endpoint = "https://huggingface.co";
    s->token = p->token ? p->token : getenv("HF_TOKEN");
    s->revision = p->revision && p->revision[0] ? p->revision : "main";
    char endpoint[2048];
    snprintf(endpoint, sizeof endpoint, "%s", s->endpoint);
    for (size_t n = strlen(endpoint); n > 0 && endpoint[n - 1] == '/'; n--) endpoint[n - 1] = 0;
    s->endpoint = endpoint;

    pthread_once(&curl_once, curl_init);
    if (curl_init_rc != CURLE_OK || !(s->curl = curl_easy_init())) {
        rc = err_setf(err, CBX_ERR_INTERNAL, "libcurl initialisation failed");
        goto cleanup;
    }
    if (s->token && s->token[0]) {
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", s->token);
        if (!(s->headers = curl_slist_append(NULL, auth))) {
            rc = err_setf(err, CBX_ERR_NOMEM, "out of memory");
            goto cleanup;
        }
    }

    if ((rc = list_files(s, err)) != CBX_OK) goto cleanup;
    int64_t total = 0;
    for (int i = 0; i < s->n_files; i++) total += s->files[i].size;
    emit(s, HF_EV_LISTED, -1, 0, total, 0, 0, 0);
    if ((rc = check_space(s, err)) != CBX_OK) goto cleanup;
    for (int i = 0; i < s->n_files; i++)
        if ((rc = fetch_file(s, i, err)) != CBX_OK) goto cleanup;
    rc = write_manifest(s, err);

cleanup:
    if (s) {
        if (s->curl) curl_easy_cleanup(s->curl);
        curl_slist_free_all(s->headers);
        free(s);
    }
    if (dfd >= 0) close(dfd); /* releases the lock */
    return rc;
}
