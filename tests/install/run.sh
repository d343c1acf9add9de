#!/usr/bin/env bash
# Installs the built memplan into a scratch prefix, then builds and runs a separate project against it
# through find_package(memplan). Usage: run.sh BUILD_DIR
set -euo pipefail
build="$1"
here="$(cd "$(dirname "$0")" && pwd)"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
cmake --install "$build" --prefix "$scratch/prefix" > /dev/null
# Every quoted include of an installed header is installed too (the public surface is closed).
inc="$scratch/prefix/include/memplan"
for h in $(cd "$inc" && find . -name '*.hpp'); do
  for dep in $(sed -n 's/^#include "\(.*\)".*/\1/p' "$inc/$h"); do
    [ -f "$inc/$dep" ] || { echo "installed header $h includes $dep, which is not installed"; exit 1; }
  done
done
cmake -S "$here" -B "$scratch/build" -G Ninja -DCMAKE_PREFIX_PATH="$scratch/prefix" > /dev/null
cmake --build "$scratch/build" > /dev/null
"$scratch/build/consumer"
