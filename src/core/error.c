/* error.c - status text and message formatting (see error.h). */
#include "error.h"

#include <stdarg.h>
#include <stdio.h>

cbx_status err_setf(char *err, cbx_status s, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, ERR_MAX, fmt, ap);
        va_end(ap);
    }
    return s;
}

const char *cbx_status_str(cbx_status s)
{
    switch (s) {
    case CBX_OK: return "ok";
    case CBX_ERR_INVALID_ARG: return "invalid argument";
    case CBX_ERR_IO: return "i/o error";
    case CBX_ERR_FORMAT: return "malformed or unsupported file format";
    case CBX_ERR_NOMEM: return "out of memory";
    case CBX_ERR_UNSUPPORTED: return "unsupported";
    case CBX_ERR_NOT_FOUND: return "not found";
    case CBX_ERR_INTERNAL: return "internal error";
    case CBX_ERR_CANCELLED: return "cancelled";
    }
    return "unknown status";
}

const char *cbx_version(void) { return CBX_VERSION_STRING; }
