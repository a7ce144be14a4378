#!/bin/sh
# `diloco` loads libtorch only for a run whose model.kind is "torchscript": a command that does not
# use it starts without libtorch in the process; a decoupled run on TorchScript chips (the tiny GPT
# that make_torch_modules.py exports) loads the backend and trains; a missing module file and, in
# `diloco check`, a forward returning per-token losses are refused under model.path.
# usage: torch_app_test.sh DILOCO MODULES_DIR CONFIG
set -eu
diloco=$1
modules=$2
config=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

LD_DEBUG=files "$diloco" run --help >/dev/null 2>"$tmp/help.err"
loaded=$(grep -c 'file=libtorch' "$tmp/help.err" || true)
echo "libtorch files loaded by 'diloco run --help': $loaded"
[ "$loaded" = 0 ] || { echo "FAIL: diloco loaded libtorch for a command that does not use it"; exit 1; }

if ! LD_DEBUG=files "$diloco" run "$config" --set 'train.mode="decoupled"' --set 'model.kind="torchscript"' \
     --set "model.path=\"$modules/gpt_tiny.pt\"" --set model.seq_len=16 --set train.steps=40 --set train.H=10 \
     >"$tmp/run.out" 2>"$tmp/run.err"; then
  grep -v '^ *[0-9]*:' "$tmp/run.err" | tail -20; echo "FAIL: the torchscript run failed"; exit 1
fi
grep -q 'file=libtorch_cpu' "$tmp/run.err" || { echo "FAIL: the torchscript run did not load libtorch"; exit 1; }
first=$(awk '$1 == "1" { print $3; exit }' "$tmp/run.out")
final=$(sed -n 's/^done: .*final eval loss \([0-9.]*\).*/\1/p' "$tmp/run.out")
echo "TorchScript chips: eval loss $first after the first round, $final at the end"
[ -n "$first" ] && [ -n "$final" ] || { cat "$tmp/run.out"; echo "FAIL: no first-round or final eval loss"; exit 1; }
awk -v a="$first" -v b="$final" 'BEGIN { exit !(b < a) }' || { echo "FAIL: the loss did not fall"; exit 1; }

"$diloco" run "$config" --set 'model.kind="torchscript"' --set 'model.path="/nonexistent/m.pt"' >"$tmp/missing" 2>&1 || true
grep -q "model.path: no file '/nonexistent/m.pt'" "$tmp/missing" || {
  tail -5 "$tmp/missing"; echo "FAIL: a missing module was not refused under model.path"; exit 1; }
# A forward that returns per-token losses is refused by the configuration's check (the model is
# built once, forward probed), before any actor starts.
printf '[model]\nkind = "torchscript"\npath = "%s"\nseq_len = 16\n' "$modules/per_token.pt" >"$tmp/per_token.toml"
if "$diloco" check "$tmp/per_token.toml" >"$tmp/check" 2>&1; then
  cat "$tmp/check"; echo "FAIL: diloco check accepted a forward that returns per-token losses"; exit 1
fi
grep -q "model.path: .*forward must return the mean loss as a scalar" "$tmp/check" || {
  tail -5 "$tmp/check"; echo "FAIL: diloco check did not name model.path and the reason"; exit 1; }
echo PASS
