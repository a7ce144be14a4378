#!/usr/bin/env bash
# Installs dependencies, configures (Release by default) and builds into build/ with 2 jobs.
# Extra arguments go to the CMake configure step, e.g. -DDILOCO_NATIVE=OFF.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-Release}" "$@"
cmake --build build -j "${JOBS:-2}"
