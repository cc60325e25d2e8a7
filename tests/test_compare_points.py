"""caraml.compare.points: the comparison scripts' points and groups (data), their run under a time budget, the
refusal of an unknown name, and the results table."""

from __future__ import annotations

import json
import sys

import pytest
from conftest import ROOT, run

from caraml.compare.points import Column, Group, Point, find_group, run_points, select, table_lines, write_report
from caraml.errors import BadInput

GROUP = Group("attempts", aliases=("old-name",), budget_s=100.0, points=(
    Point("first", ("a=1",), expect_s=40), Point("second", knobs={"k": 1}, expect_s=50),
    Point("third", expect_s=30), Point("named_only", expect_s=5, by_default=False)))


def test_without_only_the_default_points_run_in_order_and_only_names_any_point():
    assert [p.name for p in select(GROUP, None)] == ["first", "second", "third"]
    assert [p.name for p in select(GROUP, "named_only,first")] == ["named_only", "first"]


def test_an_unknown_point_or_group_is_refused_naming_the_choices():
    with pytest.raises(BadInput, match=r"^unknown point\(s\) nope in group attempts; choose from: first, second, "
                                       r"third, named_only$"):
        select(GROUP, "first,nope")
    assert find_group((GROUP,), "old-name") is GROUP  # an old name is still accepted
    with pytest.raises(BadInput, match="^unknown group x; choose from: attempts, old-name$"):
        find_group((GROUP,), "x")


def test_a_point_the_budget_has_no_room_for_is_skipped_not_started_and_each_row_saved():
    clock, ran, saved = [0.0], [], []

    def run_one(point, seconds):
        ran.append((point.name, seconds))
        clock[0] += point.expect_s
        return {"name": point.name, "status": "ok"}

    rows = run_points(select(GROUP, None), run_one, GROUP.budget_s, lambda r: saved.append(len(r)),
                      clock=lambda: clock[0])
    assert ran == [("first", 100.0), ("second", 60.0)]  # third needs 30 s, 10 s left
    assert rows[2] == {"name": "third", "status": "skipped: needs ≈ 30 s, 10 s of the 100 s budget left",
                       "expected_s": 30}
    assert saved == [1, 2, 3]
    unbudgeted = run_points(select(GROUP, None), run_one, None, lambda r: None, clock=lambda: clock[0])
    assert [r["status"] for r in unbudgeted] == ["ok"] * 3  # a self-check is not held to the GPU's estimates


def test_the_table_has_a_header_a_line_per_row_and_the_error_of_a_failed_one(tmp_path):
    columns = (Column("point", 8, "s", "name"), Column("img/s", 7, ".0f", "images_per_s"),
               Column("x2", 5, ".1f", lambda r: 2 * r["images_per_s"] if r.get("images_per_s") else None))
    rows = [{"name": "first", "status": "ok", "images_per_s": 1234.4},
            {"name": "second", "status": "failed", "error": "exit 1: out of memory"}]
    lines = table_lines(rows, columns, notes=lambda r: ["    note"] if r["name"] == "first" else [])
    assert lines == ["point      img/s    x2", "first       1234 2468.8", "    note", "second         -     -",
                     "    failed exit 1: out of memory"]
    path = write_report(tmp_path / "out", "cmp", {"rows": rows}, lines)
    assert json.loads(path.read_text())["rows"] == rows
    assert (tmp_path / "out" / "cmp.txt").read_text().splitlines() == lines


@pytest.mark.subprocess
def test_an_unknown_only_name_is_one_line_and_exit_2(tmp_path):
    proc = run([sys.executable, ROOT / "bench" / "ic_bench.py", tmp_path, "--group=resnet50-attempts",
                "--only=baseline,nope"], timeout=120, cwd=ROOT)
    assert proc.returncode == 2
    from caraml.compare.image_classification import ATTEMPTS

    assert proc.stderr.strip() == ("ic_bench: unknown point(s) nope in group resnet50-attempts; choose from: "
                                   + ", ".join(ATTEMPTS.names()))
    assert "baseline, stem_pad, " in proc.stderr
