#!/usr/bin/env bash
# scripts/prepare_text.sh on the first 20 modules of the Python standard library (2 held out) with
# a 512-piece tokenizer, then a short decoupled run of configs/text.toml on what it wrote: the
# real-text path end to end, in seconds. Then DEV=1's dev split, taken out of the training files.
#   text_test.sh DILOCO SOURCE_DIR
set -euo pipefail
diloco=$1
src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

DILOCO="$diloco" MAX_FILES=20 VOCAB=512 "$src/scripts/prepare_text.sh" "$work/text"
grep -q '^files 18 train, 2 held out' "$work/text/meta.txt"
eval_tokens=$(awk '$1 == "eval_tokens" {print $2}' "$work/text/meta.txt")
eval_bytes=$(awk '$1 == "eval_bytes" {print $2}' "$work/text/meta.txt")
[ "$eval_tokens" -gt 1000 ] && [ "$eval_bytes" -gt "$eval_tokens" ] || { echo "bad meta: $(cat "$work/text/meta.txt")"; exit 1; }

# DEV=1: a third split (the 5th and 15th files) for choosing settings, out of the training files.
DILOCO="$diloco" MAX_FILES=20 VOCAB=512 DEV=1 "$src/scripts/prepare_text.sh" "$work/text-dev" >/dev/null
grep -q '^files 16 train, 2 held out' "$work/text-dev/meta.txt"
grep -q '^dev_files 2$' "$work/text-dev/meta.txt"
dev_tokens=$(awk '$1 == "dev_tokens" {print $2}' "$work/text-dev/meta.txt")
[ "$dev_tokens" -gt 1000 ] && [ -f "$work/text-dev/shards/dev_000000.bin" ] || { echo "bad dev split: $(cat "$work/text-dev/meta.txt")"; exit 1; }
# the dev files come out of the training files: the two splits together are the training text without DEV
[ $(( $(wc -c <"$work/text-dev/train.txt") + $(wc -c <"$work/text-dev/dev.txt") )) -eq "$(wc -c <"$work/text/train.txt")" ] \
  && ! cmp -s "$work/text-dev/eval.txt" "$work/text-dev/dev.txt" || { echo "dev split not taken from the training files"; exit 1; }
grep -q '^dev' "$work/text/meta.txt" && { echo "a dev split without DEV=1"; exit 1; }

cd "$work"  # configs/text.toml's paths are relative: data/text/shards/...
mkdir -p data && ln -s "$work/text" data/text
"$diloco" run "$src/configs/text.toml" --set model.vocab=512 --set train.islands=2 --set train.steps=40 \
  --set train.H=10 --set train.eval_windows=32 --set train.round_eval_windows=8 --set quorum.min_islands=2 \
  --set inner.warmup_steps=5
