"""Two emulated nodes on one multi-GPU host, with NCCL: the multi-node tests of tests/test_multinode.py on GPUs.

    PYTHONPATH=src python3 bench/multinode_bench.py --out DIR [--gpus-per-node N] [--cpu]

The host's GPUs are split in two halves, one per emulated node: two torchrun agents (`--nnodes 2`, c10d
rendezvous on localhost), each with CUDA_VISIBLE_DEVICES set to its half and CARAML_HOSTNAME n1/n2, so each
node's power monitor (NVML) sees its own GPUs only. Cases: image classification (2 nodes x N GPUs), GPT with tp
inside a node and pp 2 across nodes, GPT dp across nodes with the distributed optimizer, FNO ddp across nodes;
each must leave one `ok` record with nodes 2, its world and data-parallel sizes and energy of two nodes, each
GPU once. Needs at least 2 GPUs (says so in one line and exits 0 otherwise). NVLink multicast stays off.
`--cpu`: the same on this machine's CPU with gloo, one rank per node (a check of the script, not a measurement).
Writes every record and multinode_bench.json (the checks, per case) into --out (or $OUT, or ./bench-out).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def cases(per_node: int, cpu: bool) -> dict[str, list[str]]:
    """caraml run arguments per case; GPU sizes are small but not toy (seconds per case on H200s)."""
    if cpu:
        ic, gpt, fno = (["--preset", "smoke", "image_size=32", "batch_size=4"], ["--preset", "smoke"],
                        ["--preset", "smoke-RBC2D"])
        steps = ["warmup_steps=1", "measure_steps=2", "device=cpu", "--system", "CPU"]
    else:
        ic = ["model=resnet50", "batch_size=128", "precision=bf16", "channels_last=on", "data=synthetic-device"]
        gpt = ["--preset", "800M", "model_size=custom", "num_layers=8", "micro_batch_size=2", "seq_length=1024",
               "max_position_embeddings=1024", "precision=bf16"]
        fno = ["--preset", "RBC2D"]
        steps = ["warmup_steps=5", "measure_steps=20", "device=cuda"]
    tp = 2 if per_node % 2 == 0 else 1
    return {
        "ic": ["image_classification", *ic, *steps],
        "gpt_tp_pp": ["llm_training", *gpt, f"tp={tp}", "pp=2", "grad_accumulation=4", *steps],
        "gpt_dp_distopt": ["llm_training", *gpt, "tp=1", "pp=1", "distributed_optimizer=true", *steps],
        "fno_ddp": ["fno", *fno, *steps],
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def two_nodes(args: list[str], per_node: int, out: Path, name: str, cpu: bool) -> tuple[dict | None, str]:
    """Rank 0's record of one case, and the agents' stderr tails."""
    port, procs = free_port(), []
    for node in range(2):
        env = dict(os.environ, **MULTICAST_OFF, CARAML_HOSTNAME=f"n{node + 1}", OMP_NUM_THREADS="1" if cpu else "4")
        env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
        if not cpu:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(node * per_node + i) for i in range(per_node))
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", f"--nproc-per-node={per_node}",
               "--rdzv-backend=c10d", f"--rdzv-endpoint=localhost:{port}", f"--rdzv-id={name}-{port}",
               "-m", "caraml", "run", *args, "--results", str(out / "results"), "--json"]
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = []
    for p in procs:
        try:
            outs.append(p.communicate(timeout=110))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            outs.append(p.communicate())
    records = [json.loads(line) for o, _ in outs for line in o.splitlines() if line.startswith("{")]
    return (records[0] if records else None), "\n".join(e[-1500:] for _, e in outs)


def checks(record: dict, world: int) -> dict[str, bool]:
    launch, m = record["launch"], record["metrics"]
    energy = m.get("energy") or {}
    counted = [d for d in energy.get("devices", []) if d.get("in_total")]
    p = launch["parallel"]
    return {
        "ok": record["status"] == "ok",
        "nodes_2": launch["nodes"] == 2 and launch["world_size"] == world,
        "dp_size": p["dp"] * p["tp"] * p["pp"] == world,
        "two_energy_nodes": sorted(n.get("host") for n in energy.get("nodes", [])) == ["n1", "n2"],
        "each_device_once": len({(d["host"], d["uuid"]) for d in counted}) == len(counted)
        and energy.get("duplicates_dropped") == 0,
        "throughput_once_per_replica": abs(m["throughput"]["value"] * m["measured_time_s"] - m["units"])
        < 1e-6 * max(1.0, m["units"]),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "bench-out"))
    ap.add_argument("--gpus-per-node", type=int, default=0, help="default: half of the visible GPUs")
    ap.add_argument("--cpu", action="store_true", help="a check of the script on the CPU (gloo, 1 rank per node)")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    per_node = 1
    if not a.cpu:
        import torch

        gpus = torch.cuda.device_count()
        if gpus < 2:
            print(f"multinode_bench: skipped: needs at least 2 GPUs for two emulated nodes, {gpus} visible")
            return
        per_node = a.gpus_per_node or gpus // 2
    summary = {"gpus_per_node": per_node, "backend": "gloo" if a.cpu else "nccl", "cases": {}}
    for name, args in cases(per_node, a.cpu).items():
        t0 = time.time()
        record, err = two_nodes(args, per_node, out, name, a.cpu)
        entry = {"seconds": round(time.time() - t0, 1), "args": args}
        if record is None:
            entry.update(status="no record", stderr=err[-3000:])
        else:
            (out / f"{name}.record.json").write_text(json.dumps(record, indent=1))
            m = record["metrics"]
            entry.update(status=record["status"], error=record.get("error"), checks=checks(record, 2 * per_node),
                         throughput=m.get("throughput"), energy_wh=(m.get("energy") or {}).get("total_wh"),
                         parallel=record["launch"]["parallel"])
        summary["cases"][name] = entry
        print(f"{name}: {entry['status']} in {entry['seconds']} s {entry.get('throughput') or ''} "
              f"checks failed: {[k for k, v in (entry.get('checks') or {}).items() if not v]}", flush=True)
    (out / "multinode_bench.json").write_text(json.dumps(summary, indent=1))
    bad = [n for n, e in summary["cases"].items() if e["status"] != "ok" or not all(e.get("checks", {}).values())]
    print(f"multinode_bench: {len(summary['cases']) - len(bad)} of {len(summary['cases'])} cases ok"
          + (f"; not ok: {', '.join(bad)}" if bad else ""))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
