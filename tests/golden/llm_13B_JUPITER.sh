#!/bin/bash
# caraml sweep point 08eb549a7099a843 on JUPITER: global_batch=0, accumulation=64, dp=44, model_size=13B, num_layers=40, hidden_size=5120, num_attention_heads=32, ffn_hidden_size=20480, seq_length=2048, max_position_embeddings=2048, position=rope, micro_batch_size=2, tp=2, pp=2, sequence_parallel=True, recompute=selective, distributed_optimizer=True, precision=fp16, lr=0.0001, data=synthetic, seed=42, grad_accumulation=64, global_batch_size=5632, nodes=44, time_limit=02:00:00, devices_per_node=4
#SBATCH --job-name=caraml-llm_training-08eb549a7099a843
#SBATCH --nodes=44
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=72
#SBATCH --gres=gpu:4
#SBATCH --time=02:00:00
#SBATCH --partition=booster
#SBATCH --account=jscbench
#SBATCH --constraint=hopper
#SBATCH --reservation=bench
#SBATCH --signal=B:USR2@120
#SBATCH --output=/scratch/logs/%j.out
#SBATCH --exclusive

set -u
export CARAML_SWEEP_POINT=08eb549a7099a843
export PYTHONPATH=/opt/caraml/src"${PYTHONPATH:+:$PYTHONPATH}"
export NCCL_DEBUG=WARN
# rendezvous at the first host of the allocation (plus the site's interconnect suffix)
caraml_head="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"
# a node name no resolver knows (several slurmd emulating nodes on one host) is reached at its NodeAddr
getent hosts "$caraml_head" >/dev/null || caraml_head="$(scontrol show node "$caraml_head" | grep -o "NodeAddr=[^ ]*" | cut -d= -f2)"
export MASTER_ADDR="$caraml_head"
export MASTER_PORT=29500

# the warning signal reaches this shell only (--signal=B:...): pass it on to the job step
caraml_step=
caraml_forward() {
  echo "caraml: job $SLURM_JOB_ID got a stop signal; forwarding SIGUSR2 to the job step" >&2
  if [ -n "$caraml_step" ]; then kill -USR2 "$caraml_step" 2>/dev/null; fi
}
trap caraml_forward USR2 TERM
srun --nodes=44 --ntasks-per-node=1 --cpu-bind=none apptainer exec --nv --bind '/opt/caraml/src,/scratch/caraml results' /p/containers/nvcr.io_nvidia_pytorch_24.09-py3.sif bash -c 'trap "" USR2; exec "$@"' caraml-torchrun python3 -m torch.distributed.run --nnodes=44 --nproc-per-node=4 --rdzv-backend=c10d --rdzv-endpoint="$caraml_head":29500 --rdzv-id="$SLURM_JOB_ID" -m caraml run llm_training model_size=13B num_layers=40 hidden_size=5120 num_attention_heads=32 ffn_hidden_size=20480 seq_length=2048 max_position_embeddings=2048 vocab_size=50257 position=rope activation=gelu init_std=0.0048 micro_batch_size=2 grad_accumulation=64 global_batch_size=5632 tp=2 pp=2 sequence_parallel=true loss_parallel=true recompute=selective distributed_optimizer=true precision=fp16 compile=none attention=auto compile_scope=model data=synthetic data_path= lr=0.0001 min_lr=1e-05 lr_warmup_samples=216320 lr_decay_samples=128953125 weight_decay=0.1 clip_grad=1.0 warmup_steps=10 measure_steps=50 measure_seconds=0.0 seed=42 device=auto log_interval=5.0 power=auto power_interval_ms=100.0 idle_baseline_s=0.0 energy_files=none --system JUPITER --results '/scratch/caraml results' &
caraml_step=$!
wait "$caraml_step"; rc=$?
# a trapped signal ends `wait` early: wait again until the step has written its record
while kill -0 "$caraml_step" 2>/dev/null; do wait "$caraml_step"; rc=$?; done
exit $rc
