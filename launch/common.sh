# shellcheck shell=bash
# Shared by the launch/*.sh scripts (sourced, not run): topology, GPUs, accelerate arguments.
# Reads TOPOLOGY, NUM_PROCESSES, MIXED_PRECISION, MAIN_PROCESS_PORT and, for multi_node, NUM_MACHINES, MACHINE_RANK,
# MAIN_PROCESS_IP; sets TOPOLOGY, the array LAUNCH_ARGS (accelerate launch options) and exports ACCELERATE_USE_CPU
# on CPU topologies.

# The GPUs this shell may use: CUDA_VISIBLE_DEVICES when it is set, else every GPU nvidia-smi lists (comma-separated;
# empty without GPUs).
visible_gpus() {
    if [[ -n "${CUDA_VISIBLE_DEVICES:-}" ]]; then
        echo "$CUDA_VISIBLE_DEVICES"
    elif command -v nvidia-smi >/dev/null 2>&1; then
        nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null | paste -sd, - || true
    fi
}

# Number of entries of a comma-separated list ("" has none).
count_list() {
    local items
    IFS=, read -r -a items <<<"$1"
    echo "${#items[@]}"
}

is_cpu_topology() {
    [[ "$TOPOLOGY" == *cpu ]]
}

# Sets TOPOLOGY (default: single_node_gpus when GPUs are visible, else single_cpu) and LAUNCH_ARGS.
launch_setup() {
    if [[ -z "${TOPOLOGY:-}" ]]; then
        if [[ -n "$(visible_gpus)" ]]; then TOPOLOGY=single_node_gpus; else TOPOLOGY=single_cpu; fi
    fi
    local config="launch/accelerate/${TOPOLOGY}.yaml"
    if [[ ! -f "$config" ]]; then
        echo "launch: no accelerate config $config (TOPOLOGY=$TOPOLOGY)" >&2
        exit 2
    fi
    LAUNCH_ARGS=(--config_file "$config" --main_process_port "${MAIN_PROCESS_PORT:-29500}")
    if is_cpu_topology; then
        # note: accelerate's multi-process launcher ignores the YAML's use_cpu; without this each process finds no
        # GPU, skips init_process_group and trains alone (N copies of a 1-process run; DESIGN.md section 3).
        export ACCELERATE_USE_CPU=true
    fi
    if [[ -n "${NUM_PROCESSES:-}" ]]; then LAUNCH_ARGS+=(--num_processes "$NUM_PROCESSES"); fi
    if [[ -n "${MIXED_PRECISION:-}" ]]; then LAUNCH_ARGS+=(--mixed_precision "$MIXED_PRECISION"); fi
    if [[ "$TOPOLOGY" == multi_node* ]]; then  # multi_node (GPUs) or multi_node_cpu (gloo)
        LAUNCH_ARGS+=(
            --num_machines "${NUM_MACHINES:?multi_node needs NUM_MACHINES}"
            --machine_rank "${MACHINE_RANK:?multi_node needs MACHINE_RANK}"
            --main_process_ip "${MAIN_PROCESS_IP:?multi_node needs MAIN_PROCESS_IP (address of node 0)}"
        )
    fi
}

# Preemption (realm.training.preemption): SIGUSR1 (SLURM's advance warning, forwarded by launch/slurm/*.sbatch) or
# SIGTERM makes every trainer process checkpoint at its next step boundary and exit with PREEMPTED_EXIT_CODE.
PREEMPTED_EXIT_CODE=143
# note: torch's elastic agent (accelerate's multi-process launcher) starts its workers in sessions of their own and
# forwards only the signals named here; it then gives them PET_SHUTDOWN_TIMEOUT seconds (torch's default: 30) to save
export PET_SIGNALS_TO_HANDLE="${PET_SIGNALS_TO_HANDLE:-SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1}"
export PET_SHUTDOWN_TIMEOUT="${PET_SHUTDOWN_TIMEOUT:-300}"

# run_preemptible CMD...: runs the launcher CMD as a child of this shell and returns its exit status, or
# PREEMPTED_EXIT_CODE when this shell got SIGUSR1 or SIGTERM meanwhile and CMD did not end cleanly (accelerate's
# launcher reports a worker's 143 as 1). This shell outlives the signal: SLURM ends a job step once its task's shell
# exits, killing processes that are still saving. CMD ignores both signals unless it handles them (torch's agent
# does): a signal sent to the whole step reaches the trainer processes, which handle it, and never ends their launcher
# first.
run_preemptible() {
    local status=0
    preempted=0
    trap 'preempted=1' USR1 TERM
    (trap '' USR1 TERM && exec "$@") || status=$?
    trap - USR1 TERM
    if ((status != 0 && preempted)); then status=$PREEMPTED_EXIT_CODE; fi
    return "$status"
}

