#!/usr/bin/env bash
# Inverse Cloze Task warm start of the retriever (realm.warmstart.ict_train) under accelerate; no index, no builder.
#   TOPOLOGY=multi_cpu launch/ict.sh --config configs/ict/demo.yaml --train.run_dir=runs/ict --data.tokenizer=T \
#       --data.blocks=B
#   launch/ict.sh --config configs/ict/base.yaml --train.run_dir=runs/nq-ict --data.blocks=runs/nq/blocks \
#       --data.heldout_articles=runs/nq/cloze/heldout_articles.txt                              # GPUs
# Every process's blocks are the negatives of every query (gathered), so the in-batch softmax runs over
# train.batch_size x processes blocks: configs/ict/base.yaml's 256 per process is ORQA's 4,096 on 16 GPUs.
# Output: RUN/retriever/, which pre-training reads with --train.init_retriever=RUN/retriever.
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
run_training_job realm.warmstart.ict_train "$@" || exit $?
