#!/usr/bin/env bash
# The index builder alone, on GPUs of its own, for a run whose trainer runs elsewhere on the same shared run
# directory (launch/pretrain.sh with BUILDER_GPUS=none). It builds each version the trainer exports with one process
# per GPU (--enable_distributed: each embeds its shard of the blocks, rank 0 publishes) and exits once the trainer
# has finished and the last export is indexed.
#   launch/index.sh --run_dir /shared/runs/base [--index.factory=HNSW32 ...]        # every visible GPU of this node
#   sbatch launch/slurm/index.sbatch --run_dir /shared/runs/base                    # several nodes (multi_node)
# Knobs: BUILDER_GPUS (default: every visible GPU), BUILDER_CONFIG (default configs/index/default.yaml),
# BUILDER_PRECISION (default bf16); multi_node with BUILDER_NODES=all (what index.sbatch sets): NUM_MACHINES,
# MACHINE_RANK, MAIN_PROCESS_IP and BUILDER_PORT (default MAIN_PROCESS_PORT + 1), one group over every node's GPUs.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=launch/common.sh
source launch/common.sh
TOPOLOGY="${TOPOLOGY:-single_node_gpus}"
BUILDER_GPUS="${BUILDER_GPUS:-$(visible_gpus)}"
if [[ -z "$BUILDER_GPUS" ]]; then
    echo "launch/index.sh: no GPU is visible (set BUILDER_GPUS, or run python -m realm.index_builder.watch on CPU)" >&2
    exit 2
fi
builder_command "$BUILDER_GPUS"
echo "launch/index.sh: index builder on GPU(s) $BUILDER_GPUS (${BUILDER_CMD[*]})" >&2
# note: a builder has nothing to checkpoint: a stopped build leaves finished shards, which the next start reuses
CUDA_VISIBLE_DEVICES="$BUILDER_GPUS" exec "${BUILDER_CMD[@]}" --config "${BUILDER_CONFIG:-configs/index/default.yaml}" \
    --device=cuda --precision="${BUILDER_PRECISION:-bf16}" "$@"
