/* default_model.c - default --model of `say` and `tokens` (see the header). */
#include "default_model.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "hf_download.h"

const char *cli_default_model(char *buf, size_t n)
{
    const char *env = getenv("CHATTERBOX_MODEL");
    if (env && *env) return env;
    if (hf_cache_model_dir("turbo", buf, n) == CBX_OK && hf_snapshot_complete(buf)) return buf;
    return NULL;
}

void cli_no_model_message(char *buf, size_t n)
{
    char dir[4096];
    struct stat st;
    if (hf_cache_model_dir("turbo", dir, sizeof dir) == CBX_OK && stat(dir, &st) == 0 && S_ISDIR(st.st_mode))
        snprintf(buf, n,
                 "no model: the cached Turbo snapshot %s is incomplete; run `chatterbox download turbo` "
                 "to finish it, or give --model DIR|GGUF or set CHATTERBOX_MODEL", dir);
    else
        snprintf(buf, n,
                 "no model: run `chatterbox download turbo` (the default model), or give --model DIR|GGUF "
                 "or set CHATTERBOX_MODEL");
}
