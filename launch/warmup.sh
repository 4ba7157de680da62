#!/usr/bin/env bash
# Reader warm-up (realm.warmstart.warmup) under accelerate: the encoder reads block sentences with a salient span
# masked against their own block, in pre-training's input layout; no index, no builder.
#   TOPOLOGY=multi_cpu launch/warmup.sh --config configs/warmup/demo.yaml --train.run_dir=runs/warmup \
#       --data.tokenizer=T --data.blocks=B
#   launch/warmup.sh --config configs/warmup/base.yaml --train.run_dir=runs/nq-warmup --data.blocks=runs/nq/blocks \
#       --data.heldout_articles=runs/nq/cloze/heldout_articles.txt                              # GPUs
# train.batch_size is the global batch (split over the processes; it must divide by their number). The main process
# splits and tags the sentences of task.max_blocks sampled blocks before the others start (configs/warmup/base.yaml
# says how long that takes).
# Output: RUN/encoder/, which pre-training reads with --train.init_encoder=RUN/encoder.
# Knobs (environment variables): TOPOLOGY, NUM_PROCESSES, MIXED_PRECISION, MAIN_PROCESS_PORT and, for multi_node,
# NUM_MACHINES, MACHINE_RANK, MAIN_PROCESS_IP, as in launch/pretrain.sh; TRAINER_GPUS: GPU ids to train on
# (default: all visible; NUM_PROCESSES defaults to one process per GPU, times NUM_MACHINES).
# Preemption: a SIGUSR1 or SIGTERM checkpoints the job at its next step and exits with 143 (launch/common.sh); run it
# again with the same arguments to resume (train.resume=auto).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=launch/common.sh
source launch/common.sh
launch_setup
run_training_job realm.warmstart.warmup "$@" || exit $?
