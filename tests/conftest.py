"""Shared helpers: run the real `caraml` command in a subprocess or in this process, from this source tree;
markers by what a test needs and what it costs, and a guard that keeps the cost markers honest.

Markers (registered in pyproject.toml):
  needs  slurm, jube, browser, gpu - skipped here when the thing is missing; slurm/jube/browser also make a
         test `slow` (scripts/test.sh runs those after the rest, the cluster's in one worker)
  costs  subprocess - starts a process (`caraml`, python, a shell, a monitor); multiprocess - torchrun/ranks
A test that starts a process without `subprocess` (or torchrun without `multiprocess`) fails at teardown,
so `pytest -m "not subprocess and not multiprocess"` stays an in-process inner loop.
"""

from __future__ import annotations

import contextlib
import io
import json
import multiprocessing.process
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ports import free_port
from slurm_cluster import slurm_cluster  # noqa: F401 (a session fixture: one cluster for all tests)

ROOT = Path(__file__).resolve().parents[1]
# pytest-xdist's workers run with COLUMNS=80 and LINES=24 set, and a table fits COLUMNS wherever it is set: a test
# that wants a width sets it itself (monkeypatch), none inherits the worker's.
for _inherited in ("COLUMNS", "LINES"):
    os.environ.pop(_inherited, None)
# In-process imports test this tree too, not an installed copy of caraml elsewhere.
if str(ROOT / "src") not in sys.path:
    sys.path.insert(0, str(ROOT / "src"))
SHARED_DATA = ROOT.parent / "shared" / "data"  # CARAML's real files, beside the project (see its README.md)


def needs_shared_data(*names: str):
    """Skip the test when one of `names` is not in SHARED_DATA, saying so in pytest's -ra summary (a fresh clone
    has no ../shared/data): the reason names the folder and what is missing."""
    missing = [name for name in names if not (SHARED_DATA / name).is_file()]
    return pytest.mark.skipif(bool(missing), reason=f"real data absent: {', '.join(missing)} not in {SHARED_DATA} "
                                                    "(CARAML's reference files, beside the project)")
# torch 2.3's inductor forks its pool of compile workers when it is first imported (torch 2.4 on: when a compile
# needs it): one compile thread keeps an in-process test in its process, as the guard below asks.
try:
    from importlib.metadata import version as _version

    if tuple(int(part) for part in _version("torch").split(".")[:2]) < (2, 4):
        os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
except Exception:  # noqa: BLE001 - no torch, or an odd version string: nothing to keep in its process
    pass
