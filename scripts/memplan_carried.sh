#!/usr/bin/env bash
# Runs the memplan packed by device_carry.sh (on the GPU machine, which lacks the Debian libraries).
here="$(cd "$(dirname "$0")/.." && pwd)"
LD_LIBRARY_PATH="$here/${CARRY_DIR:-.carry}/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "$here/${CARRY_DIR:-.carry}/bin/memplan" "$@"
