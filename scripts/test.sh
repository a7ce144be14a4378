#!/usr/bin/env bash
# Set up, build, and run the tests with ctest.
#   scripts/test.sh              the suite in build/ (Release), then the sanitized runs (CI)
#   scripts/test.sh --plain      only the suite in build/ (day-to-day use)
#   scripts/test.sh --sanitize   only the sanitized runs: the whole suite under AddressSanitizer +
#                                UndefinedBehaviorSanitizer (build-asan/), then the actor tests under
#                                ThreadSanitizer (build-tsan/)
# Any sanitizer report fails the test that produced it; findings in libraries we do not build
# (CAF, system libraries) are silenced only by tests/sanitizers/*.supp, each entry with its reason.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="${JOBS:-2}"

plain=1
case "${1:-}" in
  "") ;;
  --plain)
    scripts/build.sh
    exec ctest --test-dir build --output-on-failure -j "$jobs" --timeout 600
    ;;
  --sanitize) plain=0 ;;
  *)
    echo "usage: scripts/test.sh [--plain | --sanitize]" >&2
    exit 2
    ;;
esac

if ((plain)); then
  scripts/build.sh
  ctest --test-dir build --output-on-failure -j "$jobs" --timeout 600
fi

scripts/setup.sh
supp="$PWD/tests/sanitizers"
# Sanitized code runs a few times slower: DILOCO_SANITIZE scales every test's TIMEOUT and the
# seed sweeps run 40 seeds instead of 200 (tests/CMakeLists.txt). Instrumented builds compile at
# -Og -g1, the library's math at -O2 (CMakeLists.txt): the whole tree in about 11 min on 2 cores.
# libtorch (the TorchScript backend and test_torch) stays out: Debian's libtorch is not built with
# the sanitizers, its tests spend their time inside it, and compiling its headers instrumented
# would add minutes for no coverage of our code beyond the thin wrapper.
common=(-G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDILOCO_BUILD_BENCHMARKS=OFF -DDILOCO_TORCH=OFF)
failed=()

# ---- AddressSanitizer + UndefinedBehaviorSanitizer: the whole suite ----
actor_tests=(test_supervisor_actor test_runtime_actors test_lockstep)
# halt_on_error: a UBSan report fails the test (the checks stay recoverable so that suppressions work).
export ASAN_OPTIONS="detect_leaks=1:detect_stack_use_after_return=1:check_initialization_order=1:strict_init_order=1:abort_on_error=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:suppressions=$supp/ubsan.supp"
export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0"
start=$SECONDS
cmake -S . -B build-asan "${common[@]}" -DDILOCO_SANITIZE=address,undefined -DDILOCO_BUILD_APPS=ON
cmake --build build-asan -j "$jobs"
echo "asan+ubsan build: $((SECONDS - start)) s"
start=$SECONDS
ctest --test-dir build-asan --output-on-failure -j "$jobs" --timeout 1800 ||
  failed+=("tests under AddressSanitizer + UBSan")
echo "asan+ubsan tests: $((SECONDS - start)) s"
unset ASAN_OPTIONS UBSAN_OPTIONS LSAN_OPTIONS

# ---- ThreadSanitizer: the actor tests ----
# Run also when the tests above failed: a race is news of its own.
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$supp/tsan.supp"
start=$SECONDS
cmake -S . -B build-tsan "${common[@]}" -DDILOCO_SANITIZE=thread -DDILOCO_BUILD_APPS=OFF
cmake --build build-tsan -j "$jobs" --target "${actor_tests[@]}"
echo "tsan build: $((SECONDS - start)) s"
start=$SECONDS
regex="^($(IFS='|'; echo "${actor_tests[*]}"))\$"
ctest --test-dir build-tsan --output-on-failure -j "$jobs" --timeout 1800 -R "$regex" || failed+=("the actor tests under ThreadSanitizer")
echo "tsan actor tests: $((SECONDS - start)) s"

if ((${#failed[@]})); then
  printf 'failed: %s\n' "${failed[@]}" >&2
  exit 1
fi
