"""Peers' own benchmark code beside `caraml run` on one GPU: the same settings, alternated, n repeats each.

    PYTHONPATH=src python3 bench/peer_bench.py ic  --peer PEERS/CARAML [--batches 64,256] [--precision fp16]
        [--compiler trace] [--epochs 1] [--workers 12] [--repeats 3] [--budget S] [--out DIR]
    PYTHONPATH=src python3 bench/peer_bench.py gpt [--peer PEERS/Megatron-LM] [--global-batch 16] [--minutes 0.5] ...
    PYTHONPATH=src python3 bench/peer_bench.py fno --peer PEERS/operator_learning --data FILE ...

The peers are checkouts outside this project, given by path (they travel to the GPU machine with the benchmark,
ignored by git); their Python dependencies come on PYTHONPATH (`--site DIR`, e.g. wheels installed with
`pip install --target`). Both sides run under `torchrun --standalone --nproc-per-node 1` where the peer does.

- ic: CARAML's image_classification/image_classification_torch.py, unmodified, with the arguments its JUBE file
  passes (`--distributed`, channels_last, seed 1234, lr 0.01), against `caraml run image_classification --preset
  caraml` at the same batch, precision, compiler, epochs and DataLoader workers. Figure: CARAML's "Average Images/s"
  against caraml's caraml_images_per_s (and caraml's steady state beside it).
- gpt: CARAML's 2024 800M configuration through megatron-core and through caraml's native engine, CARAML's log
  convention (tokens/s, TFLOP/s per GPU, loss). With --peer, Megatron-LM's own pretrain_gpt.py is tried first and,
  where it cannot start on this machine, the reason is recorded.
- fno: operator_learning's own training (the repository CARAML's FNO setup clones) against `caraml run fno`.

Writes peer_bench.json (every run: command, exit code, wall time, figures, output tail), peer_bench.md (the
table) and peer_bench.log into --out, or $OUT, or ./bench-out.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from caraml import peers

ROOT = Path(__file__).resolve().parents[1]

TORCHRUN = (sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "1")
CARAML = (*TORCHRUN, "-m", "caraml", "run")


def caraml_env(site: str | None) -> dict:
    path = [str(ROOT / "src")] + ([site] if site else []) + [os.environ.get("PYTHONPATH", "")]
    return {"PYTHONPATH": os.pathsep.join(p for p in path if p)}


def peer_env(site: str | None, **extra: str) -> dict:
    path = ([site] if site else []) + [os.environ.get("PYTHONPATH", "")]
    return {"PYTHONPATH": os.pathsep.join(p for p in path if p), **extra}


def ic_points(args) -> list[peers.Point]:
    """CARAML's image-classification script against `--preset caraml`, one point per batch."""
    script = Path(args.peer).resolve() / "image_classification" / "image_classification_torch.py"
    # The script reads SLURM_PROCID/SLURM_NTASKS (as srun sets them) and ACCELERATOR (JUBE's system name).
    env = peer_env(args.site, SLURM_PROCID="0", SLURM_NTASKS="1", ACCELERATOR=args.accelerator)
    # --peer-ddp off: the script as one plain process, without its --distributed (no DDP around the model, no
    # process group): the effect of DDP at one rank, measured with the peer's own code
    launch, distributed, label = ((*TORCHRUN, script), ("--distributed",), "CARAML image_classification_torch.py")
    if args.peer_ddp == "off":
        launch, distributed, label = (sys.executable, script), (), label + " without --distributed"
    points = []
    for batch in args.batches:
        peer = peers.Side(label, (
            *launch, "--arch=resnet50", "--seed=1234", f"--batch_size={batch}", f"--epochs={args.epochs}",
            "--lr=0.01", f"--num_workers={args.workers}", f"--precision={args.precision}",
            f"--compiler={args.compiler}", "--compiler_mode=default", "--channels_last=True", *distributed),
            {"images_per_s": peers.last_number(r"Average Images/s: ([\d.]+)")}, env)
        ours = peers.Side("caraml --preset caraml", (
            *CARAML, "image_classification", "--preset", "caraml", f"batch_size={batch}", f"epochs={args.epochs}",
            f"workers={args.workers}", f"precision={args.precision}", f"compile={args.compiler}",
            "warmup_steps=5", "measure_steps=20", "--results", "results"),
            {"images_per_s": peers.record_value("metrics", "caraml_images_per_s", "value"),
             "steady_images_per_s": peers.record_value("metrics", "throughput", "value")},
            caraml_env(args.site))
        suffix = "-peer-ddp-off" if args.peer_ddp == "off" else ""
        points.append(peers.Point(f"ic-b{batch}-{args.precision}-{args.compiler}{suffix}", peer, ours))
    return points


