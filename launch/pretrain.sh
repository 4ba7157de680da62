#!/usr/bin/env bash
# REALM pre-training under accelerate: the trainer processes and, on GPU topologies, the index builder beside them.
#   TOPOLOGY=multi_cpu launch/pretrain.sh --config configs/pretrain/tiny.yaml --train.run_dir=runs/tiny ...
#   launch/pretrain.sh --config configs/pretrain/base.yaml --train.run_dir=runs/base ...      # a node with GPUs
# The world size and precision live in launch/accelerate/${TOPOLOGY}.yaml; the arguments go to realm.trainer.pretrain.
#
# Knobs (environment variables):
#   TOPOLOGY           single_cpu | multi_cpu | single_node_gpus | multi_node (a launch/accelerate/*.yaml name;
#                      default single_node_gpus when GPUs are visible, else single_cpu)
#   NUM_PROCESSES      trainer processes in all (default: the YAML's on CPU; one per TRAINER_GPUS entry times
#                      NUM_MACHINES on GPUs)
#   MIXED_PRECISION    no | bf16 | fp16, overrides the YAML; a job's train.precision decides over both unless
#                      it is auto (the default), which takes an explicit bf16 or fp16 here (fp16: GPUs only)
#   MAIN_PROCESS_PORT  rendezvous port (default 29500); OMP_NUM_THREADS: threads per process
# GPU topologies: the trainer takes GPUs 0..N-2 (one process each) and the index builder, a separate process, the
# last one; the trainer's child builder is turned off (refresh.spawn_builder=false). The builder exits by itself once
# the trainer has finished and the last export is indexed.
#   TRAINER_GPUS       GPU ids of the trainer, comma-separated (default: all visible but the last; the only one if
#                      there is one, shared with the builder)
#   BUILDER_GPUS       GPU id(s) of the builder (default: the last visible; on multi_node only on MACHINE_RANK 0
#                      unless BUILDER_NODES=all); "none" starts no builder here (run `realm index` or
#                      launch/index.sh elsewhere on the shared run directory); several ids build each index version
#                      with one process per GPU (--enable_distributed)
#   BUILDER_NODES      multi_node: first (default: the builder on node 0 only) or all (one builder group over the
#                      BUILDER_GPUS of every node: each node embeds its shards, node 0 publishes; BUILDER_PORT,
#                      default MAIN_PROCESS_PORT + 1, is its rendezvous port on node 0)
#   BUILDER_CONFIG     index config (default configs/index/default.yaml)
#   BUILDER_PRECISION  fp32 | bf16 | fp16: dtype of the builder's embedder (default bf16 on GPUs; the index only
#                      chooses candidates, the trainer re-embeds them live in its own precision)
#   RUN_DIR            run directory for the builder (default: train.run_dir of the config and overrides given)
# multi_node (launch/slurm/pretrain.sbatch sets these): NUM_MACHINES, MACHINE_RANK, MAIN_PROCESS_IP; every node runs
# the same number of trainer processes and sees the run directory on a shared file system.
# Preemption: a SIGUSR1 or SIGTERM to this script (or to the whole job step) makes the trainer checkpoint at its next
# step boundary; the script then exits with 143 (launch/common.sh run_preemptible, realm.training.preemption).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=launch/common.sh
source launch/common.sh
launch_setup

if is_cpu_topology; then
    run_preemptible accelerate launch "${LAUNCH_ARGS[@]}" -m realm.trainer.pretrain "$@" || exit $?
    exit 0
fi

gpus="$(visible_gpus)"
gpus="${gpus:-${TRAINER_GPUS:-}}"
if [[ -z "$gpus" ]]; then
    echo "launch/pretrain.sh: TOPOLOGY=$TOPOLOGY but no GPU is visible (set TRAINER_GPUS, or TOPOLOGY=single_cpu)" >&2
    exit 2
