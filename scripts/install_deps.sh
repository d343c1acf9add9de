#!/usr/bin/env bash
# Installs the Debian packages memplan builds and tests with; safe to run again (idempotent).
set -euo pipefail
pkgs=(cmake ninja-build g++ pkg-config libboost-graph-dev libonnx-dev libprotobuf-dev protobuf-compiler
      nlohmann-json3-dev doctest-dev libgraphviz-dev libcli11-dev python3 python3-pip coinor-libcbc-dev)
# The sanitized tests and the fuzz targets (scripts/test_sanitize.sh, scripts/fuzz.sh): clang, its sanitizer and
# libFuzzer runtimes, llvm-symbolizer for the stack traces.
if [ "${1:-}" = "--test" ]; then pkgs+=(clang libclang-rt-dev llvm); fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi
# Independent references for the tests (ONNX, ONNX Runtime, numpy); Python is never needed at run time.
if [ "${1:-}" = "--test" ]; then
  python3 -c "import onnx, onnxruntime, numpy" 2>/dev/null ||
    python3 -m pip install -q onnx onnxruntime numpy 2>/dev/null ||
    python3 -m pip install -q --break-system-packages onnx onnxruntime numpy
fi