def gpt_side(label: str, args, *extra: str) -> peers.Side:
    accumulation = max(1, args.global_batch // 4)
    return peers.Side(label, (
        sys.executable, "-m", "caraml", "run", "llm_training", "--preset", "800M-2024", "device=cuda",
        f"grad_accumulation={accumulation}", "convention=caraml-log", f"exit_minutes={args.minutes}",
        "warmup_steps=3", "measure_steps=10", *extra, "--results", "results"),
        {"tokens_per_s": peers.record_value("metrics", "caraml_tokens_per_s", "value"),
         "tflops_per_gpu": peers.record_value("metrics", "caraml_tflops_per_device"),
         "loss_first": peers.record_value("metrics", "loss", "first"),
         "loss_last": peers.record_value("metrics", "loss", "last")},
        caraml_env(args.site))


def gpt_points(args) -> list[peers.Point]:
    """megatron-core (the peer engine) against caraml's native engine, CARAML's 2024 800M configuration."""
    return [peers.Point(f"gpt-800M-2024-gb{args.global_batch}",
                        gpt_side("megatron-core (engine=megatron-core)", args, "engine=megatron-core"),
                        gpt_side("caraml native", args))]


def megatron_lm_probe(args, workdir: Path, log) -> dict | None:
    """Megatron-LM's own pretrain_gpt.py with CARAML's 800M arguments: whether it starts here, and if not why."""
    if not args.peer:
        return None
    side = peers.Side("Megatron-LM pretrain_gpt.py", (
        *TORCHRUN, Path(args.peer).resolve() / "pretrain_gpt.py", "--num-layers", "16", "--hidden-size", "2048",
        "--num-attention-heads", "8", "--seq-length", "2048", "--max-position-embeddings", "2048",
        "--micro-batch-size", "4", "--global-batch-size", str(args.global_batch), "--fp16", "--use-flash-attn",
        "--transformer-impl", "local", "--use-distributed-optimizer", "--sequence-parallel",
        "--recompute-activations", "--recompute-granularity", "selective", "--mock-data", "--train-iters", "20",
        "--log-interval", "5", "--lr", "1e-4"), {}, peer_env(args.site))
    done, wall = peers.run_side(side, workdir / "megatron-lm-probe", timeout=180)
    # the rank's own error, not torchrun's ChildFailedError about it
    errors = [line for line in done.output.splitlines()
              if ("Error" in line or "error:" in line) and "ChildFailedError" not in line and "elastic" not in line]
    log(f"peers: Megatron-LM probe: rc {done.rc} in {wall:.1f} s; {errors[-1] if errors else 'no error line'}")
    return {"rc": done.rc, "wall_s": wall, "error": errors[-1] if errors else None, "argv": [str(a) for a in
            side.argv], "tail": done.output[-peers.TAIL_CHARS:]}


FNO_CONFIGS = {"PIC1D": "electrostatic_plasma1d_pic.yaml", "RBC2D": "rbc2d_dedalus.yaml"}


def peer_fno_inputs(args, workdir: Path) -> tuple[Path, Path]:
    """The peer's config with `train.epochs` set (its train.py takes the epochs from there alone) and a copy of
    the data file with the `infos` its datasets read and caraml's synthetic files lack (values as its configs)."""
    import re
    import shutil

    import h5py
    import numpy as np

    workdir.mkdir(parents=True, exist_ok=True)
    config = workdir / "peer_config.yaml"
    text = (Path(args.peer) / "config" / FNO_CONFIGS[args.problem]).read_text()
    config.write_text(re.sub(r"(?m)^(  epochs:) *\d+", rf"\g<1> {args.epochs}", text))
    data = workdir / Path(args.data).name
    shutil.copy(args.data, data)
    with h5py.File(data, "r+") as f:
        infos, shapes = f["infos"], (f["inputs"].shape, f["outputs"].shape)
        extra = ({"outType": np.bytes_("update"), "outScaling": 1000.0, "dtData": 1e-3, "dtInput": 1e-3,
                  "dtSample": 0.5} if args.problem.startswith("RBC") else
                 {"nDim": int(args.problem[3]), "outType": np.bytes_("solution"), "outScaling": 1.0,
                  "input_keys": np.array([b"synthetic"]), "output_keys": np.array([b"synthetic"]),
                  "input_shape": np.array(shapes[0]), "output_shape": np.array(shapes[1]), "output_mean": 0.0,
                  "output_std": 1.0})
        for key, value in extra.items():
            if key not in infos:
                infos.create_dataset(key, data=value)
    return config, data


def fno_points(args, workdir: Path) -> list[peers.Point]:
    """operator_learning's scripts/train.py with CARAML's 2026.02 flags against `caraml run fno` on the same
    data, the same epochs, batch 4, validation batch 1, fp32 eager."""
    peer = Path(args.peer).resolve()
    config, data = peer_fno_inputs(args, workdir)
    theirs = peers.Side("operator_learning scripts/train.py", (
        sys.executable, peer / "scripts" / "train.py", f"--config={config}", f"--dataFile={data}", "--batchSize=4",
        "--val_batchSize=1", "--gas=1", "--tp_size=1", "--benchmark", "--use_amp=0", "--use_complex_amp=0",
        "--compile_train=0", "--compile_mode=eager"),
        {"timesteps_per_s": peers.last_number(r"(?m)^Timesteps/s: *([\d.]+)")},
        {**peer_env(args.site), "PYTHONPATH": os.pathsep.join(filter(None, (args.site, str(peer)))),
         "OMP_NUM_THREADS": "4"})
    modes = ["modes=32"] if args.problem == "PIC1D" else []  # the peer's PIC1D keeps 32 two-sided modes
    ours = peers.Side("caraml run fno", (
        sys.executable, "-m", "caraml", "run", "fno", "--preset", args.problem, "caraml_version=2026.02",
        "data=file", f"data_path={data}", "batch_size=4", "val_batch_size=1", f"epochs={args.epochs}",
        "precision=fp32", "compile=none", "matmul_precision=high", "workers=1", *modes, "--results", "results"),
        {"timesteps_per_s": peers.record_value("metrics", "caraml_timesteps_per_s")},
        caraml_env(args.site))
    return [peers.Point(f"fno-{args.problem}-e{args.epochs}", theirs, ours)]


def parse(argv: list[str] | None = None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("workload", choices=("ic", "gpt", "fno"))
    p.add_argument("--peer", help="path of the peer's checkout")
    p.add_argument("--site", help="folder with the peer's Python dependencies (put on PYTHONPATH)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--budget", type=float, default=None, help="seconds after which no new run starts")
    p.add_argument("--timeout", type=float, default=400, help="seconds one run may take")
    p.add_argument("--out", default=os.environ.get("OUT") or str(ROOT / "bench-out"))
    p.add_argument("--workdir", help="where each run gets its folder (default: a new temporary folder)")
    p.add_argument("--batches", type=lambda s: [int(b) for b in s.split(",")], default=[64, 256])
    p.add_argument("--precision", default="fp16")
    p.add_argument("--compiler", default="trace")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--workers", type=int, default=12)
    p.add_argument("--peer-ddp", choices=("on", "off"), default="on",
                   help="ic: on (CARAML's --distributed under torchrun) or off (one plain process)")
    p.add_argument("--accelerator", default="H200", help="ACCELERATOR for the peer (JUBE's system name)")
    p.add_argument("--global-batch", type=int, default=16)
    p.add_argument("--minutes", type=float, default=0.5, help="gpt: caraml-log's exit_minutes")
    p.add_argument("--data", help="fno: the HDF5 file both sides train on")
    p.add_argument("--problem", choices=sorted(FNO_CONFIGS), default="PIC1D")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.workload in ("ic", "fno") and not args.peer or args.workload == "fno" and not args.data:
        print(f"peer_bench: {args.workload} needs --peer PATH (a checkout of the peer's code)"
              + (" and --data FILE (the HDF5 file both sides train on)" if args.workload == "fno" else ""),
              file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    lines: list[str] = []

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)
        lines.append(line)

    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="peer-bench-"))  # the runs' folders, not in $OUT
    start = time.monotonic()
    probe = megatron_lm_probe(args, workdir, log) if args.workload == "gpt" else None
    points = fno_points(args, workdir) if args.workload == "fno" else {"ic": ic_points, "gpt": gpt_points}[
        args.workload](args)
    runs = peers.run_all(points, args.repeats, workdir, args.timeout, args.budget, log)
    rows = peers.summarise(points, runs)
    table = peers.markdown(rows)
    print(table)
    (out / "peer_bench.md").write_text(table)
    (out / "peer_bench.json").write_text(json.dumps(
        {"workload": args.workload, "args": vars(args), "wall_s": time.monotonic() - start, "rows": rows,
         "runs": runs, "megatron_lm": probe}, indent=1, default=str))
    (out / "peer_bench.log").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
