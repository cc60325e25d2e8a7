"""Plots a reader understands and the report's wide tables: legends that name only what
tells the series apart, the rest in a caption, titles whole, the legend outside the axes, no warnings, a batch
sweep joined into a line, error bars from repeats; the report's tables scroll in their box, headline columns first.

Everything here runs in this process (matplotlib's Agg backend); the report's browser test is elsewhere."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest
from conftest import cli
from handmade import fno, record, write

from caraml.results import plots
from caraml.results.select import select


def llm_point(system, gbs, grad_accumulation, tokens_per_s, *, devices=4, tp=1, lr=1e-4, data="synthetic",
              data_path="", **kw):
    """An LLM record of a global-batch sweep made through grad_accumulation (global_batch_size=0: derived),
    with the learning rate scaled with the batch as sweeps do."""
    params = {"model_size": "800M", "global_batch_size": 0, "micro_batch_size": 4,
              "grad_accumulation": grad_accumulation, "tp": tp, "pp": 1, "seq_length": 2048, "precision": "bf16",
              "lr": lr, "min_lr": lr / 10, "data": data, "data_path": data_path}
    extra = {"global_batch_size": gbs, "time_per_iteration_s": gbs * 2048 / tokens_per_s, "dp": devices // tp}
    return record("llm_training", system, params, tokens_per_s, devices=devices, extra_metrics=extra, **kw)


def ic_point(system, batch_size, precision, images_per_s, *, devices=1, lr=0.1, workers=4, **kw):
    params = {"model": "resnet50", "image_size": 224, "num_classes": 1000, "batch_size": batch_size,
              "precision": precision, "compile": "none", "compile_mode": "default", "compile_scope": "model",
              "channels_last": True, "data": "synthetic-host", "workers": workers, "cudnn_benchmark": True, "lr": lr,
              "momentum": 0.9, "weight_decay": 1e-4}
    return record("image_classification", system, params, images_per_s, devices=devices, **kw)


def mixed(results: Path) -> dict[str, dict]:
    """A results folder as a real campaign leaves it: several systems and precisions, a learning rate scaled with
    the batch, a parameter that differs with the system only, repeats, an LLM batch sweep, device counts."""
    t = iter(f"2026-12-01T{h:02d}:{m:02d}:00.000+00:00" for h in range(10, 14) for m in range(60))
    recs = {}

    def add(name, rec):
        write(results, rec)
        recs[name] = rec

    for bs, ips in ((64, 2400.0), (128, 2800.0), (256, 3000.0)):  # lr scaled with the batch (0.1 per 64)
        for i, jitter in enumerate((0.96, 1.0, 1.05) if bs == 64 else (1.0,)):
            add(f"ic_h100_{bs}_{i}", ic_point("H100", bs, "bf16", ips * jitter, energy_wh=10.0,
                                           units_per_wh=ips * jitter / 2.5, lr=0.1 * bs / 64, started=next(t)))
    for bs, ips in ((64, 1000.0), (128, 1100.0)):
        add(f"ic_h100_fp32_{bs}", ic_point("H100", bs, "fp32", ips, energy_wh=11.0, units_per_wh=ips / 2.6,
                                        lr=0.1 * bs / 64, started=next(t)))
    for bs, ips in ((64, 1500.0), (128, 1600.0), (256, 1650.0)):
        add(f"ic_a100_{bs}", ic_point("A100", bs, "bf16", ips, energy_wh=9.0, units_per_wh=ips / 2.4, lr=0.1 * bs / 64,
                                   started=next(t)))
    for bs, ips in ((64, 1900.0), (128, 2100.0)):  # eight workers on this system only: not a line of its own
        add(f"ic_mi250_{bs}", ic_point("MI250", bs, "bf16", ips, energy_wh=12.0, units_per_wh=ips / 3.0,
                                    lr=0.1 * bs / 64, workers=8, started=next(t)))
    for devices, ips in ((4, 9400.0), (8, 18000.0)):
        add(f"ic_h100_x{devices}", ic_point("H100", 64, "bf16", ips, devices=devices, energy_wh=40.0 * devices / 4,
                                         units_per_wh=ips / 10.0, lr=0.1, started=next(t)))
    for gbs, ga, tps in ((16, 1, 250_000.0), (32, 2, 330_000.0), (64, 4, 380_000.0), (128, 8, 400_000.0)):
        for i, jitter in enumerate((0.97, 1.0, 1.04) if gbs == 32 else (1.0,)):
            add(f"llm_h100_{gbs}_{i}", llm_point("H100", gbs, ga, tps * jitter, lr=1e-4 * gbs / 16, energy_wh=50.0,
                                                 units_per_wh=tps * jitter / 200.0, started=next(t)))
    for gbs, ga, tps in ((16, 1, 120_000.0), (32, 2, 160_000.0), (64, 4, 185_000.0)):  # its own data
        add(f"llm_a100_{gbs}", llm_point("A100", gbs, ga, tps, lr=1e-4 * gbs / 16, data="oscar",
                                         data_path="/p/scratch/oscar_text_document", energy_wh=40.0,
                                         units_per_wh=tps / 320.0, started=next(t)))
    for devices, tps in ((4, 380_000.0), (8, 720_000.0)):  # tensor parallel, at two device counts
        add(f"llm_h100_tp2_x{devices}", llm_point("H100", 32 * devices, 8, tps, devices=devices, tp=2, energy_wh=50.0,
                                                  units_per_wh=tps / 200.0, started=next(t)))
    add("fno_h100", fno("H100", "RBC2D", 1, 20, "fp16", "default", 3757.0, energy_wh=2.0, units_per_wh=50_000.0,
                        started=next(t)))
    add("fno_a100", fno("A100", "RBC2D", 1, 20, "fp16", "default", 2000.0, energy_wh=1.5, units_per_wh=40_000.0,
                        started=next(t)))
    return recs


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    results = tmp_path_factory.mktemp("mixed") / "results"
    mixed(results)
    return results


def figure(folder: Path, kind: str, workload: str):
    """The one workload's figure (the caller closes it, through plots.png_bytes)."""
    by_workload = select(str(folder), warn=False).by_workload
    (fig,) = [f for _, f in plots.figures(kind, {workload: by_workload[workload]})]
    return fig


