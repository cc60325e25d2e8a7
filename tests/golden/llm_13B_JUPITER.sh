#!/bin/bash
# caraml sweep point 8ebf6ebb96001dd9 on JUPITER: samples_per_device=64, model_size=13B, num_layers=40, hidden_size=5120, num_attention_heads=40, seq_length=2048, max_position_embeddings=2048, micro_batch_size=1, tp=2, pp=4, sequence_parallel=True, recompute=none, precision=bf16, data=synthetic, global_batch_size=128, nodes=4, time_limit=02:00:00, devices_per_node=4
#SBATCH --job-name=caraml-llm_training-8ebf6ebb96001dd9
#SBATCH --nodes=4
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
export CARAML_SWEEP_POINT=8ebf6ebb96001dd9
export PYTHONPATH=/opt/caraml/src"${PYTHONPATH:+:$PYTHONPATH}"
export NCCL_DEBUG=WARN
# rendezvous at the first host of the allocation (plus the site's interconnect suffix)
caraml_head="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"
export MASTER_ADDR="$caraml_head"
export MASTER_PORT=29500

# the warning signal reaches this shell only (--signal=B:...): pass it on to the job step
caraml_step=
caraml_forward() {
  echo "caraml: job $SLURM_JOB_ID got a stop signal; forwarding SIGUSR2 to the job step" >&2
  if [ -n "$caraml_step" ]; then kill -USR2 "$caraml_step" 2>/dev/null; fi
}
trap caraml_forward USR2 TERM
srun --nodes=4 --ntasks-per-node=1 --cpu-bind=none apptainer exec --nv --bind '/opt/caraml/src,/scratch/caraml results' /p/containers/nvcr.io_nvidia_pytorch_24.09-py3.sif bash -c 'trap "" USR2; exec "$@"' caraml-torchrun python3 -m torch.distributed.run --nnodes=4 --nproc-per-node=4 --rdzv-backend=c10d --rdzv-endpoint="$caraml_head":29500 --rdzv-id="$SLURM_JOB_ID" -m caraml run llm_training model_size=13B num_layers=40 hidden_size=5120 num_attention_heads=40 ffn_hidden_size=0 seq_length=2048 max_position_embeddings=2048 vocab_size=50257 global_batch_size=128 micro_batch_size=1 tp=2 pp=4 sequence_parallel=true precision=bf16 recompute=none data=synthetic lr=0.0001 compile=false warmup_steps=10 measure_steps=50 measure_seconds=0.0 seed=0 device=auto power=auto power_interval_ms=100.0 idle_baseline_s=0.0 energy_files=none --system JUPITER --results '/scratch/caraml results' &
caraml_step=$!
wait "$caraml_step"; rc=$?
# a trapped signal ends `wait` early: wait again until the step has written its record
while kill -0 "$caraml_step" 2>/dev/null; do wait "$caraml_step"; rc=$?; done
exit $rc
