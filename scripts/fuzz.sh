#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (in build-fuzz/, fuzz targets only) and runs each for
# SECONDS (default 60), then prints per target: executions, exec/s, new corpus units, crashes.
#
#   scripts/fuzz.sh [SECONDS] [--runs N] [--merge] [--build-only] [TARGET...]
#
# --runs N      stops a target after N executions (or SECONDS, whichever comes first): e.g.
#               `scripts/fuzz.sh 7200 --runs 10000000` runs each target to 10M executions
# --merge       adds the new inputs that add coverage to tests/fuzz/corpus/<target>/ (libFuzzer
#               -merge=1: inputs that reach nothing new stay out, so the corpus stays small)
# --build-only  builds the fuzz targets and runs none
# TARGET...     a subset of the targets (default: all)
# Environment:  BUILD_DIR (build-fuzz), JOBS (fuzzers run at once, 1), OUT (where new inputs and
#               crash reproducers go; a new temporary directory by default), SEEDS (a directory
#               with a <target>/ folder of more inputs to start from, e.g. an earlier OUT).
# A crash, leak, timeout or out-of-memory stops that target; the script names the reproducer file
# and exits 1. Replay one with build-fuzz/tests/fuzz_<target> FILE.
set -euo pipefail
cd "$(dirname "$0")/.."

all_targets=(wire_message fragment_inbox codec checkpoint config site_frame site_session)
# Largest input per target: a bit above the largest seed, so the fuzzer explores the structure
# of the inputs instead of ever longer ones (a longer input costs time and finds nothing new).
declare -A max_len=([wire_message]=4096 [fragment_inbox]=4096 [codec]=1024 [checkpoint]=4096
                    [config]=4096 [site_frame]=4096 [site_session]=8192)

seconds=60
runs=-1
merge=0
build_only=0
targets=()
want_runs=0
for a in "$@"; do
  if [[ $want_runs -eq 1 ]]; then
    [[ "$a" =~ ^[0-9]+$ ]] || { echo "fuzz.sh: --runs takes a number of executions (got '$a')" >&2; exit 2; }
    runs=$a want_runs=0
    continue
  fi
  case "$a" in
    --runs) want_runs=1 ;;
    --merge) merge=1 ;;
    --build-only) build_only=1 ;;
    -h|--help) sed -n '2,/^set /p' "$0" | grep '^#' | sed 's/^# \{0,1\}//'; exit 0 ;;
    ''|*[!0-9]*)
      if [[ -n "${max_len[$a]:-}" ]]; then targets+=("$a")
      else echo "fuzz.sh: unknown argument '$a' (targets: ${all_targets[*]})" >&2; exit 2; fi ;;
    *) seconds=$a ;;
  esac
done
[[ $want_runs -eq 1 ]] && { echo "fuzz.sh: --runs needs a number" >&2; exit 2; }
[[ ${#targets[@]} -eq 0 ]] && targets=("${all_targets[@]}")
build=${BUILD_DIR:-build-fuzz}
jobs=${JOBS:-1}

# clang with libFuzzer and the sanitizer runtimes?
if ! command -v clang++ >/dev/null ||
   ! echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' |
     clang++ -x c++ -fsanitize=fuzzer,address,undefined - -o /dev/null 2>/dev/null; then
  echo "fuzz.sh: needs clang with libFuzzer: scripts/setup.sh --fuzz (apt-get install clang libclang-rt-14-dev)" >&2
  exit 2
fi

if [[ ! -f "$build/CMakeCache.txt" ]]; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
    -DDILOCO_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDILOCO_BUILD_APPS=OFF \
    -DDILOCO_BUILD_BENCHMARKS=OFF -DDILOCO_TORCH=OFF >/dev/null
fi
cmake --build "$build" -j "${BUILD_JOBS:-2}" --target "${targets[@]/#/fuzz_}"
[[ $build_only -eq 1 ]] && exit 0

out=${OUT:-$(mktemp -d -t diloco-fuzz.XXXXXX)}
mkdir -p "$out"
echo "fuzz.sh: ${#targets[@]} targets, ${seconds} s each$([[ $runs -ge 0 ]] && echo " or $runs executions"), $jobs at a time; new inputs and logs in $out"

run_one() {
  local t=$1
  mkdir -p "$out/$t/new" "$out/$t/crashes"
  # New inputs go to the first directory; the tree's corpus is read, never written here.
  "$build/tests/fuzz_$t" "$out/$t/new" "tests/fuzz/corpus/$t" ${SEEDS:+"$SEEDS/$t"} -max_total_time="$seconds" \
    -runs="$runs" -max_len="${max_len[$t]}" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$out/$t/crashes/" >"$out/$t/log" 2>&1 || true
}
running=0
for t in "${targets[@]}"; do
  run_one "$t" &
  running=$((running + 1))
  if [[ $running -ge $jobs ]]; then wait -n || true; running=$((running - 1)); fi
done
wait

stat() { sed -n "s/^stat::$2: *//p" "$out/$1/log" | tail -1; }
status=0
printf '%-16s %14s %10s %10s %8s\n' target executions exec/s new_units crashes
for t in "${targets[@]}"; do
  crashes=("$out/$t/crashes"/*)
  [[ -e "${crashes[0]}" ]] || crashes=()
  printf '%-16s %14s %10s %10s %8s\n' "$t" "$(stat "$t" number_of_executed_units)" \
    "$(stat "$t" average_exec_per_sec)" "$(stat "$t" new_units_added)" "${#crashes[@]}"
  for c in "${crashes[@]}"; do
    echo "  reproducer: $c (log: $out/$t/log)"
    status=1
  done
  if [[ -z "$(stat "$t" number_of_executed_units)" && ${#crashes[@]} -eq 0 ]]; then
    echo "  no final stats: see $out/$t/log"
    status=1
  fi
done

if [[ $merge -eq 1 ]]; then
  for t in "${targets[@]}"; do
    before=$(ls "tests/fuzz/corpus/$t" | wc -l)
    "$build/tests/fuzz_$t" -merge=1 -max_len="${max_len[$t]}" "tests/fuzz/corpus/$t" "$out/$t/new" \
      >"$out/$t/merge.log" 2>&1
    echo "merge $t: $before -> $(ls "tests/fuzz/corpus/$t" | wc -l) inputs"
  done
fi
exit $status
