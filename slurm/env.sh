# Environment of a vldocir job on a SLURM node. The sbatch script that the SLURM launchers write
# (conf/hydra/launcher/slurm_*.yaml, `setup:`) sources this file before `srun` starts the job; it can
# also be sourced by hand in an interactive allocation: `source slurm/env.sh`.
#
# Reads (all optional):
#   VLDOCIR_ROOT     the checkout (default: the folder above this file)
#   VLDOCIR_VENV     the virtual environment to activate (default: $VLDOCIR_ROOT/.venv)
#   WANDB_MODE       kept if set; defaults to offline (compute nodes often have no internet;
#                    upload later with `wandb sync <log_dir>/wandb/offline-run-*`)
#   VLDOCIR_HF_HOME  if set, becomes HF_HOME (Hugging Face models and datasets, e.g. on scratch)
#
# It is sourced into the job's shell: no `exit`, no `set -e`, and unset variables are tolerated.

_vldocir_here="$(cd "$(dirname "${BASH_SOURCE[0]:-$0}")" && pwd)"
export VLDOCIR_ROOT="${VLDOCIR_ROOT:-$(dirname "$_vldocir_here")}"

_vldocir_venv="${VLDOCIR_VENV:-$VLDOCIR_ROOT/.venv}"
if [ -f "$_vldocir_venv/bin/activate" ]; then
    # shellcheck disable=SC1091
    . "$_vldocir_venv/bin/activate"
else
    echo "vldocir env.sh: no virtual environment at $_vldocir_venv (run 'uv sync' in $VLDOCIR_ROOT or set VLDOCIR_VENV)" >&2
fi

export WANDB_MODE="${WANDB_MODE:-offline}"
if [ -n "${VLDOCIR_HF_HOME:-}" ]; then
    export HF_HOME="$VLDOCIR_HF_HOME"
fi

echo "vldocir: host $(hostname) | SLURM job ${SLURM_JOB_ID:-none}${SLURM_ARRAY_TASK_ID:+ task $SLURM_ARRAY_TASK_ID} | python $(command -v python || echo none) | WANDB_MODE=$WANDB_MODE${HF_HOME:+ | HF_HOME=$HF_HOME}"
if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader 2>&1 | sed 's/^/vldocir: GPU /'
else
    echo "vldocir: no nvidia-smi on this node (no GPU visible)"
fi
unset _vldocir_here _vldocir_venv
