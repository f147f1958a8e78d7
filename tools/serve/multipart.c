/* multipart.c - multipart/form-data (RFC 7578, RFC 2046 §5.1.1); see
 * multipart.h. Only what form uploads use: Content-Disposition with name
 * and filename parameters, and Content-Type; other part headers are
 * skipped. Every length is checked against the body's end. */
#include "multipart.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

static int fail(char *err, size_t errlen, const char *msg)
{
    snprintf(err, errlen, "%s", msg);
    return -1;
}

/* memmem without relying on its availability under strict C11 */
static const uint8_t *find(const uint8_t *h, size_t hn, const uint8_t *nd, size_t nn)
{
    if (nn == 0 || hn < nn) return NULL;
    for (size_t i = 0; i + nn <= hn; i++) {
        const uint8_t *p = memchr(h + i, nd[0], hn - nn - i + 1);
        if (!p) return NULL;
        if (!memcmp(p, nd, nn)) return p;
        i = (size_t)(p - h);
    }
    return NULL;
}

/* The value of parameter key (name="..." or name=token) in the header
 * value s[0..n) into out; 0 found, 1 absent, -1 malformed or too long. */
static int param(const char *s, size_t n, const char *key, char *out, size_t cap)
{
    const size_t kl = strlen(key);
    size_t i = 0;
    while (i < n) {
        /* each parameter follows a ';' */
        while (i < n && s[i] != ';') {
            if (s[i] == '"') { /* skip a quoted string */
                for (i++; i < n && s[i] != '"'; i++)
                    if (s[i] == '\\') i++;
            }
            i++;
        }
        if (i >= n) return 1;
        i++;
        while (i < n && (s[i] == ' ' || s[i] == '\t')) i++;
        size_t k0 = i;
        while (i < n && s[i] != '=' && s[i] != ';') i++;
        size_t k1 = i;
        while (k1 > k0 && (s[k1 - 1] == ' ' || s[k1 - 1] == '\t')) k1--;
        if (i >= n || s[i] != '=') continue;
        i++;
        while (i < n && (s[i] == ' ' || s[i] == '\t')) i++;
        int match = k1 - k0 == kl && !strncasecmp(s + k0, key, kl);
        size_t o = 0;
        if (i < n && s[i] == '"') {
            for (i++; i < n && s[i] != '"'; i++) {
                if (s[i] == '\\' && i + 1 < n) i++;
                if (match) {
                    if (o + 1 >= cap) return -1;
                    out[o++] = s[i];
                }
            }
            if (i >= n) return -1; /* unterminated quote */
            i++;
        } else {
            for (; i < n && s[i] != ';' && s[i] != ' ' && s[i] != '\t'; i++)
                if (match) {
                    if (o + 1 >= cap) return -1;
                    out[o++] = s[i];
                }
        }
        if (match) {
            out[o] = 0;
            return 0;
        }
    }
    return 1;
}

int multipart_boundary(const char *ct, char *boundary, size_t cap, char *err, size_t errlen)
{
    if (!ct) return fail(err, errlen, "Content-Type multipart/form-data is required");
    const size_t n = strlen(ct);
    static const char mf[] = "multipart/form-data";
    if (n < sizeof mf - 1 || strncasecmp(ct, mf, sizeof mf - 1) ||
        (ct[sizeof mf - 1] && ct[sizeof mf - 1] != ';' && ct[sizeof mf - 1] != ' '))
        return fail(err, errlen, "Content-Type must be multipart/form-data");
    char b[80];
    const int r = param(ct, n, "boundary", b, sizeof b);
    if (r != 0 || !b[0] || strlen(b) > 70) return fail(err, errlen, "multipart/form-data without a valid boundary");
    if (strlen(b) + 1 > cap) return fail(err, errlen, "multipart boundary too long");
    memcpy(boundary, b, strlen(b) + 1);
    return 0;
}

