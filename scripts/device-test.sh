#!/usr/bin/env bash
# device-test.sh - on the GPU machine: build with the CUDA backend and run
# tests and benchmarks there, every model-level test on the GPU.
#
#   bash scripts/device-test.sh build            # configure + build build-dev/
#   bash scripts/device-test.sh test [LABELS]    # ctest -L LABELS (default
#                                                # "cuda|parity") with
#                                                # CBX_TEST_BACKEND=cuda
#   bash scripts/device-test.sh test-re REGEX    # ctest -R REGEX likewise
#   bash scripts/device-test.sh bench            # bench_e2e on the GPU (Turbo,
#                                                # synthetic weights) and on cpu
#   bash scripts/device-test.sh bench-gpu        # e2e (every type), streaming
#                                                # and the server on the GPU
#   bash scripts/device-test.sh profile          # ncu: a decode step's kernels
#                                                # by name (needs ncu)
#   bash scripts/device-test.sh s3gen            # S3Gen's stages on the GPU
#                                                # (Turbo, English), its
#                                                # kernels by name (profile
#                                                # and ncu)
#   bash scripts/device-test.sh overhead         # GPU utilisation while T3
#                                                # decodes (nvidia-smi) and
#                                                # the floor of a kernel
#                                                # boundary (bench_cuda_ops)
#   bash scripts/device-test.sh ab PATCH         # a change's speed: this tree
#                                                # (A) against it less PATCH
#                                                # (B), bench_e2e alternating
#
# The libraries come from scripts/device-deps.sh (pack them here first:
# `bash scripts/device-deps.sh pack`, then carry .device-deps). Logs go to
# $OUT when set (the device tool's folder that comes back), else build-dev/.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here" || exit 1
out="${OUT:-$here/build-dev}"
mkdir -p "$out"
# shellcheck source=/dev/null
source scripts/device-deps.sh env >/dev/null || exit 1
jobs="$(nproc)"

build() {
    cmake -S . -B build-dev -DCMAKE_BUILD_TYPE=Release -DCBX_CUDA=ON > "$out/configure.log" 2>&1 ||
        { tail -30 "$out/configure.log"; return 1; }
    make -C build-dev -j"$jobs" > "$out/build.log" 2>&1 || { grep -E "error|Error" "$out/build.log" | head -30; return 1; }
    echo "device-test: built ($(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null))"
    ./build-dev/chatterbox info --backends
}

run_tests() {
    local sel=(-L "${1:-cuda|parity}")
    [ -n "${2:-}" ] && sel=(-R "$2")
    (cd build-dev && CBX_TEST_BACKEND=cuda ctest -V "${sel[@]}" -j"${CTEST_J:-4}" --timeout 500 \
        --output-on-failure > "$out/ctest.log" 2>&1)
    local rc=$?
    grep -E "Test +#|tests passed|tests failed|Total Test" "$out/ctest.log" | tail -60
    # the measured errors of the parity tests, for the issue note
    grep -hE "max_abs=|min_cos=|tokens|identical|rel(ative)? err" "$out/ctest.log" > "$out/errors.txt"
    return $rc
}

# the synthetic Turbo checkpoint the benches run on (ctest's, else made)
turbo_model() {
    local m=build-dev/models/turbo
    [ -d "$m" ] || ./build-dev/chatterbox synth turbo -o "$m" --quiet || return 1
    echo "$m"
}

bench() {
    local m
    m="$(turbo_model)" || return 1
    for b in ${BACKENDS:-cuda cpu}; do
        ./build-dev/bench/bench_e2e --model "$m" --backend "$b" --reps "${REPS:-2}" --filter "${FILTER-f32}" \
            >> "$out/bench.json" 2>> "$out/bench.txt"
    done
    # where a step's time goes (each kernel synchronised: slower overall)
    CBX_CUDA_PROFILE=1 ./build-dev/bench/bench_e2e --model "$m" --backend cuda --reps 1 --filter "${FILTER:-f32}" \
        > /dev/null 2> "$out/profile.txt"
    cat "$out/bench.txt"
}

# the GPU figures of the CUDA issue in one call: bench_e2e for every weight
# type, streaming first audio, the server at 1..64 streaming clients
bench_gpu() {
    local m
    m="$(turbo_model)" || return 1
    ./build-dev/bench/bench_e2e --model "$m" --backend cuda --reps "${REPS:-2}" >> "$out/bench.json" 2>> "$out/bench.txt"
    ./build-dev/bench/bench_stream --model "$m" --backend cuda --reps "${REPS:-2}" --filter f32 \
        >> "$out/bench.json" 2>> "$out/bench.txt"
    ./build-dev/bench/bench_serve --model "$m" --backend cuda --clients "${CLIENTS:-1,4,16,64}" --threads 4 \
        >> "$out/bench.json" 2>> "$out/bench.txt"
    cat "$out/bench.txt"
}

