# shellcheck shell=bash
# Shared by launch/pretrain.sh and launch/finetune.sh (sourced, not run): topology, GPUs, accelerate arguments.
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
    if [[ "$TOPOLOGY" == multi_node ]]; then
        LAUNCH_ARGS+=(
            --num_machines "${NUM_MACHINES:?multi_node needs NUM_MACHINES}"
            --machine_rank "${MACHINE_RANK:?multi_node needs MACHINE_RANK}"
            --main_process_ip "${MAIN_PROCESS_IP:?multi_node needs MAIN_PROCESS_IP (address of node 0)}"
        )
    fi
}