fi
IFS=, read -r -a gpu_ids <<<"$gpus"
last_gpu="${gpu_ids[${#gpu_ids[@]}-1]}"
if ((${#gpu_ids[@]} > 1)); then
    TRAINER_GPUS="${TRAINER_GPUS:-$(IFS=,; echo "${gpu_ids[*]:0:${#gpu_ids[@]}-1}")}"
else
    TRAINER_GPUS="${TRAINER_GPUS:-$last_gpu}"
fi
if [[ "$TOPOLOGY" == multi_node && "${MACHINE_RANK:-0}" != 0 && "${BUILDER_NODES:-first}" != all ]]; then
    BUILDER_GPUS="${BUILDER_GPUS:-none}"
fi
BUILDER_GPUS="${BUILDER_GPUS:-$last_gpu}"
max_processes="$(($(count_list "$TRAINER_GPUS") * ${NUM_MACHINES:-1}))"
if [[ -z "${NUM_PROCESSES:-}" ]]; then
    LAUNCH_ARGS+=(--num_processes "$max_processes")
elif ((NUM_PROCESSES > max_processes)); then
    # note: one trainer process per GPU; more would die in CUDA with "invalid device ordinal"
    echo "launch/pretrain.sh: NUM_PROCESSES=$NUM_PROCESSES trainer processes but only $max_processes GPU(s) for them" \
        "(TRAINER_GPUS=$TRAINER_GPUS x NUM_MACHINES=${NUM_MACHINES:-1}); use NUM_PROCESSES<=$max_processes," \
        "or TOPOLOGY=multi_cpu for CPU processes" >&2
    exit 2
fi

builder_pid=""
# shellcheck disable=SC2329  # invoked by the EXIT trap
stop_builder() {
    if [[ -n "$builder_pid" ]] && kill -0 "$builder_pid" 2>/dev/null; then
        kill "$builder_pid"
        wait "$builder_pid" || true
    fi
}
if [[ "$BUILDER_GPUS" != none ]]; then
    if [[ -z "${RUN_DIR:-}" ]]; then
        # note: resolved exactly as the trainer resolves it (same loader, same overrides), not parsed in bash
        RUN_DIR="$(
            python - "$@" <<'PY'
import argparse, sys
from realm.core.config import load_config
from realm.pretrain.config import PretrainConfig
parser = argparse.ArgumentParser(add_help=False)
parser.add_argument("--config", required=True)
args, overrides = parser.parse_known_args(sys.argv[1:])
print(load_config(PretrainConfig, args.config, overrides).train.run_dir)
PY
        )"
    fi
    mkdir -p "$RUN_DIR"
    builder_command "$BUILDER_GPUS"
    # note: it ignores SIGUSR1 (a preemption warning is the trainer's to act on); SIGTERM stops it between batches
    (trap '' USR1 && CUDA_VISIBLE_DEVICES="$BUILDER_GPUS" exec "${BUILDER_CMD[@]}" \
        --config "${BUILDER_CONFIG:-configs/index/default.yaml}" --run_dir "$RUN_DIR" --device=cuda \
        --precision="${BUILDER_PRECISION:-bf16}") >>"$RUN_DIR/builder.log" 2>&1 &
    builder_pid=$!
    trap stop_builder EXIT
    echo "launch/pretrain.sh: index builder (pid $builder_pid) on GPU(s) $BUILDER_GPUS, log in $RUN_DIR/builder.log" >&2
fi

echo "launch/pretrain.sh: trainer on GPU(s) $TRAINER_GPUS (${LAUNCH_ARGS[*]})" >&2
status=0
CUDA_VISIBLE_DEVICES="$TRAINER_GPUS" run_preemptible accelerate launch "${LAUNCH_ARGS[@]}" -m realm.trainer.pretrain \
    "$@" --refresh.spawn_builder=false || status=$?
if ((status == 0)) && [[ -n "$builder_pid" ]]; then
    wait "$builder_pid" || status=$? # it indexes the last export, sees RUN/DONE and exits
    builder_pid=""
fi
exit "$status"
