/* punc_norm.h - upstream's text clean-up before tokenisation (punc_norm in
 * tts.py, mtl_tts.py and tts_turbo.py; spec/overview.md §6). */
#ifndef CBX_TEXT_PUNC_NORM_H
#define CBX_TEXT_PUNC_NORM_H

#include "core/error.h"

enum punc_variant { PUNC_ENGLISH, PUNC_MULTILINGUAL, PUNC_TURBO };

/* Normalise UTF-8 text. *out is owned by the caller (free()). Invalid UTF-8
 * is refused with CBX_ERR_INVALID_ARG. */
cbx_status punc_norm(const char *text, enum punc_variant v, char **out, char *err);

#endif
