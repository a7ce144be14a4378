#!/usr/bin/env bash
# Prepares the real-text corpus of configs/text.toml from what the machine already has (no
# download): the Python standard library's top-level modules that Debian's python3 installs,
# a SentencePiece tokenizer trained on the training files by spm_train, and llm.c token shards
# written by `diloco tokenize`.
#
#   scripts/prepare_text.sh [OUT_DIR]          (default: data/text)
#
# Files are taken in byte order of their names (LC_ALL=C); every EVAL_EVERY-th one (the 10th, the
# 20th, ...) is held out for evaluation and never seen by the tokenizer. Writes into OUT_DIR:
#   train.txt, eval.txt     the two splits, files concatenated in that order
#   spm.model, spm.vocab    the tokenizer (VOCAB pieces, unigram, byte fallback, text kept as is)
#   shards/train_*.bin      llm.c shards of the training files (one document per file, BOS first)
#   shards/val_*.bin        the same for the held-out files
#   dev.txt, shards/dev_*.bin  with DEV=1 only: a second held-out split for choosing settings
#                           (benchmarks/text_parity.py), the middle file of every EVAL_EVERY (the
#                           5th, the 15th, ...), taken out of the training files
#   meta.txt                vocab, token counts, and eval_bytes: the bytes the held-out tokens
#                           encode (the held-out lines without their line breaks, which `diloco
#                           tokenize` does not encode), for bits/byte
# Settings from the environment: PYLIB (the standard library's folder; default: the one of
# /usr/bin/python3), VOCAB (4096), EVAL_EVERY (10), DEV (0; 1 writes the dev split), MAX_FILES
# (0: all; a smaller corpus for tests), DILOCO (the app; default build/apps/diloco).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:-data/text}"
vocab="${VOCAB:-4096}"
every="${EVAL_EVERY:-10}"
dev="${DEV:-0}"
max_files="${MAX_FILES:-0}"
diloco="${DILOCO:-$root/build/apps/diloco}"
pylib="${PYLIB:-$(/usr/bin/python3 -c 'import sysconfig; print(sysconfig.get_paths()["stdlib"])')}"

for tool in spm_train "$diloco"; do
  command -v "$tool" >/dev/null || { echo "prepare_text: $tool not found (scripts/setup.sh installs sentencepiece; scripts/build.sh builds diloco)" >&2; exit 2; }
done
[ -f "$pylib/os.py" ] || { echo "prepare_text: $pylib does not look like a Python standard library (no os.py)" >&2; exit 2; }

mkdir -p "$out/shards"
rm -f "$out"/shards/*.bin
mapfile -t files < <(cd "$pylib" && LC_ALL=C ls -- *.py | LC_ALL=C sort)
[ "$max_files" -gt 0 ] && files=("${files[@]:0:$max_files}")
train=() held=() devs=()
for i in "${!files[@]}"; do
  if (( (i + 1) % every == 0 )); then held+=("$pylib/${files[$i]}")
  elif [ "$dev" = 1 ] && (( (i + 1) % every == every / 2 )); then devs+=("$pylib/${files[$i]}")
  else train+=("$pylib/${files[$i]}"); fi
done
[ "${#held[@]}" -gt 0 ] || { echo "prepare_text: no held-out file (fewer than EVAL_EVERY=$every files)" >&2; exit 2; }
cat "${train[@]}" >"$out/train.txt"
cat "${held[@]}" >"$out/eval.txt"
rm -f "$out/dev.txt"
[ "${#devs[@]}" -eq 0 ] || cat "${devs[@]}" >"$out/dev.txt"

# identity normalisation and no whitespace clean-up: source code keeps its indentation; byte
# fallback: every byte of the held-out text has tokens, none becomes <unk>.
spm_train --input="$out/train.txt" --model_prefix="$out/spm" --vocab_size="$vocab" --model_type=unigram \
  --character_coverage=1.0 --byte_fallback=true --normalization_rule_name=identity \
  --remove_extra_whitespaces=false --allow_whitespace_only_pieces=true --split_digits=true \
  --num_threads=1 --minloglevel=2 >"$out/spm_train.log" 2>&1 \
  || { tail -20 "$out/spm_train.log" >&2; exit 1; }

"$diloco" tokenize --model "$out/spm.model" "${train[@]}" --out "$out/shards" --prefix train --shard-tokens 1000000
"$diloco" tokenize --model "$out/spm.model" "${held[@]}" --out "$out/shards" --prefix val
[ "${#devs[@]}" -eq 0 ] || "$diloco" tokenize --model "$out/spm.model" "${devs[@]}" --out "$out/shards" --prefix dev

count() {  # tokens in the llm.c shards matching $1 (the header's third int32)
  local n=0 f
  for f in $1; do n=$(( n + $(od -An -t d4 -j 8 -N 4 "$f") )); done
  echo "$n"
}
eval_bytes=$(( $(wc -c <"$out/eval.txt") - $(wc -l <"$out/eval.txt") ))
{
  echo "source $pylib"
  echo "files ${#train[@]} train, ${#held[@]} held out (every ${every}th)"
  echo "vocab $vocab"
  echo "train_tokens $(count "$out/shards/train_*.bin")"
  echo "train_bytes $(wc -c <"$out/train.txt")"
  echo "eval_tokens $(count "$out/shards/val_*.bin")"
  echo "eval_bytes $eval_bytes"
  if [ "${#devs[@]}" -gt 0 ]; then
    echo "dev_files ${#devs[@]}"
    echo "dev_tokens $(count "$out/shards/dev_*.bin")"
    echo "dev_bytes $(( $(wc -c <"$out/dev.txt") - $(wc -l <"$out/dev.txt") ))"
  fi
} >"$out/meta.txt"
cat "$out/meta.txt"
