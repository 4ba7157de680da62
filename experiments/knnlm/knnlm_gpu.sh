#!/usr/bin/env bash
# kNN-LM evaluation speed on a GPU through the user's own commands (`realm knnlm build` and `realm knnlm evaluate
# --lm.device=cuda --knn.gpu_search=true`), at experiments/knnlm/knnlm.py's size, each setting's tokens/s beside the
# LM alone's.
#
#     bash experiments/knnlm/knnlm_gpu.sh WORK [SCRATCH]
#
# WORK: the --work folder of a `python -m experiments.knnlm.knnlm` run (its lm/, TU.jsonl, E.jsonl, U.jsonl).
# SCRATCH (default a new temporary folder): the datastores (T+U exact and IVF512,PQ8; with BIG=1 also those of a
# 12 x 768 GPT-2).
# Queries: E (knnlm.py's evaluation split) and U, 7x more tokens for a steadier figure (U is inside the
# datastore, so only its speed is read; QUERIES="E" for E alone). Each setting runs REPS times (default 2); the table
# gives medians.
# BIG=1 adds a randomly initialised GPT-2 of GPT-2-small's shape (12 x 768, the tiny LM's vocabulary): its speed
# only (its perplexity means nothing), to show the ratio with an LM whose forward costs what real ones cost.
# Without faiss-gpu, an IVF-PQ datastore is searched by FAISS on the CPU (the log says so); exact ones by torch.
set -u
WORK=$(cd "$1" && pwd); SCRATCH=${2:-$(mktemp -d)}; REPS=${REPS:-2}; DEV=${DEV:-cuda}
GPU=$([ "$DEV" = cuda ] && echo true || echo false)
K="python3 -P -m realm.cli.main knnlm"  # note: -P, so that the installed package is used, not a checkout's folders
mkdir -p "$SCRATCH" && cd "$SCRATCH" || exit 1
echo "work $WORK, scratch $SCRATCH, device $DEV"

build() {  # NAME LM FACTORY
    local t=$SECONDS
    $K build --lm.model "$2" --corpus.path "$WORK/TU.jsonl" --out "ds/$1" --lm.device "$DEV" --lm.batch_size 64 \
        --datastore.index.factory "$3" > "build_$1.log" 2>&1 || { echo "build $1 failed:"; tail -n 5 "build_$1.log"; exit 1; }
    echo "build $1: $(( SECONDS - t )) s"
}
evaluate() {  # TAG LM DATA [evaluate options]
    local tag=$1 lm=$2 data=$3 r; shift 3
    for r in $(seq "$REPS"); do
        $K evaluate --lm.model "$lm" --data.path "$WORK/$data.jsonl" --out "ev/$tag.$r" --lm.device "$DEV" \
            --lm.batch_size 64 --knn.k 1024 --records false "$@" > "ev_$tag.$r.log" 2>&1 \
            || { echo "$tag.$r failed:"; tail -n 5 "ev_$tag.$r.log"; }
    done
}

build TU "$WORK/lm" Flat
build TU-ivfpq "$WORK/lm" IVF512,PQ8
for data in ${QUERIES:-E U}; do
    evaluate "lm-$data" "$WORK/lm" $data
    evaluate "exact-$data" "$WORK/lm" $data --datastore ds/TU --knn.gpu_search $GPU
    [ $data = E ] && evaluate "exact-faiss-cpu-$data" "$WORK/lm" $data --datastore ds/TU
    evaluate "ivfpq8-$data" "$WORK/lm" $data --datastore ds/TU-ivfpq --nprobe 8 --knn.gpu_search $GPU
done
if [ "${BIG:-1}" = 1 ] && [[ " ${QUERIES:-E U} " == *" U "* ]]; then
    python3 -P - "$WORK/lm" <<'EOF'
import sys

import torch
from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel

tokenizer = AutoTokenizer.from_pretrained(sys.argv[1])
torch.manual_seed(0)
config = GPT2Config(vocab_size=len(tokenizer), n_positions=128, n_embd=768, n_layer=12, n_head=12,
                    bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
GPT2LMHeadModel(config).save_pretrained("big")
tokenizer.save_pretrained("big")
EOF
    build big-TU big Flat
    build big-TU-ivfpq big IVF512,PQ48
    evaluate big-lm-U big U
    evaluate big-exact-U big U --datastore ds/big-TU --knn.gpu_search $GPU
    evaluate big-ivfpq8-U big U --datastore ds/big-TU-ivfpq --nprobe 8
fi
python3 - <<'EOF'
import json
import statistics
from pathlib import Path

runs: dict[str, list[dict]] = {}
for f in sorted(Path("ev").glob("*/summary.json")):
    runs.setdefault(f.parent.name.rsplit(".", 1)[0], []).append(json.loads(f.read_text()))
print("| LM | queries | search | tok/s (median) | / LM alone | ppl (k 1024, lambda 0.25, tau 1) |")
print("|---|---|---|---|---|---|")
for tag, summaries in runs.items():
    big, name = tag.startswith("big-"), tag.removeprefix("big-")
    search, data = name.rsplit("-", 1)
    alone = statistics.median(s["lm_tokens_per_s"] for s in runs[("big-" if big else "") + f"lm-{data}"])
    speed = statistics.median(s["knnlm_tokens_per_s"] for s in summaries)
    # note: U is in the datastore (it finds itself), and the big LM is untrained: no perplexity to read there
    ppl = f"{summaries[0]['ppl_knnlm']:.2f}" if data == "E" and not big and search != "lm" else "-"
    print(f"| {'GPT-2 12x768 (random)' if big else 'tiny (bench)'} | {data} ({summaries[0]['tokens']:,}) | "
          f"{'LM alone' if search == 'lm' else search} | {speed:,.0f} | {speed / alone:.3f} | {ppl} |")
EOF