def legend_texts(fig) -> list[str]:
    legends = list(fig.legends) + [ax.get_legend() for ax in fig.axes if ax.get_legend()]
    return [t.get_text().replace("\n", " ") for legend in legends for t in legend.get_texts()]


def all_text(fig) -> str:
    return "\n".join(t.get_text() for t in fig.findobj(match=lambda a: hasattr(a, "get_text")))


def test_legend_names_only_what_tells_the_lines_apart(folder):
    fig = figure(folder, "throughput", "image_classification")
    labels = legend_texts(fig)
    assert sorted(labels) == ["A100, devices=1, precision=bf16", "H100, devices=1, precision=bf16",
                              "H100, devices=1, precision=fp32", "H100, devices=4, precision=bf16",
                              "H100, devices=8, precision=bf16", "MI250, devices=1, precision=bf16"]
    text = all_text(fig)
    # what differs but does not make a line of its own is said under the plot; measurement settings never
    assert "also differ between lines: workers 4, 8" in text
    assert "change with global batch size along each line: lr 0.1..0.4" in text
    for setting in ("measure_steps", "warmup_steps", "seed", "measure_seconds"):
        assert setting not in text
    plots.png_bytes(fig)


def test_llm_batch_sweep_is_a_line_in_x_order(folder):
    fig = figure(folder, "throughput", "llm_training")
    (ax,) = fig.axes
    lines = {c.get_label(): c.lines[0] for c in ax.containers}
    sweep = lines["H100, devices=4, tp=1"]
    assert list(sweep.get_xdata()) == [16, 32, 64, 128]
    assert list(sweep.get_ydata()) == pytest.approx([250_000.0, 330_000.0, 380_000.0, 400_000.0])
    assert list(lines["A100, devices=4, tp=1"].get_xdata()) == [16, 32, 64]
    assert sorted(lines) == ["A100, devices=4, tp=1", "H100, devices=4, tp=1", "H100, devices=4, tp=2",
                             "H100, devices=8, tp=2"]
    assert ax.get_xlabel() == "global batch size"
    text = all_text(fig)
    assert "grad_accumulation 1..8" in text and "data oscar, synthetic" in text and "data_path" in text
    plots.png_bytes(fig)


def test_error_bars_span_the_repeats(folder):
    fig = figure(folder, "throughput", "llm_training")
    (ax,) = fig.axes
    (bars,) = [c for c in ax.containers if c.get_label() == "H100, devices=4, tp=1"]
    (segments,) = [b.get_segments() for b in bars.lines[2]]
    at_32 = [seg for seg in segments if seg[0][0] == 32]
    assert len(segments) == 4 and [tuple(p[1] for p in seg) for seg in at_32] == [
        pytest.approx((330_000 * 0.97, 330_000 * 1.04))]
    assert [tuple(p[1] for p in seg) for seg in segments if seg[0][0] == 16] == [(250_000.0, 250_000.0)]
    assert "bars: their lowest and highest" in all_text(fig)
    plots.png_bytes(fig)