# run_training_job MODULE ARGS...: a training job that needs no index builder beside it (QA fine-tuning, the reader
# warm-up, ICT) under accelerate, preemptible (run_preemptible): on GPU topologies one process per GPU of TRAINER_GPUS
# (default: every visible GPU) times NUM_MACHINES, unless NUM_PROCESSES says otherwise. Call after launch_setup;
# returns the job's exit status.
run_training_job() {
    local module="$1"
    shift
    if ! is_cpu_topology; then
        TRAINER_GPUS="${TRAINER_GPUS:-$(visible_gpus)}"
        if [[ -z "$TRAINER_GPUS" ]]; then
            echo "launch/$(basename "$0"): TOPOLOGY=$TOPOLOGY but no GPU is visible (TOPOLOGY=single_cpu for CPU)" >&2
            return 2
        fi
        export CUDA_VISIBLE_DEVICES="$TRAINER_GPUS"
        if [[ -z "${NUM_PROCESSES:-}" ]]; then
            LAUNCH_ARGS+=(--num_processes "$(($(count_list "$TRAINER_GPUS") * ${NUM_MACHINES:-1}))")
        fi
    fi
    run_preemptible accelerate launch "${LAUNCH_ARGS[@]}" -m "$module" "$@"
}

# Sets the array BUILDER_CMD: the index builder (realm.index_builder.watch) for the comma-separated GPUs in $1: one
# process, or one per GPU joined in one group (--enable_distributed: each embeds its shard of the blocks, rank 0
# publishes). On multi_node with BUILDER_NODES=all, the group spans every node (its rank 0 on MACHINE_RANK 0), with
# its own rendezvous at MAIN_PROCESS_IP:BUILDER_PORT (default MAIN_PROCESS_PORT + 1).
builder_command() {
    local num_gpus
    num_gpus="$(count_list "$1")"
    if [[ "$TOPOLOGY" == multi_node && "${BUILDER_NODES:-first}" == all ]]; then
        BUILDER_CMD=(torchrun --nnodes "$NUM_MACHINES" --node_rank "$MACHINE_RANK" --nproc_per_node "$num_gpus"
            --master_addr "$MAIN_PROCESS_IP" --master_port "${BUILDER_PORT:-$((${MAIN_PROCESS_PORT:-29500} + 1))}"
            -m realm.index_builder.watch --enable_distributed=true)
    elif ((num_gpus > 1)); then
        BUILDER_CMD=(torchrun --standalone --nproc_per_node "$num_gpus" -m realm.index_builder.watch
            --enable_distributed=true)
    else
        BUILDER_CMD=(python -m realm.index_builder.watch)
    fi
}

# srun_requeue_on_preemption SRUN_ARGS...: for sbatch scripts. Runs the job step (srun) in the background and waits
# for it; a SIGUSR1 to the batch shell (#SBATCH --signal=B:USR1@SECONDS) is forwarded to the step (srun passes it on
# to every task), and when the step then ends unfinished (the trainer checkpointed and exited) the job is requeued
# (scontrol requeue; #SBATCH --requeue): it starts again with the same command and resumes from that checkpoint.
# Returns the step's exit status.
srun_requeue_on_preemption() {
    local status=0 again step_pid
    preempted=0
    srun "$@" &
    step_pid=$!
    trap 'preempted=1; kill -USR1 "$step_pid" 2>/dev/null || true' USR1
    wait "$step_pid" || status=$?
    # note: a trap ends the wait early (status > 128) while the step runs on, so wait until it has ended; then once
    # more, since the last wait may have been a trap's: bash >= 5.1 gives the step's own status again, older bash 127
    while kill -0 "$step_pid" 2>/dev/null; do
        status=0
        wait "$step_pid" || status=$?
    done
    again=0
    wait "$step_pid" 2>/dev/null || again=$?
    if ((again != 127)); then status=$again; fi
    trap - USR1
    # note: any failure after the forwarded signal counts: srun --kill-on-bad-exit may end the last tasks with
    # another status once the first exits with PREEMPTED_EXIT_CODE, and a run that finished exits 0
    if ((preempted && status != 0)); then
        echo "$(date -Is) job ${SLURM_JOB_ID:-?}: step stopped by preemption (exit $status), requeued" >&2
        scontrol requeue "${SLURM_JOB_ID:?}"
    fi
    return "$status"
}
