#!/usr/bin/env bash
# REALM pre-training under accelerate; the topology (processes, device, precision) lives in launch/accelerate/*.yaml.
#   TOPOLOGY=multi_cpu launch/pretrain.sh --config configs/pretrain/tiny.yaml --train.run_dir=runs/tiny
# Knobs: TOPOLOGY (a launch/accelerate/*.yaml name; default single_cpu), MAIN_PROCESS_PORT (default 29500),
#        OMP_NUM_THREADS (threads per process).
set -euo pipefail
cd "$(dirname "$0")/.."
TOPOLOGY="${TOPOLOGY:-single_cpu}"
if [[ "$TOPOLOGY" == *cpu ]]; then
    # note: accelerate's multi-process launcher ignores the YAML's use_cpu; without this each process finds no GPU,
    # skips init_process_group and trains alone (2 copies of a 1-process run).
    export ACCELERATE_USE_CPU=true
fi
exec accelerate launch --config_file "launch/accelerate/${TOPOLOGY}.yaml" \
    --main_process_port "${MAIN_PROCESS_PORT:-29500}" -m trainer.pretrain "$@"
