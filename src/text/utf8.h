/* utf8.h - UTF-8 checks shared by the text front end's parsers.
 * Thread safety: pure. */
#ifndef CBX_TEXT_UTF8_H
#define CBX_TEXT_UTF8_H

#include <stdbool.h>
#include <stddef.h>
#include <utf8proc.h>

/* s[0..n) is well-formed UTF-8 (as utf8proc decodes it). */
static inline bool utf8_valid(const char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        utf8proc_int32_t c;
        utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(n - i), &c);
        if (k <= 0) return false;
        i += (size_t)k;
    }
    return true;
}

#endif
