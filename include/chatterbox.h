/* chatterbox.h - public C API of chatterbox.c, a native runtime for the
 * Chatterbox text-to-speech models (Resemble AI, MIT).
 *
 * Conventions: every fallible call returns a cbx_status (CBX_OK = 0); the
 * static text of a code comes from cbx_status_str(). Handles are opaque;
 * each constructor has a _free on the same noun that is a no-op on NULL.
 * Ownership is stated at every returned pointer. */
#ifndef CHATTERBOX_H
#define CHATTERBOX_H

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define CBX_API __declspec(dllexport)
#else
#define CBX_API __attribute__((visibility("default")))
#endif

#define CBX_VERSION_MAJOR 0
#define CBX_VERSION_MINOR 1
#define CBX_VERSION_PATCH 0
#define CBX_VERSION_NUMBER \
    ((CBX_VERSION_MAJOR << 16) | (CBX_VERSION_MINOR << 8) | CBX_VERSION_PATCH)
#define CBX_VERSION_STRING "0.1.0"

typedef enum cbx_status {
    CBX_OK = 0,
    CBX_ERR_INVALID_ARG, /* a caller passed a bad value */
    CBX_ERR_IO,          /* a file or stream could not be read or written */
    CBX_ERR_FORMAT,      /* a file's content is malformed or unsupported */
    CBX_ERR_NOMEM,       /* an allocation failed */
    CBX_ERR_UNSUPPORTED, /* valid, but not supported by this build/backend */
    CBX_ERR_NOT_FOUND,   /* a named tensor, file or key does not exist */
    CBX_ERR_INTERNAL,    /* an invariant of ours was broken (a bug) */
    CBX_ERR_CANCELLED,   /* a callback asked to stop */
} cbx_status;

/* Static English text for a status code; never NULL.
 * Thread safety: any thread, concurrently. */
CBX_API const char *cbx_status_str(cbx_status s);

/* Version of the library as linked (compare with CBX_VERSION_STRING).
 * Thread safety: any thread, concurrently. */
CBX_API const char *cbx_version(void);

#ifdef __cplusplus
}
#endif
#endif /* CHATTERBOX_H */
