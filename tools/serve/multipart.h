/* multipart.h - multipart/form-data bodies (RFC 7578) as POST
 * /v1/audio/voices receives them: the boundary from the Content-Type
 * header, then the parts, each a name, an optional file name and content
 * type, and its bytes (pointers into the body, not copies). Fuzzed by
 * tests/fuzz/fuzz_serve_multipart.c. */
#ifndef CBX_SERVE_MULTIPART_H
#define CBX_SERVE_MULTIPART_H

#include <stddef.h>
#include <stdint.h>

#define MULTIPART_MAX_PARTS 16

struct mp_part {
    char name[64];      /* form field name */
    char filename[256]; /* "" when the part is not a file */
    char ctype[128];    /* its Content-Type, "" when absent */
    const uint8_t *data;
    size_t len;
};

/* The boundary parameter of a multipart/form-data Content-Type into
 * boundary (at most 70 characters, RFC 2046). 0 ok, -1 with err. */
int multipart_boundary(const char *content_type, char *boundary, size_t cap, char *err, size_t errlen);

/* Split n bytes at body into at most MULTIPART_MAX_PARTS parts. 0 ok
 * (*n_parts set), -1 with a one-line message in err. */
int multipart_parse(const uint8_t *body, size_t n, const char *boundary, struct mp_part *parts, int *n_parts,
                    char *err, size_t errlen);

/* The first part named name, or NULL. */
const struct mp_part *multipart_find(const struct mp_part *parts, int n_parts, const char *name);

#endif
