#!/usr/bin/env bash
# The GPU check (issue 58): experiments/full_scale/gpu_check.py's parts on one H100/H200 in at most 8 minutes, one
# JSON out.
#
#     bash experiments/full_scale/gpu_check.sh --prepare     # here, once: wheels and real-text data into .gpu_check/
#     bash experiments/full_scale/gpu_check.sh [gpu_check.py flags]     # on the GPU machine, from the repository root
#     bash experiments/full_scale/gpu_check.sh --dry-run     # anywhere: CPU, every shape shrunk
#
# --prepare (needs pip's package index) downloads the wheels the GPU machine lacks or has at another version
# (transformers, datasets, faiss-cpu and datasets' dill and multiprocess, at this environment's versions, for CPython
# 3.12 on x86-64) into .gpu_check/whl, copies the real-text GPU config's three data files from DATA_SRC (default
# ../shared/data/real) into .gpu_check/data (at the repository root, wherever this script lives), adds /.gpu_check/ to
# .git/info/exclude and prints the size (about 40 MB; what travels must stay under 64 MiB). Then, with the device tool:
# run(command="bash experiments/full_scale/gpu_check.sh", carry=[".gpu_check"], timeout_s=600).
# On the GPU machine (nothing can be downloaded there) it installs the carried wheels into a folder of their own
# (PYTHONPATH), the checkout in editable mode without dependencies if `realm` is not importable yet, and runs the
# check with its parts' folders under WORK (default /tmp/gpu_check). What comes back is small, in ${OUT:-runs/gpu_check}:
# gpu_check.json (every figure; rewritten after each part), gpu_check.md (the tables for docs/performance.md, also
# `python -m experiments.full_scale.gpu_check --table gpu_check.json`), console.log, and logs.tar.gz (each part's log
# and JSON).
set -u
cd "$(dirname "$0")/../.." || exit 1
PY=${PYTHON:-python3}
STASH=.gpu_check

if [ "${1:-}" = --prepare ]; then
    # note: git's own path for the exclude file, so a worktree (where .git is a file) works too
    exclude=$(git rev-parse --git-path info/exclude) && mkdir -p "$(dirname "$exclude")"
    grep -qx '/.gpu_check/' "$exclude" 2>/dev/null || echo '/.gpu_check/' >> "$exclude"
    mkdir -p "$STASH/whl" "$STASH/data"
    pins=$($PY -m pip list --format=freeze 2>/dev/null \
        | grep -iE '^(transformers|datasets|faiss-cpu|dill|multiprocess)==' | tr '\n' ' ')
    # note: a python3 outside the project's environment (a pyenv shim, say) lists none of them
    [ "$(echo "$pins" | wc -w)" -eq 5 ] || {
        echo "--prepare: $PY -m pip lists '$pins', not all of transformers, datasets, faiss-cpu, dill and" \
            "multiprocess: run it with the project's environment active, or PYTHON=/path/to/its/python" >&2
        exit 1
    }
    # shellcheck disable=SC2086  # note: one word a pin
    $PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d "$STASH/whl" $pins || exit 1
    src=${DATA_SRC:-../shared/data/real}
    for f in wikipedia_vital10k/summaries_en-us.json dpr_qas/topics.dpr.nq.dev.txt nq_open/NQ-open.dev.jsonl; do
        cp "$src/$f" "$STASH/data/" || echo "missing $src/$f: the real_text part will be skipped"
    done
    echo "prepared $STASH ($(du -sh "$STASH" | cut -f1)): $pins"
    echo 'device tool: run(command="bash experiments/full_scale/gpu_check.sh", carry=[".gpu_check"], timeout_s=600)'
    exit 0
fi

export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 WANDB_MODE=disabled
export TOKENIZERS_PARALLELISM=false
DRY=false
for arg in "$@"; do [ "$arg" = --dry-run ] && DRY=true; done
# note: a dry run uses this environment as it is (the carried wheels are for the GPU machine's CPython 3.12)
if ! $DRY && compgen -G "$STASH/whl/*.whl" > /dev/null; then
    SITE=/tmp/gpu_check_site
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
        "$STASH"/whl/*.whl || exit 1
    export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
fi
if ! $DRY && ! $PY -c "import realm.trainer.pretrain_loop" 2> /dev/null; then
    # note: editable, as in development: the benches put the checkout first on sys.path, and only the editable
    # finder maps its process folders (trainer/ is realm.trainer) behind the checkout's own realm/
    $PY -m pip install -q --no-index --no-deps --no-build-isolation -e . || exit 1
fi

RESULTS=${OUT:-runs/gpu_check}
mkdir -p "$RESULTS"
RESULTS=$(cd "$RESULTS" && pwd)
if [ -n "${OUT:-}" ]; then WORK=${WORK:-/tmp/gpu_check}; else WORK=${WORK:-$RESULTS/work}; fi
$PY -m pip list 2>/dev/null | grep -iE '^(torch|transformers|datasets|faiss-cpu|accelerate|numpy) ' > "$RESULTS/console.log"
# note: the check keeps its own budget (480 s; at most 520 s, see --full-pipelines); this outer limit only guards
# the device's 10-minute command (setup included) against a hang, leaving time to pack the logs
timeout -k 5 545 $PY -m experiments.full_scale.gpu_check --out "$WORK" --json "$RESULTS/gpu_check.json" "$@" 2>&1 \
    | tee -a "$RESULTS/console.log"
status=${PIPESTATUS[0]}
$PY -m experiments.full_scale.gpu_check --table "$RESULTS/gpu_check.json" > "$RESULTS/gpu_check.md" \
    2>> "$RESULTS/console.log"
(cd "$WORK" && find . -maxdepth 3 -type f \( -name '*.log' -o -name '*.json' -o -name '*.xml' \) -size -4M -print0 \
    | tar -czf "$RESULTS/logs.tar.gz" --null -T -)
exit "$status"
