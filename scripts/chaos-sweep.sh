#!/usr/bin/env bash
# The seed sweep: `diloco run CONFIG --simulate` (configs/chaos_sweep.toml: chip, island and
# syncer kills, stragglers, partitions and lossy links at once) for N seeds, each replayable bit
# for bit from its seed.
#
#   scripts/chaos-sweep.sh N [FIRST] [--set KEY=VALUE]... [--relays]
#
# Seed S runs with `--seed S --set chaos.seed=S` (data, initial parameters and faults). It fails
# when the run exits non-zero (a diverged island or syncer, a stuck run, a supervision tree that
# gave up), commits no round, or refuses a frame: every peer of a simulated run is one of ours,
# so a refused frame is a frame our own units got wrong. Each failure is printed with the one
# command that replays it. Environment: DILOCO (the app; default build/apps/diloco), CONFIG
# (default configs/chaos_sweep.toml), JOBS (runs at once; default 2). --set overrides go to every
# run (and into the replay command), e.g. --set 'fragments.broadcast_to="contributors"'. --relays
# puts each site's islands behind a session with the syncer's gateway, as across processes
# (`diloco run --relays`); a run that relayed no frame fails then.
set -euo pipefail
cd "$(dirname "$0")/.."
n="${1:?usage: scripts/chaos-sweep.sh N [FIRST] [--set KEY=VALUE]... [--relays]}"
first=1
shift
if [[ $# -gt 0 && "$1" != --* ]]; then first=$1; shift; fi
sets=()
while [[ $# -gt 0 ]]; do
  if [[ "$1" == --relays ]]; then
    sets+=(--relays)
    shift
    continue
  fi
  [[ "$1" == --set && $# -ge 2 ]] || { echo "chaos-sweep: unexpected '$1' (want --set KEY=VALUE or --relays)" >&2; exit 2; }
  sets+=(--set "$2")
  shift 2
done
# One string for the runs (xargs starts a new shell per seed), quoted to be read back with eval.
SETS=""
[[ ${#sets[@]} -eq 0 ]] || SETS=$(printf '%q ' "${sets[@]}")
export SETS
export DILOCO="${DILOCO:-build/apps/diloco}" CONFIG="${CONFIG:-configs/chaos_sweep.toml}"
export OPENBLAS_NUM_THREADS=1  # one thread per run; the runs go in parallel instead
[[ -x "$DILOCO" ]] || { echo "chaos-sweep: no app at $DILOCO (build first, or set DILOCO)" >&2; exit 2; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

one() {
  local s=$1 log="$out/$1.log" why=""
  eval "\"\$DILOCO\" run \"\$CONFIG\" --simulate --quiet --seed \"\$s\" --set \"chaos.seed=\$s\" $SETS" > "$log" 2>&1
  local rc=$?
  [[ $rc -eq 0 ]] || why="exit code $rc: $(grep -m1 -E 'error|stopped' "$log" | cut -c1-200)"
  local done_line
  done_line=$(grep -m1 '^done: ' "$log" || true)
  if [[ -z "$why" && -z "$done_line" ]]; then why="no summary"; fi
  if [[ -z "$why" && "$done_line" =~ \ 0\ global\ rounds ]]; then why="no round committed"; fi
  if [[ -z "$why" && ! "$done_line" =~ \ 0\ frames\ refused ]]; then
    why="frames refused: $(grep -m1 'refused a frame' "$log" | sed 's/^ *[0-9.]*s *//')"
  fi
  if [[ -z "$why" && "$SETS" == *--relays* ]] && ! grep -qE '^relays: [1-9][0-9]* sessions .*, [1-9][0-9]* frames relayed' "$log"; then
    why="no frame went through a relay: $(grep -m1 '^relays: ' "$log" || echo 'no relays line')"
  fi
  local faults
  faults=$(grep -c 'injected fault' "$log" || true)
  if [[ -n "$why" ]]; then
    echo "FAIL seed $s: $why" > "$out/$s.result"
    echo "  replay: $DILOCO run $CONFIG --simulate --seed $s --set chaos.seed=$s $SETS" >> "$out/$s.result"
  else
    echo "ok seed $s: $faults faults, $(sed -n 's/.*final parameters hash \([0-9a-f]*\).*/hash \1/p' "$log")" > "$out/$s.result"
  fi
}
export -f one
export out
start=$SECONDS
seq "$first" $((first + n - 1)) | xargs -P "${JOBS:-2}" -I{} bash -c 'one {}'
failed=$(cat "$out"/*.result | grep -c '^FAIL' || true)
faults=$(cat "$out"/*.result | sed -n 's/^ok seed [0-9]*: \([0-9]*\) faults.*/\1/p' | awk '{s += $1} END {print s + 0}')
cat "$out"/*.result | grep -A1 '^FAIL' || true
echo "chaos sweep: $n seeds ($first..$((first + n - 1))) of $CONFIG ${SETS}in $((SECONDS - start)) s: $((n - failed)) passed," \
     "$failed failed; $faults faults injected in the runs that passed"
[[ "$failed" -eq 0 ]]