/* Parse the header lines h[0..n) of one part into p. */
static int part_headers(const char *h, size_t n, struct mp_part *p, char *err, size_t errlen)
{
    int have_disp = 0;
    size_t i = 0;
    while (i < n) {
        const char *eol = memchr(h + i, '\r', n - i);
        size_t e = eol ? (size_t)(eol - h) : n;
        const char *line = h + i;
        size_t len = e - i;
        const char *colon = memchr(line, ':', len);
        if (!colon) return fail(err, errlen, "multipart: a part header without ':'");
        size_t kl = (size_t)(colon - line);
        const char *v = colon + 1;
        size_t vl = len - kl - 1;
        while (vl && (*v == ' ' || *v == '\t')) v++, vl--;
        if (kl == 19 && !strncasecmp(line, "Content-Disposition", 19)) {
            if (vl < 9 || strncasecmp(v, "form-data", 9)) return fail(err, errlen, "multipart: a part that is not form-data");
            if (param(v, vl, "name", p->name, sizeof p->name) != 0 || !p->name[0])
                return fail(err, errlen, "multipart: a part without a valid name");
            int r = param(v, vl, "filename", p->filename, sizeof p->filename);
            if (r < 0) return fail(err, errlen, "multipart: a part with a malformed or too long filename");
            if (r > 0) p->filename[0] = 0;
            have_disp = 1;
        } else if (kl == 12 && !strncasecmp(line, "Content-Type", 12)) {
            if (vl >= sizeof p->ctype) return fail(err, errlen, "multipart: a part's Content-Type is too long");
            memcpy(p->ctype, v, vl);
            p->ctype[vl] = 0;
        }
        i = e;
        if (i + 1 < n && h[i] == '\r' && h[i + 1] == '\n') i += 2;
        else if (i < n) return fail(err, errlen, "multipart: a part header line not ended by CRLF");
    }
    if (!have_disp) return fail(err, errlen, "multipart: a part without Content-Disposition");
    return 0;
}

int multipart_parse(const uint8_t *body, size_t n, const char *boundary, struct mp_part *parts, int *n_parts,
                    char *err, size_t errlen)
{
    *n_parts = 0;
    uint8_t delim[80];
    const size_t bl = strlen(boundary);
    if (bl == 0 || bl > 70) return fail(err, errlen, "multipart: bad boundary");
    delim[0] = '\r', delim[1] = '\n', delim[2] = '-', delim[3] = '-';
    memcpy(delim + 4, boundary, bl);
    const size_t dl = bl + 4;
    /* the first delimiter may open the body (no CRLF before it) */
    const uint8_t *p;
    if (n >= dl - 2 && !memcmp(body, delim + 2, dl - 2)) p = body + dl - 2;
    else if ((p = find(body, n, delim, dl))) p += dl;
    else return fail(err, errlen, "multipart: the boundary does not occur in the body");
    const uint8_t *end = body + n;
    for (;;) {
        if (end - p >= 2 && p[0] == '-' && p[1] == '-') break; /* close delimiter */
        while (p < end && (*p == ' ' || *p == '\t')) p++;       /* transport padding */
        if (end - p < 2 || p[0] != '\r' || p[1] != '\n') return fail(err, errlen, "multipart: a delimiter not followed by CRLF");
        p += 2;
        if (*n_parts == MULTIPART_MAX_PARTS) return fail(err, errlen, "multipart: too many parts");
        struct mp_part *part = &parts[*n_parts];
        memset(part, 0, sizeof *part);
        const uint8_t *hend = find(p, (size_t)(end - p), (const uint8_t *)"\r\n\r\n", 4);
        size_t hlen;
        const uint8_t *data;
        if (end - p >= 2 && p[0] == '\r' && p[1] == '\n') { /* no headers at all */
            hlen = 0;
            data = p + 2;
        } else {
            if (!hend) return fail(err, errlen, "multipart: a part's headers do not end");
            hlen = (size_t)(hend - p);
            data = hend + 4;
        }
        if (hlen > 8192) return fail(err, errlen, "multipart: a part's headers are too long");
        if (part_headers((const char *)p, hlen, part, err, errlen)) return -1;
        const uint8_t *next = find(data, (size_t)(end - data), delim, dl);
        if (!next) return fail(err, errlen, "multipart: a part is not closed by the boundary");
        part->data = data;
        part->len = (size_t)(next - data);
        (*n_parts)++;
        p = next + dl;
    }
    if (*n_parts == 0) return fail(err, errlen, "multipart: no parts");
    return 0;
}

const struct mp_part *multipart_find(const struct mp_part *parts, int n_parts, const char *name)
{
    for (int i = 0; i < n_parts; i++)
        if (!strcmp(parts[i].name, name)) return &parts[i];
    return NULL;
}
