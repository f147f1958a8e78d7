#!/usr/bin/env bash
# run.sh - build the benchmarks if needed and run every bench/bench_*.c
# program, collecting their JSON lines into one file (summaries go to the
# terminal). Usage: bench/run.sh [OUT.jsonl] [options passed to each bench,
# e.g. --threads 2 --reps 20 --filter q4_0]. BUILD=dir picks the build
# directory (default build).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${BUILD:-$root/build}"
out="${1:-$build/bench-$(date +%Y%m%d-%H%M%S).jsonl}"
[ $# -gt 0 ] && shift
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
cmake --build "$build" -j "$(nproc)" >/dev/null
CBX_COMMIT="$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"
export CBX_COMMIT
: > "$out"
for src in "$root"/bench/bench_*.c; do
  name="$(basename "$src" .c)"
  exe="$build/bench/$name"
  [ -x "$exe" ] || { echo "run.sh: $exe not built" >&2; exit 1; }
  echo "== $name" >&2
  "$exe" "$@" >> "$out"
done
echo "run.sh: $(wc -l < "$out") results in $out" >&2
