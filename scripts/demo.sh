#!/usr/bin/env bash
# demo.sh - the README's main command: set up, build, get the model, speak.
#
#   bash scripts/demo.sh ["text to speak" [out.wav]]
#
# On a fresh Debian 12 machine: installs the build dependencies
# (scripts/setup.sh), builds, downloads Chatterbox Turbo from Hugging Face
# into ~/.cache/chatterbox (skipped when already complete; resumes an
# interrupted download; uses $CHATTERBOX_MODEL instead when set, a snapshot
# directory or a converted .gguf) and speaks the text into a wav file.
set -euo pipefail
cd "$(dirname "$0")/.."
text="${1:-Hello from chatterbox.c.}"
out="${2:-hello.wav}"

bash scripts/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(nproc)"
./build/chatterbox --version

model="${CHATTERBOX_MODEL:-}"
if [ -z "$model" ]; then
  # prints the snapshot directory; progress on stderr
  model="$(./build/chatterbox download turbo)"
fi

./build/chatterbox say --model "$model" -o "$out" -- "$text"
echo "demo: wrote $out" >&2
