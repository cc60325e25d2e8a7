"""DataLoader worker processes, started by a fork server: never forked from the benchmark's own process.

The benchmark's process runs threads that are not Python's: gloo's and NCCL's. When one of them frees a finished
collective it can enter Python (pybind11's GIL acquisition creates a thread state, taking CPython's runtime lock
without holding the GIL). A worker forked at that moment starts with the lock taken and no thread left to release
it: it waits for ever in CPython's after-fork (PyOS_AfterFork_Child), before the DataLoader's code, and its rank
waits for ever for its first batch, the other ranks for that rank. A fork server is a process of its own, started
with fork + exec, that runs no threads; the workers it forks start clean.

Workers leave Ctrl-C, SIGHUP and SIGUSR2 to the main process: sent to the whole process group (a terminal's Ctrl-C,
its hang-up, SLURM's warning) they are the main process's to handle (it stops between steps and closes the
loaders). SIGTERM ends a worker: it is how a worker that does not stop is ended (at the main process's exit, by
multiprocessing; by the DataLoader when it shuts its workers down); a run whose workers a SIGTERM to the process group
ended is recorded as stopped by that SIGTERM. Workers end with their process: the fork server ends when it does, and
a worker when its fork server does.
"""

from __future__ import annotations

import signal

LEFT_TO_THE_MAIN_PROCESS = tuple(s for s in (signal.SIGINT, getattr(signal, "SIGHUP", None),
                                             getattr(signal, "SIGUSR2", None)) if s)


def ignore_stop_signals(_worker_id: int) -> None:
    """DataLoader worker_init_fn: the stop signals the main process handles, ignored in the worker (see the module's
    docstring)."""
    for sig in LEFT_TO_THE_MAIN_PROCESS:
        signal.signal(sig, signal.SIG_IGN)


def worker_options(workers: int, *preload: str) -> dict:
    """DataLoader keyword arguments for `workers` worker processes (none: the main process loads), kept alive
    between epochs and started by this process's fork server. `preload`: the modules the workers need (the
    dataset's), imported once by the fork server with torch rather than by every worker."""
    if workers <= 0:
        return {"num_workers": 0}
    import multiprocessing

    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["torch", *preload])  # no effect once the server runs: it has them already
    return {"num_workers": workers, "persistent_workers": True, "multiprocessing_context": context,
            "worker_init_fn": ignore_stop_signals}
