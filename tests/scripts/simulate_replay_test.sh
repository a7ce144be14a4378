#!/bin/sh
# `diloco run --simulate` replays bit for bit: the same seed and config give the same final
# parameters (hash), virtual time and rounds; another seed gives other parameters. A run started
# as on a CPU without FMA or AVX2 (glibc's libm and OpenBLAS masked to what it would pick) gives
# the same: --simulate pins both, and the products' blocking (replay.hpp).
# With --relays (more flags after CONFIG go to every run) each site's islands reach the syncer
# through a session, and its relay line is part of what must replay.
# usage: simulate_replay_test.sh DILOCO CONFIG [FLAG]...
set -eu
diloco=$1
config=$2
shift 2
flags="$*"
summary() {
  # shellcheck disable=SC2086
  "$diloco" run "$config" --simulate --quiet --set train.steps=120 $flags "$@" 2>&1 |
    sed -n -e 's/^done: \(.* global rounds\), final eval loss \([0-9.]*\).*/\1 \2/p' \
           -e 's/^relays: \(.*\)/relays: \1;/p' \
           -e 's/^simulated: \([0-9.]* s of virtual time\) in .*hash \([0-9a-f]*\).*/\1 \2/p' | tr '\n' ' ' | sed 's/ $//'
}
a=$(summary --seed 3)
b=$(summary --seed 3)
older=$(GLIBC_TUNABLES=glibc.cpu.hwcaps=-AVX2,-FMA OPENBLAS_CORETYPE=Sandybridge summary --seed 3)
c=$(summary --seed 4)
echo "seed 3: $a"
echo "seed 3 again: $b"
echo "seed 3 as on an older CPU: $older"
echo "seed 4: $c"
case "$a" in *"global rounds"*"virtual time"*) ;; *) echo "FAIL: no summary or no hash"; exit 1 ;; esac
case "$flags" in
  *--relays*)
    case "$a" in *"relays: "[1-9]*" sessions "*", "[1-9]*" frames relayed to the syncer, 0 refused by relays, 0 sessions refused;"*) ;;
      *) echo "FAIL: no frame through a relay, or some refused"; exit 1 ;; esac ;;
esac
[ "$a" = "$b" ] || { echo "FAIL: the same seed gave two runs"; exit 1; }
[ "$a" = "$older" ] || { echo "FAIL: the same seed gave another run as on an older CPU"; exit 1; }
[ "${a##* }" != "${c##* }" ] || { echo "FAIL: another seed gave the same parameters"; exit 1; }
echo PASS
