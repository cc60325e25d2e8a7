#!/bin/bash
# caraml sweep point 919293c285bdbcf0 on A100: global_batch_size=128, precision=bf16, compile=trace, compile_mode=default, compile_scope=model, data=synthetic-host, workers=18, batch_size=16, nodes=2, time_limit=01:20:00, devices_per_node=4
#SBATCH --job-name=caraml-image_classification-919293c285bdbcf0
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=4
#SBATCH --cpus-per-task=18
#SBATCH --gpus-per-node=4
#SBATCH --time=01:20:00
#SBATCH --partition=dc-gpu-devel
#SBATCH --signal=B:USR2@300
#SBATCH --output=/scratch/logs/%j.out

set -u
export CARAML_SWEEP_POINT=919293c285bdbcf0
export PYTHONPATH=/opt/caraml/src"${PYTHONPATH:+:$PYTHONPATH}"
export NCCL_SOCKET_IFNAME=ib0
export GLOO_SOCKET_IFNAME=ib0
export PMIX_SECURITY_MODE=native
# rendezvous at the first host of the allocation (plus the site's interconnect suffix)
caraml_head="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"
# a node name no resolver knows (several slurmd emulating nodes on one host) is reached at its NodeAddr
getent hosts "$caraml_head" >/dev/null || caraml_head="$(scontrol show node "$caraml_head" | grep -o "NodeAddr=[^ ]*" | cut -d= -f2)"
caraml_head="$caraml_head"i
export MASTER_ADDR="$caraml_head"
export MASTER_PORT=$((20000 + SLURM_JOB_ID % 10000))

# the warning signal reaches this shell only (--signal=B:...): pass it on to the job step
caraml_step=
caraml_forward() {
  echo "caraml: job $SLURM_JOB_ID got a stop signal; forwarding SIGUSR2 to the job step" >&2
  if [ -n "$caraml_step" ]; then kill -USR2 "$caraml_step" 2>/dev/null; fi
}
trap caraml_forward USR2 TERM
srun --nodes=2 --ntasks-per-node=4 --cpus-per-task=18 --cpu-bind=none,v --mpi=pspmix --disable-dcgm bash -c 'export RANK=$SLURM_PROCID LOCAL_RANK=$SLURM_LOCALID WORLD_SIZE=$SLURM_NTASKS LOCAL_WORLD_SIZE=$SLURM_NTASKS_PER_NODE; exec "$@"' caraml-task /usr/bin/python3 -m caraml run image_classification model=resnet50 image_size=224 num_classes=1000 batch_size=16 precision=bf16 compile=trace compile_mode=default compile_scope=model channels_last=true data=synthetic-host workers=18 cudnn_benchmark=false lr=0.01 momentum=0.0 weight_decay=0.0 sgd_impl=foreach channels_last_inputs=false grad_scaler=caraml cudnn_tf32=on convention=caraml-epochs epochs=100 warmup_epochs=5 dataset_size=10000 val_split=0.1 lr_step_epochs=10 lr_gamma=0.1 engine=torch replicas=1 grad_accumulation=1 warmup_steps=10 measure_steps=50 measure_seconds=0.0 seed=1234 device=auto log_interval=5.0 power=auto power_interval_ms=100.0 idle_baseline_s=0.0 energy_files=caraml --preset caraml --system A100 --results '/scratch/caraml results' &
caraml_step=$!
wait "$caraml_step"; rc=$?
# a trapped signal ends `wait` early: wait again until the step has written its record
while kill -0 "$caraml_step" 2>/dev/null; do wait "$caraml_step"; rc=$?; done
exit $rc
