"""Two programs' figures for one benchmark point, measured alternately and compared with their spreads.

A peer is code a user would run instead of caraml (CARAML's own scripts, Megatron-LM, operator_learning). It is
never part of this project: a side is a command line with the figure it prints or the record it writes, run
unchanged in a folder of its own. Each repeat runs both sides back to back, the order swapping every repeat
(peer, caraml, caraml, peer, ...), so a drift of the machine falls on both. Per point the comparison gives both
medians, min-max, the ratio of the medians and whether the two ranges overlap.
"""

from __future__ import annotations

import json
import os
import re
import signal
import statistics
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

TAIL_CHARS = 4000  # of each run's output, kept in the JSON


@dataclass(frozen=True)
class Finished:
    """What a side's run left: its exit code, its output (stdout and stderr together) and its folder."""

    rc: int
    output: str
    folder: Path


Reader = Callable[[Finished], Optional[float]]


@dataclass(frozen=True)
class Side:
    """One program of a pair: its command, extra environment, and readers of its figures (the first is the one
    compared)."""

    label: str
    argv: tuple
    figures: dict
    env: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Point:
    name: str
    peer: Side
    caraml: Side
    note: str = ""


def last_number(pattern: str) -> Reader:
    """The number in the last line of the output matching `pattern` (its first group)."""
    compiled = re.compile(pattern)

    def read(done: Finished) -> float | None:
        found = compiled.findall(done.output)
        return float(found[-1].replace(",", "")) if found else None

    return read


def record_value(*keys: str) -> Reader:
    """A value from the one caraml record under the run's folder (`results/runs/*.json`), by its keys."""

    def read(done: Finished) -> float | None:
        records = sorted((done.folder / "results" / "runs").glob("*.json")) if done.folder else []
        if not records:
            return None
        value = json.loads(records[-1].read_text())
        for key in keys:
            value = value.get(key) if isinstance(value, dict) else None
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    return read


def order(points: list[Point], repeats: int) -> list[tuple[Point, str, int]]:
    """The runs in the order they are made: point by point, each repeat a pair whose order swaps every repeat."""
    runs = []
    for point in points:
        for repeat in range(repeats):
            pair = ("peer", "caraml") if repeat % 2 == 0 else ("caraml", "peer")
            runs.extend((point, side, repeat) for side in pair)
    return runs


def run_side(side: Side, folder: Path, timeout: float) -> tuple[Finished, float]:
    """Runs one side in `folder` (its own session, so a time-out ends its whole process tree)."""
    folder.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **side.env}
    start = time.monotonic()
    proc = subprocess.Popen([str(a) for a in side.argv], cwd=folder, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, errors="replace", start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        output += f"\npeers: killed after {timeout:.0f} s\n"
    return Finished(proc.returncode, output, folder), time.monotonic() - start


def read_figures(side: Side, done: Finished) -> dict:
    return {name: reader(done) for name, reader in side.figures.items()}


def spread(values: list[float]) -> dict | None:
    """n, median, min and max of the figures that exist; None when there are none."""
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {"n": len(values), "median": statistics.median(values), "min": min(values), "max": max(values)}


def compare(peer: list[float], ours: list[float], tolerance: float = 0.03) -> dict:
    """Both spreads, caraml's median over the peer's, whether the two min-max ranges overlap, and whether
    caraml's median is within `tolerance` of the peer's or inside the peer's own min-max (where that is wider)."""
    a, b = spread(peer), spread(ours)
    out = {"peer": a, "caraml": b, "ratio": None, "overlap": None, "agrees": None}
    if a and b and a["median"]:
        out["ratio"] = b["median"] / a["median"]
        out["overlap"] = a["min"] <= b["max"] and b["min"] <= a["max"]
        out["agrees"] = abs(out["ratio"] - 1) <= tolerance or a["min"] <= b["median"] <= a["max"]
    return out


def summarise(points: list[Point], runs: list[dict], tolerance: float = 0.03) -> list[dict]:
    """Per point and figure, the comparison of the two sides' values over the runs made."""
    rows = []
    for point in points:
        names = list(point.peer.figures) + [n for n in point.caraml.figures if n not in point.peer.figures]
        for name in names:
            values = {side: [r["figures"].get(name) for r in runs if r["point"] == point.name and r["side"] == side]
                      for side in ("peer", "caraml")}
            rows.append({"point": point.name, "figure": name, "peer_label": point.peer.label,
                         "caraml_label": point.caraml.label, **compare(values["peer"], values["caraml"], tolerance)})
    return rows


def _cell(s: dict | None) -> str:
    if not s:
        return "-"
    return f"{s['median']:,.4g} ({s['min']:,.4g}-{s['max']:,.4g}, n={s['n']})"


def markdown(rows: list[dict]) -> str:
    """The comparison as a Markdown table: median (min-max, n) of each side, the ratio, overlap, agreement."""
    lines = ["| point | figure | peer: median (min-max, n) | caraml: median (min-max, n) | caraml/peer | ranges "
             "overlap | agrees |", "| --- | --- | --- | --- | ---: | --- | --- |"]
    for r in rows:
        ratio = f"{r['ratio']:.3f}" if r["ratio"] is not None else "-"
        yes = {True: "yes", False: "no", None: "-"}
        lines.append(f"| {r['point']} | {r['figure']} | {r['peer_label']}: {_cell(r['peer'])} | "
                     f"{r['caraml_label']}: {_cell(r['caraml'])} | {ratio} | {yes[r['overlap']]} | "
                     f"{yes[r['agrees']]} |")
    return "\n".join(lines) + "\n"


def run_all(points: list[Point], repeats: int, workdir: Path, timeout: float, budget: float | None = None,
            log: Callable[[str], None] = print) -> list[dict]:
    """Every run of `order(points, repeats)`, each in a folder of its own under `workdir`; stops starting runs
    once `budget` seconds have passed (the runs made are kept)."""
    start, runs = time.monotonic(), []
    for point, side_name, repeat in order(points, repeats):
        if runs and budget is not None and time.monotonic() - start > budget:
            log(f"peers: budget of {budget:.0f} s spent; {point.name} {side_name} #{repeat} and later runs skipped")
            break
        side = point.peer if side_name == "peer" else point.caraml
        done, wall = run_side(side, workdir / f"{point.name}-{side_name}-{repeat}", timeout)
        figures = read_figures(side, done)
        shown = ", ".join(f"{k} {v:,.4g}" if v is not None else f"{k} -" for k, v in figures.items())
        log(f"peers: {point.name} {side_name} ({side.label}) #{repeat}: rc {done.rc}, {wall:.1f} s, {shown}")
        runs.append({"point": point.name, "side": side_name, "label": side.label, "repeat": repeat, "rc": done.rc,
                     "wall_s": wall, "figures": figures, "argv": [str(a) for a in side.argv],
                     "tail": done.output[-TAIL_CHARS:]})
    return runs