# where a decode step's time goes: every kernel of a few steps timed by
# ncu (graphs off, so each launch is seen) with the warp instructions it
# executed, summed by kernel name; then the draw on the device inside the
# replayed graph
profile() {
    local m ncu=/usr/local/cuda/bin/ncu
    m="${MODEL:-$(turbo_model)}" || return 1
    CBX_CUDA_GRAPH=0 "$ncu" --clock-control none --cache-control none \
        --metrics gpu__time_duration.sum,smsp__inst_executed.sum --csv --launch-skip 2000 \
        --launch-count "${LAUNCHES:-680}" ./build-dev/chatterbox tokens --model "$m" --backend cuda \
        --text-ids "1 2 3 4 5 6 7 8" --max-tokens 14 --top-k 1 --quiet > "$out/ncu.csv" 2> "$out/ncu.err"
    "$ncu" --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv --graph-profiling node \
        --kernel-name regex:k_sample --launch-count 20 ./build-dev/chatterbox tokens --model "$m" --backend cuda \
        --text-ids "1 2 3 4 5 6 7 8" --max-tokens 24 --quiet > "$out/ncu_sample.csv" 2>> "$out/ncu.err"
    python3 scripts/ncu-sum.py "$out/ncu.csv" "$out/ncu_sample.csv"
}

# where S3Gen's time goes on the GPU: each stage waited for (bench_s3gen
# --model), every kernel step's wall time (CBX_CUDA_PROFILE) and every
# kernel's device time (ncu) by name, for Turbo (and English's 10 CFG steps)
s3gen() {
    local m ncu=/usr/local/cuda/bin/ncu
    m="$(turbo_model)" || return 1
    ./build-dev/bench/bench_s3gen --model "$m" --backend cuda --reps "${REPS:-3}" --precision both \
        >> "$out/bench.json" 2>> "$out/s3gen.txt"
    CBX_CUDA_PROFILE=1 ./build-dev/bench/bench_s3gen --model "$m" --backend cuda --reps 1 \
        > /dev/null 2> "$out/s3gen_profile.txt"
    if [ -n "${ENGLISH:-}" ]; then
        [ -d build-dev/models/english ] || ./build-dev/chatterbox synth english -o build-dev/models/english --quiet
        ./build-dev/bench/bench_s3gen --model build-dev/models/english --backend cuda --reps 2 --precision both \
            >> "$out/bench.json" 2>> "$out/s3gen.txt"
    fi
    grep -v '^{' "$out/s3gen.txt"
    head -45 "$out/s3gen_profile.txt"
    timeout "${NCU_S:-150}" "$ncu" --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv \
        ./build-dev/bench/bench_s3gen --model "$m" --backend cuda --reps 1 > "$out/ncu_s3gen.csv" 2> "$out/ncu.err"
    python3 scripts/ncu-sum.py "$out/ncu_s3gen.csv" > "$out/ncu_s3gen.txt" 2>&1
    head -45 "$out/ncu_s3gen.txt"
}

