#!/usr/bin/env bash
# device-deps.sh - the Debian libraries chatterbox.c builds and runs with,
# for a machine that lacks them and cannot fetch anything (the GPU machine:
# Ubuntu 24.04 with CUDA, no package registry).
#
#   bash scripts/device-deps.sh pack     # here (Debian 12, network): writes
#                                        # .device-deps/root.tar.xz
#   source scripts/device-deps.sh env    # there: unpacks it into
#                                        # .device-deps/root once and exports
#                                        # PKG_CONFIG_*, CMAKE_*, LD_LIBRARY_PATH
#
# pack downloads the packages scripts/setup.sh installs (libraries only, no
# compilers) with their dependency closure, less what every glibc system
# has, unpacks them into a staging root and keeps only headers, shared
# libraries, pkg-config files and data (kakasi's dictionaries): about a
# tenth of the .debs' size, so it travels with the working tree. The
# libraries are Debian 12's; a newer glibc runs them.
# strict mode when run (pack) only: sourced (env), it would stay on in the
# caller's shell, and a failing command there would end the caller
if [ "${BASH_SOURCE[0]}" = "$0" ]; then set -euo pipefail; fi
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dir="$here/.device-deps"
libs=(libopenblas-dev libfftw3-dev libsndfile1-dev libsoxr-dev libebur128-dev libutf8proc-dev libpcre2-dev
      libcjson-dev libkakasi2-dev kakasi-dic libzip-dev libcurl4-openssl-dev libmicrohttpd-dev)
# the C runtime, compilers' own libraries, other BLAS flavours: never packed
skip='^(libc6|libc6-dev|libc-dev-bin|gcc-[0-9]+-base|libgcc-s1|libstdc\+\+6|libcrypt1|libcrypt-dev|libnsl-dev|libnsl2|libtirpc-common|libtirpc-dev|libtirpc3|linux-libc-dev|rpcsvc-proto|libopenblas-openmp-dev|libopenblas-serial-dev|libopenblas0-openmp|libopenblas0-serial|libfftw3-bin|libfftw3-long3|libfftw3-quad3|debconf|perl-base|dpkg|tar|install-info|pkgconf|pkgconf-bin|pkg-config|libpkgconf3)$'

pack() {
    command -v apt-get >/dev/null || { echo "device-deps: pack needs apt-get (Debian)" >&2; exit 1; }
    tmp="$(mktemp -d)"
    trap 'rm -rf "$tmp"' EXIT
    apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks --no-replaces \
        --no-enhances "${libs[@]}" | grep -v '^ ' | grep -v '<' | sort -u | grep -Ev "$skip" > "$tmp/pkgs"
    mkdir -p "$tmp/debs" "$tmp/root"
    (cd "$tmp/debs" && apt-get download $(cat "$tmp/pkgs") >/dev/null 2>"$tmp/apt.log") ||
        { cat "$tmp/apt.log" >&2; exit 1; }
    for f in "$tmp"/debs/*.deb; do dpkg -x "$f" "$tmp/root"; done
    # keep headers, shared objects and their links, .pc files, data files
    rm -rf "$tmp/root"/usr/share/{doc,man,info,lintian,bug} "$tmp/root"/usr/bin "$tmp/root"/usr/sbin
    find "$tmp/root" -name '*.a' -delete
    mkdir -p "$dir"
    tar -C "$tmp/root" -cJf "$dir/root.tar.xz" .
    echo "device-deps: $(wc -l < "$tmp/pkgs") packages -> $dir/root.tar.xz ($(du -h "$dir/root.tar.xz" | cut -f1))"
}

env_() {
    [ -f "$dir/root.tar.xz" ] || { echo "device-deps: no $dir/root.tar.xz (run 'pack' where apt works)" >&2; return 1; }
    local root="$dir/root" multi=usr/lib/x86_64-linux-gnu
    if [ ! -d "$root" ]; then mkdir -p "$root" && tar -C "$root" -xJf "$dir/root.tar.xz"; fi
    export PKG_CONFIG_SYSROOT_DIR="$root"
    # openblas.pc is an alternatives link on Debian, which dpkg -x does not
    # make: its real folder goes on the path too
    export PKG_CONFIG_LIBDIR="$root/$multi/pkgconfig:$root/$multi/openblas-pthread/pkgconfig:$root/usr/share/pkgconfig"
    export CMAKE_PREFIX_PATH="$root/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
    export CMAKE_LIBRARY_PATH="$root/$multi${CMAKE_LIBRARY_PATH:+:$CMAKE_LIBRARY_PATH}"
    export CMAKE_INCLUDE_PATH="$root/usr/include${CMAKE_INCLUDE_PATH:+:$CMAKE_INCLUDE_PATH}"
    export LD_LIBRARY_PATH="$root/$multi:$root/$multi/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export LIBRARY_PATH="$LD_LIBRARY_PATH"
    export KANWADICTPATH="$root/usr/share/kakasi/kanwadict" ITAIJIDICTPATH="$root/usr/share/kakasi/itaijidict"
    echo "device-deps: libraries from $root"
}

case "${1:-}" in
    pack) pack ;;
    env) env_ ;;
    *) echo "usage: bash scripts/device-deps.sh pack | source scripts/device-deps.sh env" >&2; exit 2 ;;
esac
