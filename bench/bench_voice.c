/* bench_voice.c - voice creation (voice_prepare, src/voice/voice.h) for a
 * 10 s reference clip: total and per stage, in seconds, against the clip's
 * own duration (ratio = real-time factor; the target is <= 0.1, 1 s for
 * 10 s of audio).
 *
 *   voice_total        the whole prepare_conditionals (wall)
 *   voice_total_cpu    its CPU time summed over threads (robust on a
 *                      shared machine: wall >= cpu / threads)
 *   voice_resample     soxr and torchaudio resampling
 *   voice_loudness     pyloudnorm meter (the silence check, and the gain
 *                      on the default Turbo/Nano path)
 *   voice_prompt_mel   S3Gen 24 kHz prompt mel
 *   voice_campplus     Kaldi fbank + CAMPPlus x-vector
 *   voice_prompt_tokens  S3TokenizerV2 on the 10 s prompt
 *   voice_t3_tokens    S3TokenizerV2 for the T3 prompt (0 when reused)
 *   voice_ve           VoiceEncoder speaker embedding
 *   voice_lane_a_cpu   CPU time of the CAMPPlus + prompt-token lane's thread
 *   voice_lane_b_cpu   CPU time of the T3-token + VE lane's thread (the
 *                      lanes run at once, a core each, unless --serial;
 *                      on an idle machine the wall time is about the
 *                      work before the lanes plus the larger of the two)
 *
 * Options: --model DIR (default $CHATTERBOX_MODEL), --ref FILE (default
 * tests/data/ref_voice_24k.wav), --ref16 FILE (fixture path: no
 * resampling, one tokenizer run), --serial (stages one after another:
 * voice_params.serial, the comparison for the concurrent network lanes),
 * plus the common --threads/--reps/--filter. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common.h"
#include "core/backend.h"
#include "io/audio.h"
#include "io/model_dir.h"
#include "voice/voice.h"

static double cpu_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char **argv)
{
    const char *model = bench_take_model(&argc, argv);
    const char *ref = bench_take_opt_or(&argc, argv, "--ref", "tests/data/ref_voice_24k.wav");
    const char *ref16 = bench_take_opt_or(&argc, argv, "--ref16", NULL);
    bool serial = false; /* --serial: voice_params.serial (stages one after another) */
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--serial")) {
            serial = true;
            memmove(argv + i, argv + i + 1, sizeof *argv * (size_t)(argc - i - 1));
            argc--;
            break;
        }
    struct bench_opts opt;
    if (!bench_parse(argc, argv, &opt, 3)) return 2;
    if (!model) {
        fprintf(stderr, "bench_voice: --model DIR is required (or set CHATTERBOX_MODEL)\n");
        return 2;
    }
    char err[ERR_MAX] = "";
    struct model_dir *md = NULL;
    struct voice_models *vm = NULL;
    struct audio a = {0}, a16 = {0};
    struct backend *be = backend_cpu_create(opt.threads);
    cbx_status rc = be ? CBX_OK : err_setf(err, CBX_ERR_NOMEM, "cannot start the CPU backend");
    if (rc == CBX_OK) rc = io_audio_read(ref, &a, err);
    if (rc == CBX_OK && ref16) rc = io_audio_read(ref16, &a16, err);
    if (rc == CBX_OK) rc = model_dir_open(model, &md, err);
    if (rc == CBX_OK) rc = voice_models_load(md, &vm, err);
    if (rc != CBX_OK) {
        fprintf(stderr, "bench_voice: %s\n", err);
        return 1;
    }
    double clip = (double)a.n / a.sample_rate;
    enum { N_STAGE = 11 };
    static const char *names[N_STAGE] = {"voice_total", "voice_total_cpu", "voice_resample", "voice_loudness", "voice_prompt_mel",
                                         "voice_campplus", "voice_prompt_tokens", "voice_t3_tokens", "voice_ve",
                                         "voice_lane_a_cpu", "voice_lane_b_cpu"};
    int reps = opt.reps > 0 ? opt.reps : 1;
    double *t[N_STAGE];
    for (int s = 0; s < N_STAGE; s++) t[s] = calloc((size_t)reps, sizeof(double));
    struct voice_params p = voice_default_params();
    p.serial = serial;
    for (int r = -1; r < reps; r++) { /* r = -1: warm-up */
        struct conds c;
        struct voice_report rep;
        double t0 = bench_now(), c0 = cpu_now();
        rc = voice_prepare(vm, be, &a, ref16 ? &a16 : NULL, &p, &c, &rep, err);
        double total = bench_now() - t0, cpu = cpu_now() - c0;
        conds_free(&c);
        if (rc != CBX_OK) {
            fprintf(stderr, "bench_voice: %s\n", err);
            return 1;
        }
        if (r < 0) continue;
        double v[N_STAGE] = {total, cpu, rep.t_resample, rep.t_loudness, rep.t_prompt_mel, rep.t_campplus,
                             rep.t_prompt_tokens, rep.t_t3_tokens, rep.t_ve, rep.cpu_lane_a, rep.cpu_lane_b};
        for (int s = 0; s < N_STAGE; s++) t[s][r] = v[s];
    }
    int64_t shape[1] = {a.n};
    fprintf(stderr, "bench_voice: %.2f s clip at %d Hz, %s path%s, %d threads, %d reps (median s, x real time)\n",
            clip, a.sample_rate, ref16 ? "--ref16" : "default", serial ? " (--serial)" : "", opt.threads, reps);
    for (int s = 0; s < N_STAGE; s++) {
        if (!bench_selected(&opt, names[s])) continue;
        struct bench_stats st = bench_stats(t[s], reps);
        bench_emit(names[s], ref16 ? "ref16" : serial ? "serial" : "default", shape, 1, opt.threads, reps, "s", st, "clip_seconds",
                   clip);
        fprintf(stderr, "  %-20s %7.3f s  (p10 %.3f, p90 %.3f)  %.3f x real time\n", names[s], st.median, st.p10,
                st.p90, st.median / clip);
    }
    for (int s = 0; s < N_STAGE; s++) free(t[s]);
    voice_models_free(vm);
    model_dir_close(md);
    io_audio_free(&a16);
    io_audio_free(&a);
    backend_cpu_free(be);
    return 0;
}
