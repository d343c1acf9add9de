#!/usr/bin/env bash
# Installs what memplan needs (Debian packages; onnx, onnxruntime, numpy as test references), builds
# everything with warnings as errors, and runs the whole test suite through ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh --test
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMEMPLAN_WERROR=ON > /dev/null
cmake --build build -j"$(nproc)"
ctest --test-dir build --output-on-failure -j"$(nproc)" --timeout 900
