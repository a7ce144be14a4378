#!/usr/bin/env bash
# The main job: set up, build, and run the flagship: Decoupled DiLoCo on the actor runtime, losing
# a chip and an island on the way (configs/flagship.toml). Arguments go to `diloco run`, e.g.
# scripts/run.sh --http 9100, or scripts/run.sh configs/streaming.toml --set train.steps=200
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
exec build/apps/diloco run "$@"
