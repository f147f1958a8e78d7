#!/usr/bin/env bash
# test.sh - set up, build and run the whole test suite (the README's test
# command; .ci/run calls it). Two passes:
#   1. Release build (gcc): every test, benchmarks built.
#   2. clang with AddressSanitizer + UndefinedBehaviorSanitizer: the unit
#      tests and the libFuzzer targets (bounded time each).
# Fails loudly: any build error or failing test stops with a non-zero exit.
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-$(nproc)}

bash scripts/setup.sh

echo "== pass 1: release build, all tests"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
# the server's client test (server_openai) uses the official openai package
# from PyPI, in a virtual environment of the build tree (tests only; the
# test fails, never skips, without it)
if ! build/venv/bin/python -c "import openai" 2>/dev/null; then
  python3 -m venv build/venv
  build/venv/bin/pip install -q --disable-pip-version-check openai
fi
cmake --build build -j "$JOBS"
ctest --test-dir build --output-on-failure -j "$JOBS" --timeout 1200

echo "== pass 2: ASan + UBSan (clang), unit tests and fuzz targets"
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang \
      -DCBX_SANITIZE=ON -DCBX_FUZZ=ON -DCBX_BENCH=OFF >/dev/null
cmake --build build-asan -j "$JOBS"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-asan --output-on-failure -j "$JOBS" --timeout 1200 -LE "slow|parity"

echo "== pass 3: the CUDA backend builds (-DCBX_CUDA=ON, -Werror); its op test runs the cpu part"
echo "   (no GPU here: 'ctest -L cuda' runs on a GPU machine, see README)"
command -v nvcc >/dev/null || { echo "test.sh: nvcc not found (the CUDA toolkit is required to build the CUDA backend)" >&2; exit 1; }
cmake -S . -B build-cuda -DCMAKE_BUILD_TYPE=Release -DCBX_CUDA=ON -DCBX_BENCH=OFF >/dev/null
cmake --build build-cuda -j "$JOBS" --target chatterbox core_backend_ops
ctest --test-dir build-cuda --output-on-failure -R '^core_backend_ops$'
