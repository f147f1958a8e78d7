/* prefix_store.h - T3 voice prefixes kept on disk between processes.
 *
 * A voice's T3 prefix (t3.h, struct t3_prefix: the keys and values of the
 * speaker + prompt positions) takes ~0.5-0.7 s to build for Turbo's
 * 375-token prompt on a 2-core CPU, and every new process (each `say`)
 * would build it again. The store keeps one file per (model, voice) in a
 * directory, so a process finds the prefix a previous one built:
 *
 *   <dir>/<64 hex digits>.cbxpfx   the digits: SHA-256 of the model id and
 *                                  of the conditioning (speaker embedding,
 *                                  prompt tokens)
 *
 * Model id (prefix_store_model_id): SHA-256 over the library version and
 * build commit, the CPU kernel family (cpu_level, AMX), the cache type and
 * sizes, and the names, types, shapes and sampled bytes (up to 4 spans of
 * 1 KiB each) of every tensor the prefix depends on. A prefix read back is
 * therefore what this build would compute with these weights: the tokens
 * are bit-identical to a freshly built prefix's (tested). The sampling
 * means two checkpoints differing only outside the sampled spans would
 * share files; a fine-tune or a requantisation changes every span.
 *
 * File: a fixed header (magic "CBXPFX1\n", byte-order mark, sizes, model
 * id, the payload's storage type, payload bytes and a 64-bit checksum of
 * the payload), then the speaker embedding (F32), the prompt tokens (I32)
 * and the cache values, byte for byte as the KV cache holds them
 * (gpt2_kv_save: an F16 cache's file holds F16 values, half the bytes of
 * F32; a Q8_0 cache's, the default of quantised models, Q8_0 blocks, about
 * a quarter), so loading one is a copy; for CFG models (English,
 * multilingual) then the unconditional tail the prefix kept when it was
 * saved (t3.h, t3_prefix.unc; header field n_unc, its positions), so a
 * later process's CFG prefill runs the conditional row alone over texts
 * that short (t3.c, "The unconditional tail"). Files are written under
 * a temporary name and renamed (io/atomic_file.h); a file that is short,
 * corrupt, for other sizes or for another model is refused with a message
 * (the engine then builds the prefix and overwrites it). The directory
 * keeps at most PREFIX_STORE_MAX files; saving removes the least recently
 * used beyond that (loading refreshes a file's modification time).
 *
 * Thread safety: the functions keep no state; concurrent saves of the same
 * file from one process must be serialised by the caller (the temporary
 * name is per process). */
#ifndef CBX_PIPELINE_PREFIX_STORE_H
#define CBX_PIPELINE_PREFIX_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "t3/t3.h"

#define PREFIX_STORE_MAX 16
#define PREFIX_STORE_ID_SIZE 32

/* The id of model m as this build computes prefixes with it (host weights). */
void prefix_store_model_id(const struct t3_model *m, uint8_t id[PREFIX_STORE_ID_SIZE]);

/* Path of the file for (id, c) in dir: "<dir>/<hex>.cbxpfx". */
cbx_status prefix_store_path(const char *dir, const uint8_t id[PREFIX_STORE_ID_SIZE],
                             const struct t3_model *m, const struct t3_cond *c, char *buf,
                             size_t n);

/* Parse a file's bytes: a prefix of model m (id) for conditioning c.
 * *out owned by the caller (t3_prefix_free). CBX_ERR_FORMAT (with a
 * message) when the bytes are not such a file. */
cbx_status prefix_store_parse(const void *data, size_t n, const uint8_t id[PREFIX_STORE_ID_SIZE],
                              const struct t3_model *m, const struct t3_cond *c,
                              struct t3_prefix **out, char *err);

/* Load the prefix for (id, c) from dir. CBX_OK with *out NULL when there is
 * no file; CBX_ERR_FORMAT / CBX_ERR_IO when there is one that cannot be
 * used (the caller may build the prefix and save over it). The values stay
 * in a read-only mapping of the file ((*out)->map), checked once here. */
cbx_status prefix_store_load(const char *dir, const uint8_t id[PREFIX_STORE_ID_SIZE],
                             const struct t3_model *m, const struct t3_cond *c,
                             struct t3_prefix **out, char *err);

/* Write p (made with the model of id) into dir, creating dir (and its
 * parents) when missing, then trim the directory to PREFIX_STORE_MAX
 * files. A failure leaves no file behind. */
cbx_status prefix_store_save(const char *dir, const uint8_t id[PREFIX_STORE_ID_SIZE],
                             const struct t3_prefix *p, char *err);

#endif
