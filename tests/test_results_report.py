"""`caraml plot` and `caraml report`: images produced and non-empty; the report checked in a real headless chromium."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from conftest import CHROMIUM, HANG_S, caraml, cli
from handmade import populate

from caraml.results.plots import pareto_front, phase_spans


@pytest.fixture(scope="module")
def campaign(tmp_path_factory) -> Path:
    results = tmp_path_factory.mktemp("campaign") / "results"
    populate(results)
    return results


def test_pareto_front_and_phase_spans():
    assert pareto_front([(1, 5), (2, 4), (1.5, 3), (3, 1), (0.5, 5)]) == [0, 1, 3]
    rows = [{"time_s": t, "phase": p} for t, p in [(0, "warmup"), (1, "warmup"), (2, "measure"), (3, "measure"),
                                                   (4, "done")]]
    assert phase_spans(rows) == [("warmup", 0, 2), ("measure", 2, 4), ("done", 4, 4)]


@pytest.mark.parametrize("kind, expect", [("throughput", 3), ("efficiency", 3), ("pareto", 3), ("scaling", 1),
                                          ("power", 1)])
def test_plot_kinds_write_png_and_svg(campaign, tmp_path, kind, expect):
    out = cli("plot", kind, "--results", campaign, "--out", tmp_path, check=0).stdout.split()
    pngs = [Path(p) for p in out if p.endswith(".png")]
    svgs = [Path(p) for p in out if p.endswith(".svg")]
    assert len(pngs) == len(svgs) == expect
    for png in pngs:
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    for svg in svgs:
        assert "<svg" in svg.read_text()[:1000] and svg.stat().st_size > 5000


def test_plot_bad_input(campaign, tmp_path):
    assert "unknown plot kind" in cli("plot", "histogram", "--results", campaign, check=2).stderr
    proc = cli("plot", "power", "--results", campaign, "--where", "system=A100", "--out", tmp_path, check=2)
    assert "no selected run has a power time series" in proc.stderr
    proc = cli("plot", "efficiency", "--results", campaign, "--where", "status=oom", "--out", tmp_path, check=2)
    assert "nothing to plot" in proc.stderr


def chromium(*args, profile: Path, timeout=HANG_S) -> subprocess.CompletedProcess:
    return subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                           "--disable-background-networking", "--disable-component-update", "--disable-sync",
                           f"--user-data-dir={profile}", *args], capture_output=True, text=True, timeout=timeout)


@pytest.mark.browser  # and `caraml report` end to end
def test_report_opens_in_a_real_browser(campaign, tmp_path):
    runs = campaign / "runs"
    (runs / "zz-half-written.json").write_text('{"schema": 1, "id": "abc", "work')
    report = tmp_path / "out" / "report.html"
    proc = caraml("report", "--results", campaign, "--out", report, check=0)
    assert "zz-half-written.json" in proc.stderr
    html = report.read_text()
    # self-contained: no file or network references, every image inline
    assert not re.search(r'(src|href)="(?!data:)', html)
    assert "zz-half-written.json" in html

    dom = chromium("--dump-dom", f"file://{report}", profile=tmp_path / "p1").stdout
    assert dom.count("<table") >= 8 and dom.count('src="data:image/png;base64,') >= 9
    for text in ("Images/s", "Tokens/s", "Timesteps/s", "Compared by system", "Compared by devices",
                 "Why not compared", "efficiency", "Power over time", "Runs and their environments", "hostname"):
        assert text in dom, text

    # Did the browser decode every embedded image? A copy of the report with a probe script says so in the title.
    probe = tmp_path / "probe.html"
    probe.write_text(html.replace("</body>", "<script>window.addEventListener('load', () => {"
                                  "const imgs = [...document.images];"
                                  "document.title = 'IMAGES ' + imgs.filter(i => i.complete && i.naturalWidth > 300)"
                                  ".length + '/' + imgs.length;});</script></body>"))
    dom = chromium("--dump-dom", f"file://{probe}", profile=tmp_path / "p2").stdout
    found = re.search(r"<title>IMAGES (\d+)/(\d+)</title>", dom)
    assert found and found.group(1) == found.group(2) and int(found.group(2)) >= 9, dom[:300]

    shot = tmp_path / "shot.png"
    chromium(f"--screenshot={shot}", "--window-size=1400,3000", f"file://{report}", profile=tmp_path / "p3")
    from matplotlib.image import imread

    pixels = imread(shot)
    assert pixels.shape[0] == 3000 and pixels.shape[1] == 1400
    assert pixels.std() > 0.05  # a rendered page, not a blank one
