#!/usr/bin/env bash
# `diloco tokenize`: a SentencePiece model trained by spm_train on this repository's README, the
# README encoded into llm.c shards whose ids must be spm_encode's (after one BOS), and a short run
# that trains on them through data.corpus = "tokens".
#   tokenize_test.sh DILOCO SOURCE_DIR
set -euo pipefail
diloco=$1
src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

spm_train --input="$src/README.md" --model_prefix="$work/spm" --vocab_size=400 --model_type=unigram \
  --character_coverage=1.0 --num_threads=1 --minloglevel=2 >"$work/spm_train.log" 2>&1
"$diloco" tokenize --model "$work/spm.model" "$src/README.md" --out "$work/shards" --prefix train --shard-tokens 4000
"$diloco" tokenize --model "$work/spm.model" "$src/benchmarks/README.md" --out "$work/shards" --prefix val
spm_encode --model="$work/spm.model" --output_format=id <"$src/README.md" >"$work/reference.ids"

python3 - "$work" <<'PY'
import glob, struct, sys
work = sys.argv[1]
files = sorted(glob.glob(work + "/shards/train_*.bin"))
assert len(files) >= 2, f"expected several shards of 4000 tokens, got {files}"
ids = []
for f in files:
    b = open(f, "rb").read()
    magic, version, count = struct.unpack("<3i", b[:12])
    assert (magic, version) == (20240520, 1), (f, magic, version)
    assert len(b) == 1024 + 2 * count, (f, len(b), count)
    assert count <= 4000, (f, count)
    ids += struct.unpack(f"<{count}H", b[1024:])
reference = [1] + [int(x) for line in open(work + "/reference.ids") for x in line.split()]
assert ids == reference, f"{len(ids)} shard tokens differ from spm_encode's {len(reference)}"
print(f"tokenize test: {len(ids)} tokens in {len(files)} shards match spm_encode")
PY

"$diloco" run "$src/configs/default.toml" --set train.mode='"diloco"' --set model.kind='"mlp"' --set model.vocab=400 --set model.seq_len=32 \
  --set model.n_embd=16 --set model.hidden=64 --set data.corpus='"tokens"' \
  --set data.path="\"$work/shards/train_*.bin\"" --set data.eval_path="\"$work/shards/val_*.bin\"" \
  --set train.islands=2 --set train.steps=40 --set train.H=10 --set train.batch=4 --set train.eval_windows=16 \
  --set inner.warmup_steps=5
