#!/usr/bin/env bash
# setup.sh - install every Debian package chatterbox.c needs to build and test.
# Idempotent: packages already present are skipped. Used by README.md and .ci/run.
set -euo pipefail

pkgs=(
  build-essential cmake pkg-config git
  libopenblas-dev        # GEMM
  libfftw3-dev           # STFT/ISTFT, mel
  libsndfile1-dev        # audio in/out
  libsoxr-dev            # resampling
  libebur128-dev         # loudness normalisation
  libutf8proc-dev        # unicode normalisation
  libpcre2-dev           # GPT-2 pre-tokeniser regex
  libcjson-dev           # JSON
  libkakasi2-dev kakasi-dic  # Japanese kanji -> hiragana (multilingual)
  libzip-dev             # torch .pt archives
  libcurl4-openssl-dev   # download
  libmicrohttpd-dev      # server
  clang libclang-rt-14-dev   # libFuzzer targets and sanitizers
  python3-venv           # tests only: build/venv with the openai package (server_openai)
)

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#pkgs[@]} packages present"
  exit 0
fi
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
