#!/bin/bash
# caraml sweep point 5eede2c1284cfade on JUPITER: global_batch=0, accumulation=64, dp=44, model_size=13B, num_layers=40, hidden_size=5120, num_attention_heads=32, ffn_hidden_size=20480, seq_length=2048, max_position_embeddings=2048, position=rope, micro_batch_size=2, tp=2, pp=2, sequence_parallel=True, recompute=selective, distributed_optimizer=zero1, mixed_precision=megatron, attention_dropout=0.1, hidden_dropout=0.1, caraml_config=2025, convention=caraml-log, caraml_log_interval=5, exit_minutes=60.0, energy_files=caraml, precision=fp16, lr=0.0001, data=synthetic, seed=42, grad_accumulation=64, global_batch_size=5632, nodes=44, time_limit=01:15:00, devices_per_node=4
#SBATCH --job-name=caraml-llm_training-5eede2c1284cfade
#SBATCH --nodes=44
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=72
#SBATCH --gres=gpu:4
#SBATCH --time=01:15:00
#SBATCH --partition=jureap
#SBATCH --account=jscbench
#SBATCH --constraint=hopper
#SBATCH --reservation=bench
#SBATCH --qos=normal
#SBATCH --exclusive
#SBATCH --signal=B:USR2@120
#SBATCH --output=/scratch/logs/%j.out
#SBATCH --mail-type=END

set -u
export CARAML_SWEEP_POINT=5eede2c1284cfade
export PYTHONPATH=/opt/caraml/src"${PYTHONPATH:+:$PYTHONPATH}"
export NCCL_SOCKET_IFNAME=ib0
export GLOO_SOCKET_IFNAME=ib0
export NCCL_DEBUG=WARN
export CUDA_DEVICE_MAX_CONNECTIONS=1
export TORCH_NCCL_ASYNC_ERROR_HANDLING=1
export NCCL_IB_TIMEOUT=50
export UCX_RC_TIMEOUT=4s
export NCCL_IB_RETRY_CNT=10
# rendezvous at the first host of the allocation (plus the site's interconnect suffix)
caraml_head="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"
# a node name no resolver knows (several slurmd emulating nodes on one host) is reached at its NodeAddr
getent hosts "$caraml_head" >/dev/null || caraml_head="$(scontrol show node "$caraml_head" | grep -o "NodeAddr=[^ ]*" | cut -d= -f2)"
export MASTER_ADDR="$caraml_head"
export MASTER_PORT=$((20000 + SLURM_JOB_ID % 10000))

# the warning signal reaches this shell only (--signal=B:...): pass it on to the job step
caraml_step=
caraml_forward() {
  echo "caraml: job $SLURM_JOB_ID got a stop signal; forwarding SIGUSR2 to the job step" >&2
  if [ -n "$caraml_step" ]; then kill -USR2 "$caraml_step" 2>/dev/null; fi
}
trap caraml_forward USR2 TERM
srun --nodes=44 --ntasks-per-node=1 --cpus-per-task=72 --cpu-bind=v --mpi=pmi2 apptainer exec --nv --bind '/opt/caraml/src,/p/containers/envs,/scratch/caraml results' /p/containers/nvcr.io_nvidia_pytorch_24.09-py3.sif bash -c 'trap "" USR2; exec "$@"' caraml-torchrun /p/containers/envs/nvcr.io_nvidia_pytorch_24.09-py3-not-pulled/bin/python -m torch.distributed.run --nnodes=44 --nproc-per-node=4 --rdzv-backend=c10d --rdzv-endpoint="$caraml_head":"$MASTER_PORT" --rdzv-id="$SLURM_JOB_ID" -m caraml run llm_training model_size=13B num_layers=40 hidden_size=5120 num_attention_heads=32 ffn_hidden_size=20480 seq_length=2048 max_position_embeddings=2048 vocab_size=50257 position=rope activation=gelu init_std=0.0048 micro_batch_size=2 grad_accumulation=64 global_batch_size=5632 tp=2 pp=2 sequence_parallel=true loss_parallel=true recompute=selective distributed_optimizer=zero1 precision=fp16 mixed_precision=megatron attention_dropout=0.1 hidden_dropout=0.1 compile=none attention=auto compile_scope=model data=synthetic data_path= lr=0.0001 min_lr=1e-05 lr_warmup_samples=216320 lr_decay_samples=128953125 weight_decay=0.1 clip_grad=1.0 caraml_config=2025 convention=caraml-log exit_minutes=60.0 warmup_steps=10 measure_steps=50 measure_seconds=0.0 seed=42 device=auto log_interval=5.0 power=auto power_interval_ms=100.0 idle_baseline_s=0.0 energy_files=caraml --system JUPITER --results '/scratch/caraml results' &
caraml_step=$!
wait "$caraml_step"; rc=$?
# a trapped signal ends `wait` early: wait again until the step has written its record
while kill -0 "$caraml_step" 2>/dev/null; do wait "$caraml_step"; rc=$?; done
exit $rc