# The CUDA issue's two decode figures. GPU utilisation while T3 decodes:
# nvidia-smi sampled every 20 ms while `chatterbox tokens` decodes up to
# 1500 tokens of Turbo Q4_0 three times (graphs on, as shipped; the token
# counts in util_tokens.txt), the samples with a kernel running
# summarised. The cost of a kernel boundary in a replayed step:
# bench_cuda_ops' kernel chains, with programmatic dependent launch and
# without (CBX_CUDA_PDL=0; only the chain of decode products launches
# that way), then the draw's cases.
overhead() {
    local m g smi
    m="$(turbo_model)" || return 1
    g=build-dev/models/turbo_q4_0.gguf
    [ -f "$g" ] || ./build-dev/chatterbox convert "$m" -o "$g" --quant q4_0 --quiet || return 1
    nvidia-smi --query-gpu=utilization.gpu,utilization.memory,clocks.sm --format=csv,noheader,nounits -lms 20 \
        > "$out/util.csv" 2>&1 &
    smi=$!
    sleep 1
    for _ in 1 2 3; do
        ./build-dev/chatterbox tokens --model "$g" --backend cuda --text-ids "1 2 3 4 5 6 7 8" --max-tokens 1500 \
            --quiet 2>> "$out/util_tokens.txt" | wc -w >> "$out/util_tokens.txt"
    done
    sleep 1
    kill "$smi"
    python3 - "$out/util.csv" <<'PY'
import sys
rows = [[float(x) for x in l.split(",")] for l in open(sys.argv[1]) if l.count(",") == 2]
busy = [r for r in rows if r[0] > 0]
if busy:
    u = sorted(r[0] for r in busy)
    print("gpu utilisation while busy: %d samples, median %.0f%%, p10 %.0f%%, p90 %.0f%%, memory median %.0f%%, "
          "sm clock median %.0f MHz" % (len(u), u[len(u) // 2], u[len(u) // 10], u[len(u) * 9 // 10],
                                       sorted(r[1] for r in busy)[len(busy) // 2],
                                       sorted(r[2] for r in busy)[len(busy) // 2]))
else:
    print("gpu utilisation: no busy samples (%d in all)" % len(rows))
PY
    for p in 1 0; do
        echo "CBX_CUDA_PDL=$p:"
        CBX_CUDA_PDL=$p ./build-dev/bench/bench_cuda_ops --filter "kernel chain" --reps 20 >> "$out/bench.json" \
            2> >(tee -a "$out/chain.txt")
    done
    CBX_CUDA_PDL=1 ./build-dev/bench/bench_cuda_ops --filter sample --reps 10 >> "$out/bench.json" \
        2> >(tee -a "$out/chain.txt")
}

# A/B of a change: A is this tree, B this tree with PATCH (the change as
# `git diff` writes it, carried in the tree) reversed; both built with the
# CUDA backend under /tmp/ab, then bench_e2e on the GPU, B and A
# alternating for ROUNDS rounds (default 2) on the synthetic Turbo and
# Multilingual v2 checkpoints as Q4_0 ggufs (MODELS: other `synth` names
# and quantisations as name:quant). VARIANTS adds runs of A with an
# environment, "label:VAR=value[,VAR=value] ..." (space-separated
# variants). Prints T3 tokens/s a line.
ab() {
    local patch="${1:?a patch: git diff > X.diff}" m l v
    [ -f "$patch" ] || { echo "device-test: no $patch" >&2; return 1; }
    patch="$(cd "$(dirname "$patch")" && pwd)/$(basename "$patch")"
    rm -rf /tmp/ab && mkdir -p /tmp/ab/A /tmp/ab/B /tmp/ab/m
    for t in A B; do
        tar --exclude=./build\* --exclude=./.git --exclude=./.device-deps -cf - . | tar -C /tmp/ab/$t -xf - || return 1
    done
    (cd /tmp/ab/B && patch -s -R -p1 < "$patch") || { echo "device-test: $patch does not reverse" >&2; return 1; }
    for t in A B; do
        (cd /tmp/ab/$t && cmake -S . -B bd -DCMAKE_BUILD_TYPE=Release -DCBX_CUDA=ON > "$out/ab_$t.cfg" 2>&1 &&
            make -C bd -j"$jobs" chatterbox bench_e2e > "$out/ab_$t.build" 2>&1) &
    done
    wait
    for t in A B; do
        [ -x /tmp/ab/$t/bd/bench/bench_e2e ] || { grep -E "error" "$out/ab_$t.build" | head -20; return 1; }
    done
    local models=()
    for m in ${MODELS:-turbo:q4_0 mtl-v2:q4_0}; do
        [ -d /tmp/ab/m/${m%%:*} ] || /tmp/ab/A/bd/chatterbox synth "${m%%:*}" -o /tmp/ab/m/${m%%:*} --quiet || return 1
        /tmp/ab/A/bd/chatterbox convert /tmp/ab/m/${m%%:*} -o /tmp/ab/m/${m/:/_}.gguf --quant "${m##*:}" --quiet ||
            return 1
        models+=("/tmp/ab/m/${m/:/_}.gguf")
    done
    ab_run() { # label tree model [VAR=value ...]
        local label=$1 tree=$2 model=$3
        shift 3
        echo "$label $(basename "$model" .gguf): $(env "$@" /tmp/ab/$tree/bd/bench/bench_e2e --model "$model" \
            --backend cuda --reps 2 2>&1 > /dev/null | grep -o '[0-9.]* tok/s' | tr '\n' ' ')"
    }
    for _ in $(seq "${ROUNDS:-2}"); do
        for m in "${models[@]}"; do
            ab_run B B "$m"
            ab_run A A "$m"
            for v in ${VARIANTS:-}; do
                l=${v%%:*}
                v=${v#*:}
                ab_run "A_$l" A "$m" ${v//,/ }
            done
        done
    done | tee "$out/ab.txt"
}

case "${1:-}" in
build) build ;;
test) build && run_tests "${2:-}" ;;
test-re) build && run_tests "" "${2:?a ctest -R pattern}" ;;
bench) build && bench ;;
bench-gpu) build && bench_gpu ;;
profile) build && profile ;;
s3gen) build && s3gen ;;
overhead) build && overhead ;;
ab) ab "${2:-}" ;;
*) echo "usage: device-test.sh build|test [LABELS]|test-re REGEX|bench|bench-gpu|profile|s3gen|overhead|ab PATCH" >&2; exit 2 ;;
esac
