"""A full disk in the middle of a write : the write fails after part of the
bytes reached the file. A run's record is then saved elsewhere and nothing half-written stays in the results
folder; a sweep state keeps its previous content readable. In process: the write is made to fail by hand.
"""

from __future__ import annotations

import errno
import json
from pathlib import Path

import pytest
from handmade import image

from caraml.errors import BadInput

FULL = OSError(errno.ENOSPC, "No space left on device")


def half_then_full(monkeypatch, where):
    """Path.write_text writes half its text and then fails as a full disk does, for paths where `where(path)`."""
    real = Path.write_text

    def write_text(self, data, *args, **kwargs):
        if not where(self):
            return real(self, data, *args, **kwargs)
        real(self, data[:len(data) // 2], *args, **kwargs)
        raise OSError(FULL.errno, FULL.strerror)

    monkeypatch.setattr(Path, "write_text", write_text)


def test_record_write_that_fills_the_disk_leaves_no_half_record(tmp_path, monkeypatch, capsys):
    from caraml.results.store import Store

    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    results = tmp_path / "results"
    store = Store(results)
    first = image("H100", 64, "bf16", 2400.0, started="2026-12-01T10:00:00.000+00:00")
    store.save(first)
    half_then_full(monkeypatch, lambda p: p.parent == results / "runs")
    second = image("H100", 128, "bf16", 2600.0, started="2026-12-01T10:05:00.000+00:00")
    saved = store.save(second)
    assert saved == tmp_path / "tmp" / "caraml-unsaved" / f"{second['run_id']}.json"
    assert json.loads(saved.read_text())["run_id"] == second["run_id"]
    assert sorted(p.name for p in (results / "runs").iterdir()) == [f"{first['run_id']}.json"]
    assert [r["run_id"] for r in store.load()] == [first["run_id"]]  # every file there reads whole
    err = capsys.readouterr().err
    assert "No space left on device" in err and str(saved) in err


def test_sweep_state_write_that_fills_the_disk_keeps_the_previous_state(tmp_path, monkeypatch):
    from caraml.campaign import state

    point = {"id": "p1", "workload": "fno", "system": "CPU", "params": {}, "world_size": 1, "nodes": 1,
             "devices_per_node": 1}
    before = {"jobs": {"101": {"state": "submitted", "point": point, "submitted_at": "2026-12-01T10:00:00"}}}
    state.save(tmp_path, before)
    after = {"jobs": {**before["jobs"], "102": {"state": "submitted", "point": {**point, "id": "p2"},
                                                "submitted_at": "2026-12-01T10:01:00"}}}
    real_fdopen = state.os.fdopen

    class HalfThenFull:  # a file whose write stores half its text, then fails as a full disk does
        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def write(self, text):
            self.f.write(text[:len(text) // 2])
            self.f.flush()
            raise OSError(FULL.errno, FULL.strerror)

    monkeypatch.setattr(state.os, "fdopen", lambda fd, *a, **k: HalfThenFull(real_fdopen(fd, *a, **k)))
    with pytest.raises(BadInput, match="cannot be written \\(No space left on device\\)"):  # one line, exit 2
        state.save(tmp_path, after)
    monkeypatch.undo()
    assert state.load(tmp_path) == before
    assert not list(tmp_path.glob(".sweep-state*")), "the half-written temporary file is left behind"
