#!/usr/bin/env bash
# Open-domain QA fine-tuning (realm.finetune.train) under accelerate; the index is frozen, so there is no builder.
#   TOPOLOGY=multi_cpu launch/finetune.sh --config configs/finetune/demo.yaml --init.run=runs/demo \
#       --task.name=jsonl --task.train=Q.jsonl --task.dev=D.jsonl --train.run_dir=runs/qa
#   launch/finetune.sh --config configs/finetune/base.yaml --init.run=runs/nq --task.name=nq ...   # GPUs
# Knobs (environment variables): TOPOLOGY, NUM_PROCESSES, MIXED_PRECISION, MAIN_PROCESS_PORT and, for multi_node,
# NUM_MACHINES, MACHINE_RANK, MAIN_PROCESS_IP, as in launch/pretrain.sh; TRAINER_GPUS: GPU ids to train on
# (default: all visible; NUM_PROCESSES defaults to one process per GPU, times NUM_MACHINES).
# Preemption: a SIGUSR1 or SIGTERM checkpoints the job at its next step and exits with 143 (launch/common.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=launch/common.sh
source launch/common.sh
launch_setup
run_training_job realm.finetune.train "$@" || exit $?
