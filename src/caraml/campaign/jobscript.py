"""The SLURM batch script of one point, rendered from the system profile and the point's launcher.

Every value that goes into a script is quoted with shlex.quote, so a parameter such as
`x=$(rm -rf ~)` stays data. The script traps the warning signal that `--signal=B:USR2@120`
sends to the batch shell and forwards it to srun, which has slurmstepd signal every process of the
step; torchrun ignores it, the workers stop between steps and rank 0 writes an `interrupted` record.
(SIGTERM would not do: srun answers it by killing the step.)
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass, field

from caraml import systems
from caraml.campaign import container
from caraml.campaign.expand import SweepPoint
from caraml.campaign.launchers import Job, caraml_run_args, get_launcher, source_root, tasks_per_node
from caraml.campaign.rendezvous import ShellWord, SlurmStep
from caraml.errors import BadInput, printable, shown

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass
class JobOptions:
    results: str  # absolute results directory (the jobs write their records there)
    python: str  # interpreter on the compute nodes (outside a container)
    source: str = ""  # folder put first on PYTHONPATH (default: this caraml's source tree)
    record: str = ""  # when set, the run prints its record as JSON into this file (rank 0 prints it)
    done_file: str = ""  # when set, created when the job ends, however it ends (JUBE's done_file)
    site: dict = field(default_factory=dict)  # the command line's site settings (--partition, ...) over the profile's


# What SLURM accepts for each site setting (a name, a comma list; constraints with their operators): a typo such as
# `--partition "dc gpu"` is one line here, not a job SLURM rejects later.
_NAME = re.compile(r"^[A-Za-z0-9_.+-]+(,[A-Za-z0-9_.+-]+)*$")
SITE_VALUES = {
    "partition": (_NAME, "a partition name (letters, digits, _ . + -; a comma list for several)"),
    "account": (_NAME, "an account (project) name, e.g. jscbench"),
    "qos": (_NAME, "a QOS name, e.g. normal"),
    "reservation": (_NAME, "a reservation name, e.g. bench"),
    "constraint": (re.compile(r"^[A-Za-z0-9_.,:&|*()\[\]!+-]+$"), "node features, e.g. mi300x or 'a100&ib'"),
    "cpu_bind": (re.compile(r"^[A-Za-z0-9_.,:=-]+$"), "an srun --cpu-bind value, e.g. v or none,v"),
    "mpi": (re.compile(r"^[A-Za-z0-9_.-]+$"), "an srun --mpi plugin, e.g. pmi2 or pspmix"),
}


def site_value_problem(key: str, value) -> str | None:
    """Why `value` cannot be the site setting `key` (what it must be instead); None when it can, or is empty."""
    if key not in SITE_VALUES or value in (None, ""):
        return None
    pattern, what = SITE_VALUES[key]
    return None if isinstance(value, str) and pattern.fullmatch(value) else f"it must be {what}"


def job_site(point: SweepPoint, profile: dict, opts: JobOptions) -> dict:
    """The site settings of the point's job: profile, its workload's own, the command line's; each one checked."""
    site = systems.site(profile, point.workload, opts.site)
    for key in SITE_VALUES:
        if isinstance(site.get(key), str):
            _plain(site[key])  # a control character is named as such
        problem = site_value_problem(key, site.get(key))
        if problem:
            given = f"--{key.replace('_', '-')}" if key in opts.site else f"system {profile.get('tag')}: site.{key}"
            raise BadInput(f"{given} = '{shown(site[key], 80)}' is not valid; {problem}")
    return site


_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")  # bash will not run a script with a NUL; a line break ends a line


def q(value) -> str:
    return shlex.quote(_plain(str(value)))


def _plain(text: str) -> str:
    """`text` when it holds no control character (a line break, a NUL, an escape), else bad input naming it."""
    control = _CONTROL.search(text)
    if control:
        kind = "a line break" if control.group() in "\r\n" else f"a control character ({shown(control.group())})"
        raise BadInput(f"a value for a job script contains {kind}: '{shown(text)}'; give printable text")
    return text


def _tasks(point: SweepPoint) -> int:
    return tasks_per_node(get_launcher(point.launcher), point.devices_per_node)


