#!/usr/bin/env bash
# Set up, build, and run every test with ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
cd build
ctest --output-on-failure -j "${JOBS:-2}" --timeout 600
