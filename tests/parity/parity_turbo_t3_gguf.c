/* parity_turbo_t3_gguf.c - Turbo T3 vs upstream fixtures, the model read
 * from a GGUF converted (F32) from the synthetic directory: the checks of
 * t3_parity.inc (greedy and sampled tokens identical to the fixture), so the
 * converted file is shown to be the same model. The ~3 GB file is written
 * under the build tree and removed at exit. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "io/model_file.h"
#include "testutil.h"

static char gguf_path[512];

static void remove_gguf(void)
{
    if (gguf_path[0]) remove(gguf_path);
}

static bool t3_model_gguf(char *path, size_t n)
{
    char dir[512], err[ERR_MAX] = "";
    snprintf(dir, sizeof dir, "%s/models/turbo", CBX_BINARY_DIR);
    snprintf(gguf_path, sizeof gguf_path, "%s/models/turbo-t3-parity.gguf", CBX_BINARY_DIR);
    atexit(remove_gguf);
    struct model_convert_params prm = {TYPE_F32, -1, NULL, NULL};
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    cbx_status rc = model_convert(dir, gguf_path, &prm, err);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    CHECK(rc == CBX_OK, "convert %s: %s", dir, err);
    if (rc != CBX_OK) return false;
    printf("converted %s -> %s (f32) in %.1f s\n", dir, gguf_path,
           (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
    snprintf(path, n, "%s", gguf_path);
    return true;
}

#define VARIANT "turbo"
#define T3_MODEL_PATH t3_model_gguf
#include "t3_parity.inc"
