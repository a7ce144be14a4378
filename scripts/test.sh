#!/usr/bin/env bash
# Set up, build, and run the tests with ctest.
#   scripts/test.sh              the suite in build/ (Release), then the part sanitized in CI: the
#                                decoders of network and disk input (their tests and the fuzz corpus
#                                replays) and the actor tests under AddressSanitizer + UBSan, the
#                                actor tests under ThreadSanitizer
#   scripts/test.sh --plain      only the suite in build/ (day-to-day use)
#   scripts/test.sh --sanitize   only the sanitized runs, all of them: the whole suite under
#                                AddressSanitizer + UndefinedBehaviorSanitizer (build-asan/), then the
#                                actor tests under ThreadSanitizer (build-tsan/)
# Any sanitizer report fails the test that produced it; findings in libraries we do not build
# (CAF, system libraries) are silenced only by tests/sanitizers/*.supp, each entry with its reason.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="${JOBS:-2}"

plain=1 asan_all=0
case "${1:-}" in
  "") ;;
  --plain)
    scripts/build.sh
    exec ctest --test-dir build --output-on-failure -j "$jobs" --timeout 600
    ;;
  --sanitize) plain=0 asan_all=1 ;;
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
# Sanitized code runs a few times slower: DILOCO_SANITIZE scales every test's TIMEOUT (tests/CMakeLists.txt).
# libtorch (the TorchScript backend and test_torch) stays out: Debian's libtorch is not built with the
# sanitizers, its tests spend their time inside it, and compiling its headers instrumented would add
# minutes to CI for no coverage of our code beyond the thin wrapper.
common=(-G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDILOCO_BUILD_BENCHMARKS=OFF -DDILOCO_TORCH=OFF)
failed=()

# ---- AddressSanitizer + UndefinedBehaviorSanitizer ----
# Instrumented compiles are what cost the time (about 62 min for the whole tree on 2 cores, README):
# after the plain suite only the code that reads bytes from the network and from disk is built this
# way, the decoders (Cap'n Proto frames, codecs, checkpoints, configuration, site frames, the front
# door's BASP rules) with their
# tests and their fuzz corpus replays, and the actor runtime with its tests (the app's HTTP server
# and end-to-end runs are what the rest would cost); `--sanitize` builds and runs everything.
actor_tests=(test_supervisor_actor test_runtime_actors test_lockstep)
asan_targets=(test_codec test_wire test_checkpoint test_door replay_wire_message replay_fragment_inbox replay_codec
          replay_checkpoint replay_config replay_site_frame replay_site_session "${actor_tests[@]}")
# halt_on_error: a UBSan report fails the test (the checks stay recoverable so that suppressions work).
export ASAN_OPTIONS="detect_leaks=1:detect_stack_use_after_return=1:check_initialization_order=1:strict_init_order=1:abort_on_error=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:suppressions=$supp/ubsan.supp"
export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0"
start=$SECONDS
if ((asan_all)); then
  cmake -S . -B build-asan "${common[@]}" -DDILOCO_SANITIZE=address,undefined -DDILOCO_BUILD_APPS=ON
  cmake --build build-asan -j "$jobs"
  select=()
else
  cmake -S . -B build-asan "${common[@]}" -DDILOCO_SANITIZE=address,undefined -DDILOCO_BUILD_APPS=OFF
  cmake --build build-asan -j "$jobs" --target "${asan_targets[@]}"
  select=(-R "^(test_codec|test_wire|test_checkpoint|test_door|fuzz_corpus_replays_through_.*|test_supervisor_actor|test_runtime_actors|test_lockstep)\$")
fi
echo "asan+ubsan build: $((SECONDS - start)) s"
start=$SECONDS
ctest --test-dir build-asan --output-on-failure -j "$jobs" --timeout 1800 "${select[@]}" ||
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
