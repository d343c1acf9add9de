#!/usr/bin/env bash
# Installs what memplan needs, builds it, and analyzes a sample model (ResNet-50 at batch 32).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo > /dev/null
cmake --build build --target memplan -j"$(nproc)"
./build/memplan analyze samples/models/resnet50.dyn.onnx --dim batch=32