# Bounds on a hang only: under load (2 cores, load average 14) the events come late, never this late.
HANG_S = 600
# Threads of a started `caraml` (and of this process's torch): the cores shared among pytest-xdist's workers, at most 2.
# More threads than cores (2 workers on 2 cores, each process with 2) make OpenMP's waiting threads spin on the cores
# the other worker needs: the same runs, a quarter more CPU time.
THREADS = str(max(1, min(2, (os.cpu_count() or 1) // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))))
if "PYTEST_XDIST_WORKER_COUNT" in os.environ:
    os.environ.setdefault("OMP_NUM_THREADS", THREADS)  # a worker's own torch too (imported later, by the tests)


def _nvml_present() -> bool:
    """Whether this machine has a working NVIDIA driver: tests that expect "no GPU here" adapt to it."""
    try:
        from caraml.power.backends import nvml

        nvml.make("/sys").open()
        return True
    except Exception:  # noqa: BLE001 - any failure means no usable NVML
        return False


HAS_NVML = _nvml_present()
CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)


def torchrun(ranks: int = 2) -> list[str]:
    """The start of a torchrun command for `ranks` processes on this host, its rendezvous on a free port."""
    return [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(ranks), "--master-port",
            str(free_port())]


def cli_env(**extra) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("OMP_NUM_THREADS", THREADS)
    env.update({k: str(v) for k, v in extra.items()})
    return env


# processes started by tests: a hang ends all of them and fails its own test ------------------------------------
HUNG = "hung:"  # the last stderr line of a command ended for hanging


def _children() -> dict[int, list[int]]:
    """Every process's children, from /proc's parent links."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/stat") as f:
                    parent = int(f.read().rsplit(")", 1)[1].split()[1])  # after "(command name)": state, ppid
            except (OSError, IndexError, ValueError):  # ended meanwhile
                continue
            children.setdefault(parent, []).append(int(entry.name))
    return children


def _tree(pid: int) -> set[int]:
    children, found, todo = _children(), set(), [pid]
    while todo:
        found.add(todo[-1])
        todo.extend(children.get(todo.pop(), []))
    return found


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def describe_tree(proc: subprocess.Popen) -> str:
    """Each process under `proc`, a line each: pid, state (R running, S sleeping, D in the kernel, Z ended), what
    the kernel has it wait in, its command: what a test that found a command hanging says, before it kills it."""
    lines = []
    for pid in sorted(_tree(proc.pid)):
        with contextlib.suppress(OSError):
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            wchan = Path(f"/proc/{pid}/wchan").read_text().strip() or "-"
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            lines.append(f"{pid} {state} {wchan} {command[:200]}")
    return "\n".join(lines)


def kill_tree(proc: subprocess.Popen) -> None:
    """SIGKILL `proc` and every process under it, and reap it. Its process group alone is not all: torchrun starts
    each rank in a session of its own, and a rank's DataLoader workers come from its fork server. Each process found
    is stopped first, so that none starts another, or loses its parent, while the tree is walked."""
    stopped: set[int] = set()
    while True:
        new = _tree(proc.pid) - stopped
        if not new:
            break
        for pid in new:
            _signal(pid, signal.SIGSTOP)
        stopped |= new
    for pid in stopped:
        _signal(pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)  # any of its process group whose parent had ended before the walk
    proc.wait()


_running: set[subprocess.Popen] = set()


def _finish(argv: list[str], timeout: float, popen: dict) -> subprocess.CompletedProcess:
    """`argv` to its end in a session of its own, its output captured as text; past `timeout` it is ended with all
    it started, and its stderr ends with a HUNG line. Interrupted here (Ctrl-C), it is ended too."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            **popen)
    _running.add(proc)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_tree(proc)
        try:
            out, err = proc.communicate(timeout=60)  # a process that escaped the tree may still hold the pipes
        except subprocess.TimeoutExpired:
            out, err = "", "(its output is held by a process that escaped the tree)"
        err = f"{err or ''}\n{HUNG} ended after {timeout:g} s, with every process it started\n"
    except BaseException:
        kill_tree(proc)
        raise
    finally:
        _running.discard(proc)
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def hung(proc: subprocess.CompletedProcess) -> bool:
    return (proc.stderr or "").rstrip().rpartition("\n")[2].startswith(HUNG)


def run(cmd, timeout: float = HANG_S, **popen) -> subprocess.CompletedProcess:
    """`cmd` to its end (stdout and stderr captured, text); a hang ends it and every process it started, and fails
    the test that ran it, with its stderr."""
    proc = _finish([str(c) for c in cmd], timeout, popen)
    if hung(proc):
        pytest.fail(f"{' '.join(proc.args)[:300]}\n{proc.stderr[-3000:]}", pytrace=False)
    return proc


def run_all(commands: dict[str, list], parallel: int, timeout: float = HANG_S,
            **popen) -> dict[str, subprocess.CompletedProcess]:
    """Each command to its end, `parallel` at a time (a fixture's runs, read by several tests). One that hangs is
    ended with all it started after `timeout` from its own start, and comes back failed (exit -9, a last HUNG line
    in its stderr): the tests that read it fail, the others' results stand."""
    from concurrent.futures import ThreadPoolExecutor

    pool = ThreadPoolExecutor(parallel)
    futures = {name: pool.submit(_finish, [str(c) for c in cmd], timeout, popen) for name, cmd in commands.items()}
    try:
        return {name: future.result() for name, future in futures.items()}
    except BaseException:  # Ctrl-C: none of them goes on running
        for future in futures.values():
            future.cancel()
        for proc in list(_running):
            kill_tree(proc)
        raise
    finally:
        pool.shutdown()


def caraml(*args, timeout=HANG_S, env=None, check=None) -> subprocess.CompletedProcess:
    """`python -m caraml ARGS` with this tree's sources; returns the finished process (a hang fails the test)."""
    proc = run([sys.executable, "-m", "caraml", *args], timeout=timeout, env=env or cli_env())
    if check is not None:
        assert proc.returncode == check, f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return proc


def cli(*args, check=None) -> subprocess.CompletedProcess:
    """`caraml ARGS` in this process (caraml.cli.main), for commands that only read and print (result, compare):
    the same exit code, stdout and stderr as the subprocess, without starting Python and importing again."""
    from caraml.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main([str(a) for a in args])
        except SystemExit as exc:  # argparse's errors
            code = exc.code if isinstance(exc.code, int) else 2
    proc = subprocess.CompletedProcess(["caraml", *map(str, args)], code, out.getvalue(), err.getvalue())
    if check is not None:
        assert proc.returncode == check, f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return proc


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    """`caraml ARGV` in this process under pytest's capsys: exit code (argparse's too), stdout, stderr."""
    from caraml.cli import main

    try:
        code = main([str(a) for a in argv])
    except SystemExit as exc:  # argparse's errors
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def records_in(results: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((results / "runs").glob("*.json"))]


def wait_until(predicate, what: str, timeout: float = HANG_S, proc: subprocess.Popen | None = None, every=0.1):
    """Wait for an event (predicate() true); fail after `timeout` (a hang) or when `proc` ends first."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"the process ended (exit {proc.returncode}) before {what}")
        if time.monotonic() > deadline:
            pytest.fail(f"no {what} within {timeout:g} s")
        time.sleep(every)


def read_stderr_until(proc: subprocess.Popen, text: str, timeout: float = HANG_S) -> str:
    """Read proc's stderr line by line up to a line holding `text`; what was read. Fails when stderr ends first;
    a hang is bounded by ending proc, with all it started, after `timeout` (a blocking readline, so no line sits
    unseen in a buffer)."""
    import threading

    seen = ""
    killer = threading.Timer(timeout, kill_tree, args=(proc,))
    killer.start()
    try:
        for line in proc.stderr:
            seen += line
            if text in line:
                return seen
    finally:
        killer.cancel()
    pytest.fail(f"stderr ended (exit {proc.wait()}) before a line with {text!r} (killed after {timeout:g} s "
                f"if it hung):\n{seen[-3000:]}")


@pytest.fixture
def results(tmp_path) -> Path:
    return tmp_path / "results"


# markers ------------------------------------------------------------------------------------------------------
def _missing(name: str) -> str | None:
    if name == "slurm" and (shutil.which("slurmctld") is None or os.geteuid() != 0):
        return "needs Debian's slurmctld/slurmd and root"
    if name == "jube" and shutil.which("jube") is None:
        return "needs JUBE (Debian package jube)"
    if name == "browser" and CHROMIUM is None:
        return "chromium is not installed (Debian package chromium)"
    if name == "gpu" and not HAS_NVML:
        return "needs an NVIDIA GPU"
    return None


@pytest.hookimpl(tryfirst=True)  # before -m deselects: the markers added here take part in the selection
def pytest_collection_modifyitems(config, items):
    for item in items:
        if "slurm_cluster" in item.fixturenames:
            item.add_marker(pytest.mark.slurm)
        if item.get_closest_marker("slurm"):  # one pytest-xdist worker holds the session's cluster (--dist loadgroup)
            item.add_marker(pytest.mark.xdist_group("slurm"))
        needs = {name for name in ("slurm", "jube", "browser", "gpu") if item.get_closest_marker(name)}
        if needs & {"slurm", "jube", "browser"}:
            item.add_marker(pytest.mark.slow)  # the shared cluster, JUBE, a browser: scripts/test.sh's second pass
            item.add_marker(pytest.mark.subprocess)
        if item.get_closest_marker("multiprocess"):
            item.add_marker(pytest.mark.subprocess)
        for name in sorted(needs):
            if why := _missing(name):
                item.add_marker(pytest.mark.skip(reason=why))


# the guard: a process started by a test that is not marked for it ------------------------------------------------
_current: pytest.Item | None = None
_started: list[list[str]] = []
_popen_init = subprocess.Popen.__init__
PROBES = {"git", "uname", "ldconfig", "gcc", "cc", "ld", "objdump", "fc-list"}  # environment probes (git commit,
# platform.processor(), ctypes.util.find_library, matplotlib's first font scan): from in-process code paths too


def _argv(args) -> list[str]:
    return [str(args)] if isinstance(args, (str, bytes, os.PathLike)) else [str(a) for a in args]


def _watching_init(self, args, *rest, **kw):
    argv = _argv(args)
    if _current is not None and Path(argv[0]).name not in PROBES:
        _started.append(argv)
    _popen_init(self, args, *rest, **kw)


subprocess.Popen.__init__ = _watching_init
_process_start = multiprocessing.process.BaseProcess.start


def _watching_start(self):
    """multiprocessing's processes too (a DataLoader's workers): they start no Popen."""
    if _current is not None:
        _started.append([f"a multiprocessing process ({self.name})"])
    _process_start(self)


multiprocessing.process.BaseProcess.start = _watching_start


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    global _current
    _current = item
    _started.clear()
    try:
        yield
    finally:
        _current = None


@pytest.fixture(autouse=True)
def _cost_markers_are_honest(request):
    yield
    started = list(_started)
    if started and not request.node.get_closest_marker("subprocess"):
        pytest.fail(f"started {' '.join(started[0])[:200]!r} but is not marked `subprocess`", pytrace=False)
    ranks = [a for a in started if "torch.distributed.run" in a or Path(a[0]).name == "torchrun"]
    if ranks and not request.node.get_closest_marker("multiprocess"):
        pytest.fail(f"started {' '.join(ranks[0])[:200]!r} but is not marked `multiprocess`", pytrace=False)
