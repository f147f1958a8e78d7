/* prefix_cache.h - T3 voice prefixes kept in memory between calls, shared
 * by every call on one model (engine.h, "Voice prefix cache"), with the
 * on-disk store behind it (prefix_store.h).
 *
 * A loaded model is immutable; this cache is the one thing calls on a
 * model share that changes, so it is its own object with its own locks,
 * created with the model and reached through a pointer (no call ever
 * writes to the model itself).
 *
 * Rules:
 *  1. Entries are keyed by content: the model and the conditioning
 *     (speaker embedding, prompt tokens, emotion; t3_prefix_matches), never
 *     by the address of a voice.
 *  2. At most `capacity` entries are in the table; a new one replaces the
 *     least recently used. capacity 0: nothing is kept, yet acquire still
 *     hands out a prefix (built or loaded for the caller, freed on
 *     release).
 *  3. An acquired entry is read-only (but for the unconditional tail of
 *     CFG prefixes, which grows under its own lock, t3.h) and stays valid
 *     until its holder
 *     releases it, even when it has left the table meanwhile (replaced or
 *     cleared): entries are reference counted and freed by the last
 *     release.
 *  4. A prefix is built or loaded outside the lock (it takes up to a
 *     second); two calls missing on the same voice at once may both build
 *     it, and the second to finish takes the first one's entry (both
 *     copies are bit-identical, t3.h).
 *  5. With a store directory, a miss looks there before building, and a
 *     prefix built here is written there once, by prefix_cache_persist
 *     (callers run it after their audio is out); saves are serialised.
 * Thread safety: every function may be called from any thread at any time
 * except prefix_cache_free, which needs every entry released. */
#ifndef CBX_PIPELINE_PREFIX_CACHE_H
#define CBX_PIPELINE_PREFIX_CACHE_H

#include <stdbool.h>

#include "core/error.h"

struct backend;
struct t3_model;
struct t3_cond;
struct t3_prefix;
struct prefix_cache;
struct prefix_cache_ent; /* an acquired entry */

/* Where an acquired prefix came from. */
enum { PREFIX_CACHE_BUILT, PREFIX_CACHE_MEMORY, PREFIX_CACHE_DISK };

/* A cache of up to capacity (>= 0) prefixes of model m (borrowed; it must
 * outlive the cache), backed by directory dir when not NULL or "" (the
 * string is copied). NULL: out of memory. */
struct prefix_cache *prefix_cache_create(const struct t3_model *m, int capacity, const char *dir);
void prefix_cache_free(struct prefix_cache *pc); /* no-op on NULL */
int prefix_cache_capacity(const struct prefix_cache *pc);

/* The prefix of conditioning c: from memory, else from the store, else
 * built on be. *src: PREFIX_CACHE_*; *t: seconds spent loading or
 * building (0 on a hit); note: why a file of the store could not be used
 * ("" when nothing went wrong). Release with prefix_cache_release. */
cbx_status prefix_cache_acquire(struct prefix_cache *pc, const struct backend *be, const struct t3_cond *c,
                                struct prefix_cache_ent **out, int *src, double *t, char *note, char *err);
const struct t3_prefix *prefix_cache_prefix(const struct prefix_cache_ent *e);
/* Write e's prefix to the store when it was built by this process and is
 * not there yet (once per entry). A failure is not the caller's: it lands
 * in note. Returns whether a file was written. */
bool prefix_cache_persist(struct prefix_cache *pc, struct prefix_cache_ent *e, char *note);
void prefix_cache_release(struct prefix_cache *pc, struct prefix_cache_ent *e); /* no-op on NULL */
/* Empty the table (entries in use are freed by their last release). */
void prefix_cache_clear(struct prefix_cache *pc);

#endif
