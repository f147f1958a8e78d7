/* prefix_cache.c - the shared T3 voice prefix cache (prefix_cache.h states
 * its rules). */
#include "pipeline/prefix_cache.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pipeline/prefix_store.h"
#include "t3/t3.h"

struct prefix_cache_ent {
    struct t3_prefix *p;
    int refs;        /* holders (acquired, not released) */
    uint64_t used;   /* tick of the last use: the least recently used goes */
    bool in_table;
    bool unsaved;    /* built here, not yet written to the store */
};

struct prefix_cache {
    const struct t3_model *m;
    pthread_mutex_t mu;      /* the table, ticks, refs, unsaved flags */
    struct prefix_cache_ent **tab;
    int cap;
    uint64_t tick;
    /* the store: directory or NULL; the model id is computed at the first
     * use under store_mu, which also serialises saves (the temporary file
     * name is per process) */
    char *dir;
    pthread_mutex_t store_mu;
    bool have_id;
    uint8_t id[PREFIX_STORE_ID_SIZE];
};

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

struct prefix_cache *prefix_cache_create(const struct t3_model *m, int capacity, const char *dir)
{
    struct prefix_cache *pc = calloc(1, sizeof *pc);
    if (!pc) return NULL;
    pc->m = m;
    pc->cap = capacity > 0 ? capacity : 0;
    pthread_mutex_init(&pc->mu, NULL);
    pthread_mutex_init(&pc->store_mu, NULL);
    if ((pc->cap > 0 && !(pc->tab = calloc((size_t)pc->cap, sizeof *pc->tab))) ||
        (dir && *dir && !(pc->dir = strdup(dir)))) {
        prefix_cache_free(pc);
        return NULL;
    }
    return pc;
}

static void ent_free(struct prefix_cache_ent *e)
{
    t3_prefix_free(e->p);
    free(e);
}

void prefix_cache_free(struct prefix_cache *pc)
{
    if (!pc) return;
    for (int i = 0; i < pc->cap && pc->tab; i++)
        if (pc->tab[i]) ent_free(pc->tab[i]);
    free(pc->tab);
    free(pc->dir);
    pthread_mutex_destroy(&pc->store_mu);
    pthread_mutex_destroy(&pc->mu);
    free(pc);
}

int prefix_cache_capacity(const struct prefix_cache *pc) { return pc->cap; }

const struct t3_prefix *prefix_cache_prefix(const struct prefix_cache_ent *e) { return e ? e->p : NULL; }

/* The store's model id, computed once. */
static const uint8_t *store_id(struct prefix_cache *pc)
{
    pthread_mutex_lock(&pc->store_mu);
    if (!pc->have_id) {
        prefix_store_model_id(pc->m, pc->id);
        pc->have_id = true;
    }
    pthread_mutex_unlock(&pc->store_mu);
    return pc->id;
}

/* The table's entry for c with a new reference, or NULL; under mu. */
static struct prefix_cache_ent *find_locked(struct prefix_cache *pc, const struct t3_cond *c)
{
    for (int i = 0; i < pc->cap; i++) {
        struct prefix_cache_ent *e = pc->tab[i];
        if (e && t3_prefix_matches(e->p, pc->m, c)) {
            e->refs++;
            e->used = ++pc->tick;
            return e;
        }
    }
    return NULL;
}

cbx_status prefix_cache_acquire(struct prefix_cache *pc, const struct backend *be, const struct t3_cond *c,
                                struct prefix_cache_ent **out, int *src, double *t, char *note, char *err)
{
    *out = NULL;
    *t = 0;
    *src = PREFIX_CACHE_MEMORY;
    note[0] = 0;
    pthread_mutex_lock(&pc->mu);
    *out = find_locked(pc, c);
    pthread_mutex_unlock(&pc->mu);
    if (*out) return CBX_OK;

    /* load or build outside the lock (rule 4) */
    const double t0 = now();
    struct t3_prefix *p = NULL;
    if (pc->dir && prefix_store_load(pc->dir, store_id(pc), pc->m, c, &p, note) != CBX_OK)
        p = NULL; /* unusable file: note says why; built and saved over below */
    *src = p ? PREFIX_CACHE_DISK : PREFIX_CACHE_BUILT;
    cbx_status rc = p ? t3_prefix_place(p, err) : CBX_OK;
    if (rc != CBX_OK) {
        t3_prefix_free(p);
        return rc;
    }
    if (!p && (rc = t3_prefix_build(pc->m, be, c, &p, err)) != CBX_OK) return rc;
    struct prefix_cache_ent *e = calloc(1, sizeof *e);
    if (!e) {
        t3_prefix_free(p);
        return err_setf(err, CBX_ERR_NOMEM, "out of memory");
    }
    *t = now() - t0;
    e->p = p;
    e->refs = 1;
    e->unsaved = pc->dir && *src == PREFIX_CACHE_BUILT;
    pthread_mutex_lock(&pc->mu);
    struct prefix_cache_ent *o = find_locked(pc, c);
    if (o) { /* another call's copy made meanwhile: use that one */
        pthread_mutex_unlock(&pc->mu);
        ent_free(e);
        *out = o;
        return CBX_OK;
    }
    e->used = ++pc->tick;
    int slot = -1; /* an empty slot, else the least recently used */
    for (int i = 0; i < pc->cap; i++) {
        struct prefix_cache_ent *x = pc->tab[i];
        if (!x) {
            if (slot < 0 || pc->tab[slot]) slot = i;
        } else if (slot < 0 || (pc->tab[slot] && x->used < pc->tab[slot]->used)) {
            slot = i;
        }
    }
    struct prefix_cache_ent *gone = NULL;
    if (slot >= 0) {
        struct prefix_cache_ent *x = pc->tab[slot];
        if (x) { /* out of the table; freed now or by its last holder */
            x->in_table = false;
            if (x->refs == 0) gone = x;
        }
        pc->tab[slot] = e;
        e->in_table = true;
    }
    pthread_mutex_unlock(&pc->mu);
    if (gone) ent_free(gone);
    *out = e;
    return CBX_OK;
}

bool prefix_cache_persist(struct prefix_cache *pc, struct prefix_cache_ent *e, char *note)
{
    if (!e || !pc->dir) return false;
    pthread_mutex_lock(&pc->mu);
    const bool todo = e->unsaved;
    e->unsaved = false;
    pthread_mutex_unlock(&pc->mu);
    if (!todo) return false;
    const uint8_t *id = store_id(pc);
    pthread_mutex_lock(&pc->store_mu);
    const cbx_status rc = prefix_store_save(pc->dir, id, e->p, note);
    pthread_mutex_unlock(&pc->store_mu);
    return rc == CBX_OK;
}

void prefix_cache_release(struct prefix_cache *pc, struct prefix_cache_ent *e)
{
    if (!e) return;
    pthread_mutex_lock(&pc->mu);
    const bool gone = --e->refs == 0 && !e->in_table;
    pthread_mutex_unlock(&pc->mu);
    if (gone) ent_free(e);
}

void prefix_cache_clear(struct prefix_cache *pc)
{
    pthread_mutex_lock(&pc->mu);
    for (int i = 0; i < pc->cap; i++) {
        struct prefix_cache_ent *e = pc->tab[i];
        pc->tab[i] = NULL;
        if (!e) continue;
        e->in_table = false;
        if (e->refs == 0) ent_free(e); /* unused: no other thread can reach it */
    }
    pthread_mutex_unlock(&pc->mu);
}