LONG = "llm_training_on_the_booster_partition_with_a_name_long_enough_to_fill_a_title"


@pytest.fixture(scope="module")
def renamed(tmp_path_factory) -> Path:
    """The mixed folder with the LLM's workload under a long name (a title that a narrow figure cuts), and 45
    learning rates of image classification: 45 lines, a legend taller than the figure."""
    results = tmp_path_factory.mktemp("renamed") / "results"
    for rec in mixed(results).values():
        if rec["workload"] == "llm_training":
            rec["workload"] = LONG
            write(results, rec)
    for i in range(45):
        for bs in (64, 128):
            write(results, ic_point("H100", bs, "bf16", 2000.0 + 10 * i + bs, energy_wh=10.0, units_per_wh=800.0 + i,
                                    lr=0.01 * (i + 1), workers=i + 1))
    return results


@pytest.mark.parametrize("kind", ["throughput", "efficiency", "pareto", "scaling"])
def test_legend_outside_the_axes_and_titles_whole(renamed, kind):
    for workload in (LONG, "image_classification"):
        fig = figure(renamed, kind, workload)
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        whole = fig.bbox
        legends = list(fig.legends) + [ax.get_legend() for ax in fig.axes if ax.get_legend()]
        assert legends
        for ax in fig.axes:
            title = ax.title.get_window_extent(renderer)
            assert whole.x0 <= title.x0 and title.x1 <= whole.x1, ax.get_title()
            assert whole.x0 <= ax.yaxis.label.get_window_extent(renderer).x0
            for legend in legends:
                box = legend.get_window_extent(renderer)
                assert not box.overlaps(ax.get_window_extent(renderer)), "the legend covers the axes"
                assert whole.x0 <= box.x0 and box.x1 <= whole.x1 and whole.y0 <= box.y0 and box.y1 <= whole.y1
        plots.png_bytes(fig)


def test_plot_and_report_print_no_warnings(renamed, tmp_path):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for kind in ("throughput", "efficiency", "pareto", "scaling"):
            proc = cli("plot", kind, "--results", renamed, "--out", tmp_path / "plots", check=0)
            assert proc.stderr == "", proc.stderr
        proc = cli("report", "--results", renamed, "--out", tmp_path / "report.html", check=0)
        assert proc.stderr == "", proc.stderr
    assert [str(w.message) for w in caught] == []


def test_report_tables_scroll_in_their_box_with_headline_columns_first(folder, tmp_path):
    cli("report", "--results", folder, "--out", tmp_path / "report.html", check=0)
    html = (tmp_path / "report.html").read_text()
    assert "div.wide { overflow-x: auto;" in html and "position: sticky; left: 0;" in html
    tables = re.findall(r"(.{0,40})<table class=\"data\">.*?<thead><tr>(.*?)</tr>", html)
    assert tables and all(before.endswith('<div class="wide">') for before, _ in tables)
    heads = [re.findall(r"<th>(.*?)</th>", head) for _, head in tables]
    llm = next(h for h in heads if "Tokens/s (steady)" in h)  # the headers the terminal shows, convention named
    assert llm[:3] == ["System", "Tokens/s (steady)", "Tokens/Wh"]
    ratios = next(h for h in heads if "H100 ×speed" in h and "A100 Images/s (steady)" in h)
    assert ratios.index("H100 ×speed") < 8, ratios


def test_pareto_labels_of_clustered_points_do_not_overlap():
    """Batch-size labels of points that sit together are moved apart, not drawn over each
    other."""
    from caraml.results.plots import _overlap, place_labels

    anchors = [(100.0, 100.0), (101.0, 100.5), (100.5, 99.0), (300.0, 300.0)]
    sizes = [(17.0, 7.0), (17.0, 7.0), (21.0, 7.0), (17.0, 7.0)]
    offsets = place_labels(anchors, sizes)
    boxes = []
    for (x, y), (w, h), (dx, dy) in zip(anchors, sizes, offsets):
        x0 = x + dx if dx >= 0 else x + dx - w
        boxes.append((x0, y + dy, x0 + w, y + dy + h))
    assert not any(_overlap(a, b) for i, a in enumerate(boxes) for b in boxes[i + 1:])
    assert offsets[0] == offsets[3] == (4, 4)  # a label with room stays where it always was