def _cpus_per_task(point: SweepPoint, site: dict) -> int:
    """A task's CPUs: the node's CPUs for one task per node, a device's share for a task per device; 0: unset."""
    cpus = int(site.get("cpus_per_task") or 0)
    if cpus and get_launcher(point.launcher).task_per_device:
        return max(1, cpus // point.devices_per_node)
    return cpus


def sbatch_lines(point: SweepPoint, site: dict, log: str) -> list[str]:
    tasks = _tasks(point)
    lines = [f"--job-name={q(job_name(point))}",
             f"--nodes={point.nodes}",
             f"--ntasks-per-node={tasks}"]
    cpus = _cpus_per_task(point, site)
    if cpus:
        lines.append(f"--cpus-per-task={cpus}")
    gpus = int(site.get("gpus_per_node") or 0)
    if gpus:
        gpus = min(gpus, point.devices_per_node)
        style = site.get("gpu_option", "gres")
        lines.append(f"--gpus-per-node={gpus}" if style == "gpus-per-node" else f"--gres={q('gpu:' + str(gpus))}")
    lines.append(f"--time={q(point.time_limit or site.get('time_limit') or '01:00:00')}")
    for key in ("partition", "account", "constraint", "reservation", "qos"):
        if site.get(key):
            lines.append(f"--{key}={q(site[key])}")
    if site.get("exclusive"):  # the nodes to this job alone: no other job's rendezvous port or CPUs in the way
        lines.append("--exclusive")
    before = int(site.get("signal_before_s", 120))
    if before > 0:
        lines.append(f"--signal=B:USR2@{before}")
    lines.append(f"--output={q(output_pattern(log))}")
    lines += [_extra(line) for line in site.get("sbatch_lines", [])]
    return lines


def output_pattern(log: str) -> str:
    """A job's log file as `#SBATCH --output=` takes it: the folder as it is (its '%' doubled, which sbatch would
    expand: a results folder `100%j` is not the job id), the file name with sbatch's own patterns (%j, %A_%a)."""
    folder, name = os.path.split(log)
    return os.path.join(folder.replace("%", "%%"), name)


def _extra(line: str) -> str:
    line = _plain(str(line).strip())
    if not line.startswith("-"):
        raise BadInput(f"site.sbatch_lines entry '{shown(line)}' must be one sbatch option such as --mail-type=END")
    return line


def _worker(point: SweepPoint, profile: dict, site: dict, opts: JobOptions) -> list[str]:
    """The words of the command every task runs; ShellWords are ours, every other word is quoted."""
    python = opts.python
    prefix: list[str] = []
    profile = {**profile, "site": site}  # the job's own settings (a workload's image, the command line's)
    if container.image(profile):  # the image's python, with caraml from its prepared environment
        env = container.env_dir(profile)
        binds = container.bind_paths([("the source tree", opts.source or source_root()), ("--results", opts.results),
                                      (container.envs_setting(profile), str(env.parent))])
        binds += list(site.get("container_binds", []))  # the site's own bind specifications, as they are
        prefix = [q(w) for w in container.exec_prefix(profile, binds)]
        python = container.env_python(profile)
    job = Job(point, python, tuple(caraml_run_args(point, opts.results, json_out=bool(opts.record))), SlurmStep())
    return prefix + [w if isinstance(w, ShellWord) else q(w) for w in get_launcher(point.launcher).command(job)]


def _srun(point: SweepPoint, site: dict) -> list[str]:
    """srun with the job's shape, each task's CPUs (Slurm 22.05-23.02 gives a task one CPU unless srun asks) and
    the system's binding and MPI plugin (CARAML's --cpu_bind/--mpi per system)."""
    words = ["srun", f"--nodes={point.nodes}", f"--ntasks-per-node={_tasks(point)}"]
    cpus = _cpus_per_task(point, site)
    if cpus:
        words.append(f"--cpus-per-task={cpus}")
    for key in ("cpu_bind", "mpi"):
        if site.get(key):
            words.append(f"--{key.replace('_', '-')}={q(site[key])}")
    return words + [q(a) for a in site.get("srun_args", [])]


def _master_port(site: dict) -> str:
    """The rendezvous port: the site's fixed one, else one derived from the job id (20000-29999, below Linux's
    ephemeral ports), so two jobs sharing a node do not meet at the same port."""
    if site.get("rdzv_port"):
        return str(int(site["rdzv_port"]))
    return "$((20000 + SLURM_JOB_ID % 10000))"


def job_name(point) -> str:
    """The job's name in SLURM: how a job that was submitted but never saved in the sweep state is found."""
    return f"caraml-{point.workload}-{point.key}"


def render(point: SweepPoint, profile: dict, opts: JobOptions, log: str) -> str:
    """The batch script for one point."""
    site = job_site(point, profile, opts)
    source = opts.source or source_root()
    env_lines = []
    for key, value in dict(site.get("env", {})).items():
        if not _ENV_NAME.match(str(key)):
            raise BadInput(f"site.env key '{shown(key)}' is not a valid environment variable name")
        env_lines.append(f"export {key}={q(value)}")
    settings = ", ".join(f"{k}={v}" for k, v in point.shown.items())
    out = ["#!/bin/bash", f"# caraml sweep point {point.id} on {point.system}: {printable(settings)}"]
    out += [f"#SBATCH {line}" for line in sbatch_lines(point, site, log)]
    out += [
        "",
        "set -u",
        *([f"trap {q('touch ' + q(opts.done_file))} EXIT", ""] if opts.done_file else []),
        f"export CARAML_SWEEP_POINT={q(point.id)}",
        f'export PYTHONPATH={q(source)}"${{PYTHONPATH:+:$PYTHONPATH}}"',
        *env_lines,
        "# rendezvous at the first host of the allocation (plus the site's interconnect suffix)",
        'caraml_head="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"',
        "# a node name no resolver knows (several slurmd emulating nodes on one host) is reached at its NodeAddr",
        'getent hosts "$caraml_head" >/dev/null || caraml_head="$(scontrol show node "$caraml_head" '
        '| grep -o "NodeAddr=[^ ]*" | cut -d= -f2)"',
        *([f'caraml_head="$caraml_head"{q(site["hostname_suffix"])}'] if site.get("hostname_suffix") else []),
        'export MASTER_ADDR="$caraml_head"',
        f"export MASTER_PORT={_master_port(site)}",
        "",
        "# the warning signal reaches this shell only (--signal=B:...): pass it on to the job step",
        "caraml_step=",
        "caraml_forward() {",
        '  echo "caraml: job $SLURM_JOB_ID got a stop signal; forwarding SIGUSR2 to the job step" >&2',
        '  if [ -n "$caraml_step" ]; then kill -USR2 "$caraml_step" 2>/dev/null; fi',
        "}",
        "trap caraml_forward USR2 TERM",
        " ".join(_srun(point, site) + _worker(point, profile, site, opts))
        + (f" > {q(opts.record)}" if opts.record else "") + " &",
        "caraml_step=$!",
        'wait "$caraml_step"; rc=$?',
        '# a trapped signal ends `wait` early: wait again until the step has written its record',
        'while kill -0 "$caraml_step" 2>/dev/null; do wait "$caraml_step"; rc=$?; done',
        "exit $rc",
        "",
    ]
    return "\n".join(out)
