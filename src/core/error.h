/* error.h - status codes plus a one-line message for the caller.
 *
 * Convention used across src/: a fallible function returns cbx_status and,
 * when it fails, writes one line into `err`, a caller buffer of ERR_MAX bytes
 * (or NULL when the caller does not want the text). The message names the
 * file, field, value and what was allowed, so the user can fix the input. */
#ifndef CBX_ERROR_H
#define CBX_ERROR_H

#include "chatterbox.h"

#define ERR_MAX 512

/* Format a message into err (if not NULL) and return s. */
cbx_status err_setf(char *err, cbx_status s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
