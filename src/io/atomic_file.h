/* atomic_file.h - a file written under a temporary name beside its target
 * ("<path>.tmp.<pid>", in the same directory so the final rename is atomic)
 * and renamed onto the target only when complete: a failed or interrupted
 * write never leaves a partial file at `path`.
 *
 * Usage: atomic_file_open, fwrite(af.f, ...), then exactly one of
 * atomic_file_commit (flush, fsync, close, rename) or atomic_file_abort
 * (close, remove the temporary). Both release everything; a zeroed struct
 * may be aborted safely. A target that exists and is not a regular file
 * (/dev/null, a FIFO) is written in place instead: renaming onto it would
 * replace the device. Not thread-safe per object. */
#ifndef CBX_IO_ATOMIC_FILE_H
#define CBX_IO_ATOMIC_FILE_H

#include <stdio.h>

#include "core/error.h"

struct atomic_file {
    FILE *f;    /* open for writing, fully buffered (1 MiB) */
    char *path; /* the target */
    char *tmp;  /* the temporary; NULL once renamed or never created */
};

cbx_status atomic_file_open(struct atomic_file *af, const char *path, char *err);
cbx_status atomic_file_commit(struct atomic_file *af, char *err);
void atomic_file_abort(struct atomic_file *af);

/* mkdir -p: create path and its missing parents (mode 0777 & umask);
 * CBX_ERR_IO naming the directory that could not be made, or when path
 * exists but is not a directory. */
cbx_status io_mkdir_p(const char *path, char *err);

#endif
