"""Output that cannot be written never ends the work it describes: a full disk under stderr or under a sweep
point's log, a reader that left the pipe (`| head`). The run goes on without that stream, its record is saved and
its exit code is the run's; the events file beside the record holds whole lines only."""

from __future__ import annotations

import errno
import io
import json
import os
import subprocess
import sys
import textwrap

import pytest
from conftest import HANG_S, caraml, cli_env, records_in

pytestmark = pytest.mark.subprocess

TINY_IC = ("run", "image_classification", "--preset", "smoke", "power=off", "image_size=32", "num_classes=10",
           "warmup_steps=1", "measure_steps=2", "log_interval=0.000001")
OK, FAILS = "batch_size=2", "batch_size=100000000"  # a batch of 1.2 TB: the run ends `oom`, with a record


def test_a_full_disk_under_stderr_never_ends_a_run(results):
    with open("/dev/full", "w") as full:  # every write: ENOSPC, as a log file on a full disk
        proc = subprocess.run([sys.executable, "-m", "caraml", *TINY_IC, OK, "--results", str(results), "--json"],
                              stdout=subprocess.PIPE, stderr=full, text=True, env=cli_env(), timeout=HANG_S)
    assert proc.returncode == 0, proc.stdout
    record = json.loads(proc.stdout)
    assert record["status"] == "ok"
    assert [r["run_id"] for r in records_in(results)] == [record["run_id"]]


def test_a_full_disk_under_stdout_never_ends_a_run_and_is_said(results):
    with open("/dev/full", "w") as full:
        proc = subprocess.run([sys.executable, "-m", "caraml", *TINY_IC, OK, "--results", str(results), "--json"],
                              stdout=full, stderr=subprocess.PIPE, text=True, env=cli_env(), timeout=HANG_S)
    assert proc.returncode == 0, proc.stderr
    assert "caraml: warning: stdout cannot be written (No space left on device)" in proc.stderr
    assert [r["status"] for r in records_in(results)] == ["ok"]


def _reader_leaves_after(args, lines: int) -> tuple[int, str]:
    """Runs `caraml ARGS 2>&1 | head -LINES`: the exit code, and what was read before the reader left."""
    proc = subprocess.Popen([sys.executable, "-m", "caraml", *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=cli_env())
    seen = "".join(proc.stdout.readline() for _ in range(lines))
    proc.stdout.close()
    return proc.wait(timeout=HANG_S), seen


@pytest.mark.parametrize("log_format, lines", [("text", 2), ("json", 1)])
def test_a_closed_pipe_still_saves_the_record(results, log_format, lines):
    code, seen = _reader_leaves_after([*TINY_IC, OK, "--log-format", log_format, "--results", results], lines)
    assert len(seen.splitlines()) == lines
    assert [r["status"] for r in records_in(results)] == ["ok"], seen
    assert code == 0


def test_a_closed_pipe_keeps_the_exit_code_of_a_failed_run(results):
    code, seen = _reader_leaves_after([*TINY_IC, FAILS, "--results", results], 1)
    assert [r["status"] for r in records_in(results)] == ["oom"], seen
    assert code == 1


SUITE = """
workload: image_classification
preset: smoke
params:
  model: resnet18
  image_size: 32
  num_classes: 10
  warmup_steps: 1
  measure_steps: 2
  power: "off"
  batch_size: 2,100000000   # a batch of 1.2 TB ends `oom`, with a record
"""


def _suite(tmp_path):
    from caraml.campaign import suite as suite_mod
    from caraml.campaign.expand import expand

    path = tmp_path / "tiny.yaml"
    path.write_text(SUITE)
    return path, [p.as_json() for p in expand(suite_mod.load(str(path)), set(), "CPU")]


def test_a_sweep_whose_point_logs_cannot_be_written_still_runs_and_records_its_points(tmp_path, results):
    suite, points = _suite(tmp_path)
    logs = results / "sweep" / "logs"
    logs.mkdir(parents=True)
    for point in points:  # each point's log on a full disk
        (logs / f"{point['id']}.log").symlink_to("/dev/full")
    proc = caraml("sweep", suite, "--system", "CPU", "--results", results, check=1)
    assert "1 ok" in proc.stderr and "1 oom" in proc.stderr, proc.stderr
    by_id = {r["id"]: r for r in records_in(results)}
    assert {by_id[p["id"]]["params"]["batch_size"]: by_id[p["id"]]["status"] for p in points} == {
        2: "ok", 100000000: "oom"}  # each point's own record, not "the run ended without a record"


def test_a_sweep_whose_reader_left_still_runs_and_records_its_points(tmp_path, results):
    suite, points = _suite(tmp_path)
    code, seen = _reader_leaves_after(["sweep", suite, "--system", "CPU", "--results", results], 1)
    assert sorted(r["status"] for r in records_in(results)) == ["ok", "oom"], seen
    assert code == 1  # one point failed: the sweep's own exit code


def test_the_events_file_on_a_disk_that_fills_holds_whole_lines(tmp_path):
    """The file size limit (RLIMIT_FSIZE) makes a write stop part-way, as a disk that fills does."""
    events = tmp_path / "run.events.jsonl"
    script = textwrap.dedent(f"""
        import resource
        from caraml.measure.log import LiveLog

        log = LiveLog(quiet=True)
        log.run_start({str(events)!r}, "start")
        resource.setrlimit(resource.RLIMIT_FSIZE, (700, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
        for i in range(40):
            log.phase_start(f"phase-{{i}}", padding="x" * 37)
        log.run_stop("ok")
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=cli_env(),
                          timeout=HANG_S)
    assert proc.returncode == 0, proc.stderr
    text = events.read_text()
    assert 0 < len(text) <= 700 and text.endswith("\n"), text[-200:]
    assert [json.loads(line)["key"] for line in text.splitlines()][:2] == ["run_start", "phase_start"]


class _FullStream:
    """A stream whose every write fails as a full disk does, counting the tries."""

    def __init__(self):
        self.tries = 0

    def write(self, text):
        self.tries += 1
        raise OSError(errno.ENOSPC, "No space left on device")

    def flush(self):
        pass


def test_a_dropped_stream_is_never_written_again_and_says_so_once():
    from caraml.console import Forgiving

    warned = io.StringIO()
    stream = _FullStream()
    out = Forgiving(stream, "stdout", warn=warned)
    assert out.write("abc") == 3 and out.write("more") == 4 and out.write("again") == 5
    assert stream.tries == 1 and out.lost.errno == errno.ENOSPC
    assert warned.getvalue().count("caraml: warning: stdout cannot be written") == 1


def test_a_dropped_stream_is_pointed_at_dev_null_so_its_buffer_can_be_flushed():
    from caraml.console import Forgiving

    with open("/dev/full", "w") as full:
        out = Forgiving(full, "stdout")
        out.write("x" * 100000)  # past the buffer: the write reaches /dev/full and fails
        out.flush()
        assert out.lost is not None and os.readlink(f"/proc/self/fd/{full.fileno()}") == os.devnull
        out.write("after")
        out.flush()  # the rest goes to /dev/null: nothing raises
