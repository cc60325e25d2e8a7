"""SLURM: render one batch script per point from the system profile, submit it, ask what became of it.

Every value that goes into a script is quoted with shlex.quote, so a parameter such as
`x=$(rm -rf ~)` stays data. The script traps the warning signal that `--signal=B:USR2@120`
sends to the batch shell and forwards it to srun, which has slurmstepd signal every process of the
step; torchrun ignores it, the workers stop between steps and rank 0 writes an `interrupted` record.
(SIGTERM would not do: srun answers it by killing the step.)
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from caraml.campaign import container
from caraml.campaign.expand import Point
from caraml.campaign.launch import caraml_run_args, source_root
from caraml.errors import BadInput, shown

SUBMIT_COMMANDS = ("sbatch", "squeue", "scontrol")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass
class JobOptions:
    results: str  # absolute results directory (the jobs write their records there)
    python: str  # interpreter on the compute nodes (outside a container)
    source: str = ""  # folder put first on PYTHONPATH (default: this caraml's source tree)
    record: str = ""  # when set, the run prints its record as JSON into this file (rank 0 prints it)
    done_file: str = ""  # when set, created when the job ends, however it ends (JUBE's done_file)


def q(value) -> str:
    text = str(value)
    if "\n" in text or "\r" in text:
        raise BadInput(f"a value for a job script contains a line break: {shown(repr(text))}")
    return shlex.quote(text)


def require_commands(names=SUBMIT_COMMANDS) -> None:
    missing = [n for n in names if shutil.which(n) is None]
    if missing:
        raise BadInput(f"--executor slurm needs the SLURM commands {', '.join(missing)}, which are not on PATH; "
                       "run on a SLURM login node, or use --executor local (or --dry-run to write the scripts)")


def _sbatch_lines(point: Point, profile: dict, log: str) -> list[str]:
    site = profile.get("site", {})
    per_task = point.launcher == "srun"
    lines = [f"--job-name={q('caraml-' + point.workload + '-' + point.id)}",
             f"--nodes={point.nodes}",
             f"--ntasks-per-node={point.devices_per_node if per_task else 1}"]
    cpus = int(site.get("cpus_per_task") or 0)
    if cpus:
        lines.append(f"--cpus-per-task={max(1, cpus // point.devices_per_node) if per_task else cpus}")
    gpus = int(site.get("gpus_per_node") or 0)
    if gpus:
        gpus = min(gpus, point.devices_per_node)
        style = site.get("gpu_option", "gres")
        lines.append(f"--gpus-per-node={gpus}" if style == "gpus-per-node" else f"--gres={q('gpu:' + str(gpus))}")
    lines.append(f"--time={q(point.time_limit or site.get('time_limit') or '01:00:00')}")
    for key in ("partition", "account", "constraint", "reservation", "qos"):
        if site.get(key):
            lines.append(f"--{key}={q(site[key])}")
    before = int(site.get("signal_before_s", 120))
    if before > 0:
        lines.append(f"--signal=B:USR2@{before}")
    lines.append(f"--output={q(log)}")
    lines += [_extra(line) for line in site.get("sbatch_lines", [])]
    return lines


def _extra(line: str) -> str:
    line = str(line).strip()
    if "\n" in line or not line.startswith("-"):
        raise BadInput(f"site.sbatch_lines entry '{shown(line)}' must be one sbatch option such as --mail-type=END")
    return line


def _worker(point: Point, profile: dict, opts: JobOptions) -> list[str]:
    """The words of the command every task runs; `$` words are ours, all values are quoted."""
    site = profile.get("site", {})
    python = opts.python
    prefix: list[str] = []
    if container.image(profile):
        binds = [opts.source or source_root(), opts.results] + list(site.get("container_binds", []))
        prefix = [q(w) for w in container.exec_prefix(profile, binds)]
        python = site.get("container_python", "python3")
    run = [q(w) for w in caraml_run_args(point, opts.results, json_out=bool(opts.record))]
    port = int(site.get("rdzv_port", 29500))
    if point.launcher == "srun":  # one task per device: ranks from SLURM's variables
        ranks = ('export RANK=$SLURM_PROCID LOCAL_RANK=$SLURM_LOCALID WORLD_SIZE=$SLURM_NTASKS '
                 'LOCAL_WORLD_SIZE=$SLURM_NTASKS_PER_NODE; exec "$@"')
        return prefix + ["bash", "-c", q(ranks), "caraml-task", q(python), "-m", "caraml", *run]
    # torchrun would die of SIGUSR2 (it has no handler) and take the workers with it: it ignores the
    # signal; the workers, signalled by slurmstepd like every process of the step, stop cleanly.
    ignore = q('trap "" USR2; exec "$@"')
    return prefix + ["bash", "-c", ignore, "caraml-torchrun", q(python), "-m", "torch.distributed.run", f"--nnodes={point.nodes}",
                     f"--nproc-per-node={point.devices_per_node}", "--rdzv-backend=c10d",
                     f'--rdzv-endpoint="$caraml_head":{port}', '--rdzv-id="$SLURM_JOB_ID"', "-m", "caraml", *run]


def render(point: Point, profile: dict, opts: JobOptions, log: str) -> str:
    """The batch script for one point."""
    site = profile.get("site", {})
    source = opts.source or source_root()
    srun = ["srun", f"--nodes={point.nodes}",
            f"--ntasks-per-node={point.devices_per_node if point.launcher == 'srun' else 1}",
            *[q(a) for a in site.get("srun_args", [])]]
    env_lines = []
    for key, value in dict(site.get("env", {})).items():
        if not _ENV_NAME.match(str(key)):
            raise BadInput(f"site.env key '{shown(key)}' is not a valid environment variable name")
        env_lines.append(f"export {key}={q(value)}")
    settings = ", ".join(f"{k}={v}" for k, v in point.shown.items())
    out = ["#!/bin/bash", f"# caraml sweep point {point.id} on {point.system}: {' '.join(settings.splitlines())}"]
    out += [f"#SBATCH {line}" for line in _sbatch_lines(point, profile, log)]
    out += [
        "",
        "set -u",
        *([f"trap {q('touch ' + q(opts.done_file))} EXIT", ""] if opts.done_file else []),
        f"export CARAML_SWEEP_POINT={q(point.id)}",
        f'export PYTHONPATH={q(source)}"${{PYTHONPATH:+:$PYTHONPATH}}"',
        *env_lines,
        "# rendezvous at the first host of the allocation (plus the site's interconnect suffix)",
        'caraml_head="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"'
        + (q(site["hostname_suffix"]) if site.get("hostname_suffix") else ""),
        'export MASTER_ADDR="$caraml_head"',
        f"export MASTER_PORT={int(site.get('rdzv_port', 29500))}",
        "",
        "# the warning signal reaches this shell only (--signal=B:...): pass it on to the job step",
        "caraml_step=",
        "caraml_forward() {",
        '  echo "caraml: job $SLURM_JOB_ID got a stop signal; forwarding SIGUSR2 to the job step" >&2',
        '  if [ -n "$caraml_step" ]; then kill -USR2 "$caraml_step" 2>/dev/null; fi',
        "}",
        "trap caraml_forward USR2 TERM",
        " ".join(srun + _worker(point, profile, opts)) + (f" > {q(opts.record)}" if opts.record else "") + " &",
        "caraml_step=$!",
        'wait "$caraml_step"; rc=$?',
        '# a trapped signal ends `wait` early: wait again until the step has written its record',
        'while kill -0 "$caraml_step" 2>/dev/null; do wait "$caraml_step"; rc=$?; done',
        "exit $rc",
        "",
    ]
    return "\n".join(out)


def submit(script: Path) -> str:
    """sbatch the script; the job id."""
    proc = subprocess.run(["sbatch", "--parsable", str(script)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise BadInput(f"sbatch refused {script}: {(proc.stderr or proc.stdout).strip().splitlines()[-1:]}")
    return proc.stdout.strip().split(";")[0]


def queued(job_ids: list[str]) -> dict[str, str]:
    """Job id -> state (PENDING, RUNNING, ...) for the jobs SLURM still holds in its queue."""
    if not job_ids:
        return {}
    proc = subprocess.run(["squeue", "-h", "-o", "%i %T", "-j", ",".join(job_ids)], capture_output=True, text=True)
    out = {}
    for line in proc.stdout.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1] not in ("COMPLETED", "FAILED", "TIMEOUT", "CANCELLED", "OUT_OF_MEMORY",
                                                "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE"):
            out[parts[0]] = parts[1]
    return out


def final_state(job_id: str) -> str:
    """How a job ended (COMPLETED, TIMEOUT, CANCELLED, FAILED, ...), from scontrol or sacct; UNKNOWN if neither knows."""
    proc = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True)
    m = re.search(r"\bJobState=(\S+)", proc.stdout)
    if m:
        return m.group(1)
    if shutil.which("sacct"):
        proc = subprocess.run(["sacct", "-j", job_id, "-n", "-X", "-P", "-o", "State"], capture_output=True, text=True)
        words = proc.stdout.split()
        if proc.returncode == 0 and words:
            return words[0]
    return "UNKNOWN"
