/* atomic_file.c - write beside, then rename (see atomic_file.h). */
#include "atomic_file.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

cbx_status atomic_file_open(struct atomic_file *af, const char *path, char *err)
{
    memset(af, 0, sizeof *af);
    size_t n = strlen(path) + 32;
    af->path = strdup(path);
    char *tmp = malloc(n);
    if (!af->path || !tmp) {
        free(tmp);
        atomic_file_abort(af);
        return err_setf(err, CBX_ERR_NOMEM, "%s: out of memory", path);
    }
    /* an existing target that is not a regular file (/dev/null, a FIFO) is
     * written in place: a rename would replace the device with a file */
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) {
        free(tmp);
        if (!(af->f = fopen(path, "wb"))) {
            cbx_status rc = err_setf(err, CBX_ERR_IO, "%s: cannot open for writing: %s", path, strerror(errno));
            atomic_file_abort(af);
            return rc;
        }
        setvbuf(af->f, NULL, _IOFBF, (size_t)1 << 20);
        return CBX_OK;
    }
    snprintf(tmp, n, "%s.tmp.%ld", path, (long)getpid());
    af->f = fopen(tmp, "wb");
    if (!af->f) {
        cbx_status rc = err_setf(err, CBX_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
        free(tmp); /* nothing to remove */
        atomic_file_abort(af);
        return rc;
    }
    af->tmp = tmp;
    setvbuf(af->f, NULL, _IOFBF, (size_t)1 << 20); /* many small writes */
    return CBX_OK;
}

cbx_status atomic_file_commit(struct atomic_file *af, char *err)
{
    if (!af->f) return err_setf(err, CBX_ERR_INVALID_ARG, "atomic file: commit without open");
    FILE *f = af->f;
    af->f = NULL;
    /* fsync of a device or pipe written in place may be refused (EINVAL) */
    int bad = fflush(f) != 0 || (fsync(fileno(f)) != 0 && (af->tmp || errno != EINVAL));
    int e = errno;
    if (fclose(f) != 0 && !bad) {
        bad = 1;
        e = errno;
    }
    cbx_status rc = CBX_OK;
    if (bad) {
        rc = err_setf(err, CBX_ERR_IO, "%s: write failed: %s", af->tmp ? af->tmp : af->path, strerror(e));
    } else if (!af->tmp) {
        /* written in place (a device or a pipe): nothing to rename */
    } else if (rename(af->tmp, af->path) != 0) {
        rc = err_setf(err, CBX_ERR_IO, "%s: cannot rename %s onto it: %s", af->path, af->tmp, strerror(errno));
    } else {
        free(af->tmp);
        af->tmp = NULL; /* renamed: nothing to remove */
    }
    atomic_file_abort(af);
    return rc;
}

void atomic_file_abort(struct atomic_file *af)
{
    if (af->f) fclose(af->f);
    if (af->tmp) unlink(af->tmp);
    free(af->tmp);
    free(af->path);
    memset(af, 0, sizeof *af);
}

cbx_status io_mkdir_p(const char *path, char *err)
{
    char p[4096];
    if (snprintf(p, sizeof p, "%s", path) >= (int)sizeof p)
        return err_setf(err, CBX_ERR_INVALID_ARG, "directory name too long: %s", path);
    for (char *s = p + 1;; s++) {
        if (*s != '/' && *s) continue;
        char c = *s;
        *s = 0;
        if (mkdir(p, 0777) && errno != EEXIST)
            return err_setf(err, CBX_ERR_IO, "cannot create directory %s: %s", p, strerror(errno));
        *s = c;
        if (!c) break;
    }
    struct stat st;
    if (stat(path, &st) || !S_ISDIR(st.st_mode))
        return err_setf(err, CBX_ERR_IO, "%s is not a directory", path);
    return CBX_OK;
}
