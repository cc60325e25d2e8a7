"""Losses of a few LLM training iterations in this process, for cross-checking layouts, engines and fast paths
against each other. It builds through the runner, so it sits beside it, above the workloads."""

from __future__ import annotations

from typing import Any

from caraml.runner import RunSpec, build_bench


def train_losses(overrides: dict[str, Any], steps: int, preset: str | None = "smoke",
                 device: str = "cpu") -> list[float]:
    """Train `steps` iterations in this process and return each iteration's global-batch mean loss: the same on
    every rank. With WORLD_SIZE > 1 (torchrun) the process group must be up; the layout comes from tp and pp.
    For comparing layouts: the same model, seed and global batch give the same losses in every layout."""
    bench = build_bench(RunSpec("llm_training", dict(overrides), preset), device=device)
    try:
        for _ in range(steps):
            bench.step()
        return bench.loss_values()
    finally:
        bench.close()
