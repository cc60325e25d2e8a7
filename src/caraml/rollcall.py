"""Which ranks of a multi-process run ended without a word: a rank killed on another node cannot write a record,
and the ranks that see it go only see a closed connection.

Every rank checks in (its node, node rank, pid) in the shared results folder before the process group starts and
checks out with its status when it ends, however it ends but SIGKILL. A rank that failed (each writes its own
record, rank 0 too) waits a bounded time for every rank's check-out; the ranks still silent then are named in its
record. The folder is keyed by the configuration and the launch (torchrun's rendezvous id, or SLURM's job and
step), so the ranks of one launch meet there and no other launch's files are read; a rank that never checked in
is lost too.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from caraml.distributed import DistContext, node_name
from caraml.paths import safe_name

WAIT_S = 10.0  # how long a failed rank waits for the other ranks' word before naming them lost


def launch_id() -> str | None:
    """What the ranks of one launch share and no other launch does; None: an unknown launcher (no roll call)."""
    env = os.environ
    if env.get("TORCHELASTIC_RUN_ID"):
        return "torchrun-" + env["TORCHELASTIC_RUN_ID"]
    if env.get("SLURM_JOB_ID") and env.get("SLURM_STEP_ID"):
        return f"slurm-{env['SLURM_JOB_ID']}.{env['SLURM_STEP_ID']}"
    return None


class RollCall:
    def __init__(self, runs_dir, config_id: str, dist: DistContext):
        self.dist = dist
        launch = launch_id()
        self.folder = (Path(runs_dir) / safe_name(f"{config_id}.{launch}.ranks")
                       if launch and dist.world_size > 1 else None)

    def _write(self, state: dict) -> None:
        if self.folder is None:
            return
        entry = {"rank": self.dist.rank, "node": node_name(), "node_rank": self.dist.node_rank,
                 "pid": os.getpid(), **state}
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            tmp = self.folder / f".rank{self.dist.rank}.tmp"
            tmp.write_text(json.dumps(entry))
            os.replace(tmp, self.folder / f"rank{self.dist.rank}.json")  # a reader never sees half a file
        except OSError:
            pass  # the roll call only explains a failure; it is never a reason for one

    def check_in(self) -> None:
        self._write({"state": "running"})

    def check_out(self, status: str) -> None:
        self._write({"state": status})

    def lost(self, wait_s: float = WAIT_S) -> list[dict]:
        """The ranks that checked in but not out within wait_s (each {rank, node, node_rank, pid, state}); never
        this rank. Ranks that never checked in are lost too (node unknown)."""
        if self.folder is None:
            return []
        deadline = time.monotonic() + wait_s
        while True:
            silent = [e for e in self._entries() if e.get("state") == "running" and e["rank"] != self.dist.rank]
            if not silent or time.monotonic() > deadline:
                return silent
            time.sleep(0.2)

    def _entries(self) -> list[dict]:
        out = []
        for rank in range(self.dist.world_size):
            try:
                out.append(json.loads((self.folder / f"rank{rank}.json").read_text()))
            except (OSError, ValueError):
                out.append({"rank": rank, "node": None, "node_rank": None, "state": "running"})
        return out

    def clear(self) -> None:
        """After a run every rank finished (rank 0 only): nothing left to explain."""
        if self.folder is None:
            return
        try:
            for path in self.folder.glob("*"):
                path.unlink(missing_ok=True)
            self.folder.rmdir()
        except OSError:
            pass  # left behind: a few bytes, read by no other launch


def describe(lost: list[dict], wait_s: float = WAIT_S) -> str:
    """One phrase naming the lost ranks, for the failed record's error."""
    names = [f"rank {e['rank']} on node {e['node']} (node rank {e['node_rank']})" if e.get("node")
             else f"rank {e['rank']} (never checked in)" for e in lost]
    return (f"{', '.join(names)} ended without a word within {wait_s:g} s of this failure: killed (SIGKILL, "
            "out of memory) or stuck")
