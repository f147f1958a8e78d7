/* container.c - file mapping and span overlap check for the tensor
 * container readers; see container.h. */
#include "container.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

cbx_status container_map(const char *path, void **map, size_t *len, char *err)
{
    *map = NULL;
    *len = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return err_setf(err, errno == ENOENT ? CBX_ERR_NOT_FOUND : CBX_ERR_IO, "%s: cannot open: %s", path,
                        strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return err_setf(err, CBX_ERR_IO, "%s: not a regular file: %s", path, strerror(e));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return err_setf(err, CBX_ERR_IO, "%s: not a regular file", path);
    }
    if (sb.st_size == 0) {
        close(fd);
        return CBX_OK;
    }
    size_t n = (size_t)sb.st_size;
    void *m = mmap(NULL, n, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (m == MAP_FAILED)
        return err_setf(err, CBX_ERR_IO, "%s: mmap of %zu bytes failed: %s", path, n, strerror(e));
    *map = m;
    *len = n;
    return CBX_OK;
}

static int span_cmp(const void *a, const void *b)
{
    const struct container_span *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

cbx_status container_check_overlap(struct container_span *sp, int n, const struct tensor *t, const char *path,
                                   char *err)
{
    if (n <= 0) return CBX_OK;
    qsort(sp, (size_t)n, sizeof *sp, span_cmp);
    int prev = -1;
    for (int k = 0; k < n; k++) {
        if (sp[k].begin == sp[k].end) continue;
        if (prev >= 0 && sp[k].begin < sp[prev].end)
            return err_setf(err, CBX_ERR_FORMAT, "%s: tensors '%s' [%llu, %llu) and '%s' [%llu, %llu) overlap", path,
                            t[sp[prev].index].name, (unsigned long long)sp[prev].begin,
                            (unsigned long long)sp[prev].end, t[sp[k].index].name, (unsigned long long)sp[k].begin,
                            (unsigned long long)sp[k].end);
        prev = k;
    }
    return CBX_OK;
}
