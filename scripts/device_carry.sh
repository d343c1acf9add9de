#!/usr/bin/env bash
# Packs built executables and the Debian shared libraries they link into .carry/ (git-ignored), so they
# run on the GPU machine, which has no apt: there, `export LD_LIBRARY_PATH=$PWD/.carry/lib`.
# Usage: scripts/device_carry.sh build/memplan [build/other_exe ...]
set -euo pipefail
cd "$(dirname "$0")/.."
dest="${CARRY_DIR:-.carry}"
mkdir -p "$dest/bin" "$dest/lib"
for exe in "$@"; do
  cp -f "$exe" $dest/bin/ && strip --strip-debug "$dest/bin/$(basename "$exe")" && chmod +x "$dest/bin/$(basename "$exe")"
  ldd "$exe" | awk '/=> \//{print $3}' | while read -r lib; do
    case "$lib" in
      */libc.so*|*/libstdc++.so*|*/libgcc_s.so*|*/libm.so*|*/libpthread.so*|*/libdl.so*|*/librt.so*|*/ld-linux*|*/libcuda.so*) ;;
      *) cp -fL "$lib" $dest/lib/ ;;
    esac
  done
done
du -sh "$dest"
