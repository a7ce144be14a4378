#!/usr/bin/env bash
# The main job: set up, build, and train the default model with DiLoCo on the built-in corpus.
# Arguments go to `diloco run`, e.g. scripts/run.sh configs/streaming.toml --set train.steps=200
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
exec build/apps/diloco run "$@"
