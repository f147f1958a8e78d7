/* hf_download.h - fetch the official Chatterbox snapshot of a variant from
 * the Hugging Face Hub (libcurl), into the download cache or a directory.
 *
 * Protocol (what huggingface_hub's snapshot_download does, restricted to
 * the files our loaders read, spec/overview.md §3):
 *   GET {endpoint}/api/models/{repo}/revision/{rev}?blobs=true
 *       -> {"sha": commit, "siblings": [{"rfilename", "size",
 *           "lfs": {"sha256", "size"}?}, ...]}
 *   GET {endpoint}/{repo}/resolve/{commit}/{file}   (LFS files redirect to
 *       a CDN; redirects are followed, the token is not sent to other hosts)
 * Every file of one snapshot is resolved at the commit the listing named,
 * so a push during the download cannot mix revisions.
 *
 * Invariants:
 *  1. A file appears under its final name only after its size (and, for
 *     LFS files, its sha256) matched the listing; until then it is
 *     `<file>.part`, which a later call resumes with an HTTP Range request
 *     (a server that ignores the Range restarts it from zero).
 *  2. A mismatching file is removed; a dropped connection keeps the .part.
 *  3. When every file is in place, `.chatterbox-download.json` (files,
 *     sizes, sha256, commit, variant) is written last; a directory with a
 *     manifest of the same variant whose files all have their sizes is
 *     complete and is not fetched again (no network access at all).
 *  4. One download per directory at a time (flock on the directory).
 *
 * Variants (by name or alias, io/variant.h), their repositories, files and
 * default directories (under the cache, $XDG_CACHE_HOME/chatterbox, else
 * ~/.cache/chatterbox) are the rows' hf_repo, download_* and
 * hf_cache_subdir:
 *   turbo                   ResembleAI/chatterbox-turbo   <cache>/ResembleAI/chatterbox-turbo
 *   nano                    ResembleAI/chatterbox-nano    <cache>/ResembleAI/chatterbox-nano
 *   english                 ResembleAI/chatterbox         <cache>/ResembleAI/chatterbox
 *   mtl-v2 (multilingual)   ResembleAI/chatterbox         <cache>/ResembleAI/chatterbox-multilingual
 *   mtl-v3                  ResembleAI/chatterbox         <cache>/ResembleAI/chatterbox-multilingual-v3
 * Variants sharing a repository get a directory each, so model_dir_open()
 * detects the variant of any without ambiguity. The manifest records the
 * row's name.
 *
 * Environment: HF_ENDPOINT (default https://huggingface.co), HF_TOKEN
 * (sent as "Authorization: Bearer ..."), XDG_CACHE_HOME, HOME.
 *
 * Thread safety: hf_download_snapshot may run concurrently for different
 * directories (a second call on the same directory fails at once); the
 * other functions: any thread, concurrently. */
#ifndef CBX_IO_HF_DOWNLOAD_H
#define CBX_IO_HF_DOWNLOAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

/* Name of the manifest written into a complete snapshot directory. */
#define HF_MANIFEST_NAME ".chatterbox-download.json"

enum hf_event {
    HF_EV_LISTED,   /* listing fetched: count files, total bytes in `total` */
    HF_EV_PRESENT,  /* file already in place with the right size: skipped */
    HF_EV_START,    /* transfer of `file` starts (resumed_from > 0: resume) */
    HF_EV_BYTES,    /* bytes arrived (at most ~10 calls per second) */
    HF_EV_RETRY,    /* connection dropped; resuming (attempt counts from 1) */
    HF_EV_DONE,     /* file verified and in place */
};

struct hf_progress {
    enum hf_event event;
    const char *repo, *commit; /* borrowed, valid during the callback */
    const char *file;          /* repo-relative name; NULL for HF_EV_LISTED */
    int index, count;          /* index of this file (0-based) of count */
    int64_t done, total;       /* bytes of this file on disk / expected */
    int64_t resumed_from;      /* bytes already on disk when this transfer began */
    double seconds;            /* since this file's transfer began */
    int attempt;               /* HF_EV_RETRY: retry number, from 1 */
};

struct hf_download_params {
    const char *endpoint; /* NULL: $HF_ENDPOINT, else https://huggingface.co */
    const char *token;    /* NULL: $HF_TOKEN; "" sends none */
    const char *revision; /* branch, tag or commit; NULL: "main" */
    int retries;          /* resumes per file after a dropped connection (3) */
    /* Called on the calling thread; may be NULL. */
    void (*progress)(void *user, const struct hf_progress *p);
    void *user;
};

/* Defaults: endpoint/token from the environment, revision "main",
 * 3 retries, no callback. Thread safety: any thread. */
void hf_download_default_params(struct hf_download_params *p);

/* Repository of a variant name or alias (io/variant.h), or NULL when
 * unknown. Thread safety: any thread. */
const char *hf_variant_repo(const char *variant);

/* chatterbox's cache directory: $XDG_CACHE_HOME/chatterbox (when absolute),
 * else ~/.cache/chatterbox; need not exist. CBX_ERR_NOT_FOUND when neither
 * is set, CBX_ERR_INVALID_ARG when buf is too small. Snapshots live in it
 * (below), and `say` keeps its voice prefixes in <root>/prefixes. */
cbx_status hf_cache_root(char *buf, size_t n);

/* The cache directory of a variant's snapshot (the table above), written
 * into buf (n bytes); the directory need not exist. Returns CBX_OK,
 * CBX_ERR_INVALID_ARG (unknown variant, or buf too small) or
 * CBX_ERR_NOT_FOUND (neither $XDG_CACHE_HOME nor $HOME is set).
 * `say` and `tokens` use it as the default --model: e.g.
 *   if (hf_cache_model_dir("turbo", p, sizeof p) == CBX_OK &&
 *       hf_snapshot_complete(p)) model = p;
 * Thread safety: any thread, concurrently (reads the environment). */
cbx_status hf_cache_model_dir(const char *variant, char *buf, size_t n);

/* True when dir holds a manifest (invariant 3) and every file it lists has
 * its recorded size. Touches no network. Thread safety: any thread. */
bool hf_snapshot_complete(const char *dir);

/* Download the variant's files into dir (NULL: hf_cache_model_dir), creating
 * it; files already in place are kept, a .part is resumed (invariants
 * above). p may be NULL for the defaults. On failure err holds one line:
 * offline (cannot resolve / connect), HTTP 401/403 (with the HF_TOKEN hint),
 * 404, a dropped connection (run again to resume), disk full, checksum or
 * size mismatch (the bad file removed). Returns CBX_ERR_IO for network and
 * disk failures, CBX_ERR_NOT_FOUND for 404 or a file missing from the
 * listing, CBX_ERR_FORMAT for a bad listing or a checksum mismatch,
 * CBX_ERR_INVALID_ARG for a bad variant or a busy directory.
 * Thread safety: see the file comment. */
cbx_status hf_download_snapshot(const char *variant, const char *dir,
                                const struct hf_download_params *p, char *err);

#endif
