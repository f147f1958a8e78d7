/* default_model.h - the model `say` and `tokens` use when --model is not
 * given: $CHATTERBOX_MODEL, else the Turbo snapshot of the download cache
 * (hf_cache_model_dir("turbo"), tools/lib/hf_download.h) when it is complete. */
#ifndef CBX_TOOLS_DEFAULT_MODEL_H
#define CBX_TOOLS_DEFAULT_MODEL_H

#include <stddef.h>

/* The default model path: $CHATTERBOX_MODEL when set and not empty, else
 * the cached Turbo snapshot directory (written into buf, n bytes) when its
 * download manifest says it is complete, else NULL. */
const char *cli_default_model(char *buf, size_t n);

/* The one-line reason when cli_default_model found nothing (no trailing
 * newline), naming --model, CHATTERBOX_MODEL and `chatterbox download
 * turbo`; an incomplete cached snapshot is named as such. */
void cli_no_model_message(char *buf, size_t n);

#endif
