"""The power monitor inside `caraml run`: one monitor per node (local rank 0 samples), energy combined on
rank 0 after throughput is known, and never a reason for the benchmark itself to fail."""

from __future__ import annotations

import traceback

from caraml.errors import BadInput
from caraml.power import energy as energy_mod
from caraml.power.monitor import Monitor, check_interval
from caraml.power.settings import PowerSettings


def monitor_for_run(settings: PowerSettings, profile: dict | None, run_id: str, system_tag: str,
                    runs_dir=None) -> RunMonitor | None:
    """The run's power monitor; None when power is off."""
    if not settings.enabled:
        return None
    return RunMonitor(settings, profile, run_id, system_tag, runs_dir)


class RunMonitor:
    """start / mark / stop as the harness calls them; finish() gives the record's metrics.energy."""

    def __init__(self, settings: PowerSettings, profile: dict | None, run_id: str, system_tag: str,
                 runs_dir=None):
        from caraml.distributed import launch_env

        self.dist = launch_env()
        self.energy_files = settings.energy_files
        self.run_id, self.system = run_id, system_tag
        self.runs_dir = runs_dir
        self.failure: str | None = None
        self.node: dict | None = None
        self.sampler: Monitor | None = None
        if self.dist.local_rank != 0:
            return  # one monitor per node: local rank 0's covers all devices of the node
        check_interval(settings.power_interval_ms)
        self.sampler = Monitor(settings.power, settings.power_interval_ms,
                               out_dir=str(runs_dir) if runs_dir else None, name=f"{run_id}.power",
                               profile_methods=(profile or {}).get("power_methods"),
                               idle_baseline_s=settings.idle_baseline_s, phase="setup")

    def start(self) -> None:
        if self.sampler is None:
            return
        try:
            self.sampler.start()
        except BadInput:
            self.sampler.stop()
            raise
        except Exception as exc:  # noqa: BLE001 - the benchmark runs on without energy
            self.failure = f"monitor failed to start: {type(exc).__name__}: {exc}"

    def mark(self, phase: str) -> None:
        if self.sampler is not None and self.failure is None:
            try:
                self.sampler.mark(phase)
            except Exception as exc:  # noqa: BLE001
                self.failure = f"monitor failed at {phase}: {exc}"

    def stop(self) -> None:
        if self.sampler is None:
            return
        try:
            self.node = self.sampler.stop()
        except Exception as exc:  # noqa: BLE001
            self.node = {"available": False, "host": self.sampler.host, "reason": f"monitor failed to stop: {exc}",
                         "traceback": traceback.format_exc()[-2000:]}
        if self.failure:
            self.node = {"available": False, "host": self.sampler.host, "reason": self.failure}
        self.node["node_rank"] = self.dist.node_rank

    def finish(self, metrics: dict, dist, gather: bool) -> dict:
        """The record's metrics.energy, from every node's summary (gathered when all ranks finished)."""
        try:
            return self._finish(metrics, dist, gather)
        except Exception as exc:  # noqa: BLE001 - energy is reported, never fatal
            return {"available": False, "total_wh": None,
                    "reason": f"energy unavailable: combining failed: {type(exc).__name__}: {exc}"}

    def _finish(self, metrics: dict, dist, gather: bool) -> dict:
        node = self.node if self.sampler is not None else None
        nodes = [node] if node else []
        if dist.world_size > 1 and gather:
            import torch.distributed as tdist

            everyone: list = [None] * dist.world_size
            tdist.all_gather_object(everyone, node)
            nodes = [n for n in everyone if n]
        result = run_energy(nodes, metrics, dist.world_size, dist.local_world_size, gathered=gather)
        if self.energy_files == "caraml" and nodes and self.runs_dir and (dist.is_main or not gather):
            result["caraml_files"] = self._caraml_files(nodes)
        return result

    def _caraml_files(self, nodes: list[dict]) -> dict:
        from caraml.power import jpwr

        try:
            return jpwr.write_run(nodes, self.runs_dir, self.run_id, self.system)
        except Exception as exc:  # noqa: BLE001 - extra files, never a reason to lose the energy itself
            return {"error": f"CARAML energy files not written: {type(exc).__name__}: {exc}"}


def run_energy(nodes: list[dict], metrics: dict, world_size: int, local_world_size: int, gathered: bool) -> dict:
    """metrics.energy from the node summaries at hand.

    Not gathered (an interrupted multi-process run): only this rank's node is known, so its energy is set
    against this node's share of the units (local_world_size / world_size of them), not all of them.
    """
    if not nodes:
        return {"available": False, "total_wh": None,
                "reason": "energy unavailable: no monitor ran on this process's node"}
    unit = ((metrics.get("throughput") or {}).get("unit") or "").removesuffix("/s") or None
    units, partial = metrics.get("units"), None
    if world_size > 1 and not gathered:
        partial = "only this rank's node: the run did not finish on all ranks, so nothing was gathered"
        share = local_world_size / world_size
        if share < 1:
            partial += f"; units_per_wh counts this node's share of the units ({local_world_size}/{world_size})"
            units = units * share if isinstance(units, (int, float)) else units
    result = energy_mod.combine(nodes, units, unit, window="measure")
    if partial:
        result["partial"] = partial
    return result
