"""The FNO benchmark: data on the device, the model, Adam, compile options; `step()` is one training
iteration (or one inference batch) on one batch, and CARAML's epoch runner gives its Timesteps/s.

Build order: data -> model (FLOPs counted on the meta device) -> DDP -> optimiser -> compile ->
(CUDA) memory split of one eager step -> CARAML's epoch runner (mode=train, epochs > 0) -> CARAML's
compile report (compile_report=on). Then the harness warms up and measures `step()`.
"""

from __future__ import annotations

import statistics
import time
import warnings
from contextlib import nullcontext
from typing import Any

import torch
import torch.nn.functional as F

from caraml.contract import BenchInfo, RunContext
from caraml.errors import BadInput
from caraml.training import backward_and_step
from caraml.workloads.fno import COMPILE_MODES, files, flops, settings
from caraml.workloads.fno.model import build_model, count_parameters
from caraml.workloads.fno.problems import STEP_LR, TRAIN_FRACTION, Problem, modes_misfit, shape_text

REPORT_ITERATIONS = 5  # CARAML's fno_compile.py: 5 iterations, the mean of iterations 2-4 timed
REPORT_TIMED = slice(1, 4)

CONVENTIONS = {
    "throughput": "ours: steady state, samples (timesteps) per second over the harness's measured window of "
                  "step()s after warm-up, summed over data-parallel replicas",
    "caraml_timesteps_per_s": "CARAML's Timesteps/s: epochs after the first x (train + validation samples) / "
                              "their summed train + validation time (slowest rank), from the epoch runner",
    "train_throughput": "CARAML's TrainTimesteps/s: epochs after the first x train samples / their summed train time",
}


def loss_fn(kind: str):
    if kind == "l1":
        return lambda pred, y: F.l1_loss(pred.float(), y)

    def vector_norm(pred, y):  # relative L2 per sample, mean over the batch
        diff = (pred.float() - y).flatten(1)
        return (torch.linalg.vector_norm(diff, dim=1) / torch.linalg.vector_norm(y.flatten(1), dim=1)).mean()

    return vector_norm


class Data:
    """This rank's train and validation samples, on the device, with CARAML's 80/20 split in file order."""

    def __init__(self, p: dict, cfg: dict, ctx: RunContext):
        pb: Problem = cfg["problem"]
        device, rank, world = ctx.device, ctx.rank, ctx.world_size
        batch = cfg["batch_size"]
        self.path = None
        if p["data"] == "file":
            path = files.resolve_path(p["data_path"], pb, ctx.data_root)
            got = files.read(path, pb, p["samples"])
            self.path, self.samples_in_file, self.synthetic_file = str(path), got["samples_in_file"], got["synthetic"]
            self.spatial, domain = got["spatial"], got["domain"]
            x = torch.from_numpy(got["inputs"])
            y = torch.from_numpy(got["outputs"])
            if pb.position_channels and domain != files.DOMAIN:  # the model's transforms take positions in [0, 2 pi)
                x[:, :pb.position_channels] *= files.DOMAIN / domain
            n = x.shape[0]
            n_train = int(TRAIN_FRACTION * n)
            # equal shards, so that every rank runs as many steps as the others
            tr, va = n_train // world, (n - n_train) // world
            if tr < batch:
                raise BadInput(f"fno: {path} has {n} samples: {n_train} train, {tr} per device, fewer than "
                               f"batch_size={batch}; use a smaller batch_size or a file with more samples")
            self.train_x = x[rank * tr:(rank + 1) * tr].to(device)
            self.train_y = y[rank * tr:(rank + 1) * tr].to(device)
            self.val_x = x[n_train + rank * va:n_train + (rank + 1) * va].to(device)
            self.val_y = y[n_train + rank * va:n_train + (rank + 1) * va].to(device)
        else:
            self.spatial = cfg["grid"] or (cfg["particles"],)
            epochs = p["mode"] == "train" and p["epochs"] > 0
            # default: 4 training batches and a validation batch for the epoch runner, else 2 batches to alternate
            wanted = p["samples"] or (5 * batch if epochs else 2 * batch)
            n_train = int(TRAIN_FRACTION * wanted) if epochs else wanted
            if n_train < batch:
                raise BadInput(f"fno: samples={wanted} leave {n_train} for training, fewer than batch_size={batch}")
            n_val = wanted - n_train
            gen = torch.Generator(device=device).manual_seed(p["seed"] * 1000 + rank)
            self.train_x, self.train_y = self._random(pb, n_train, gen, device)
            self.val_x, self.val_y = self._random(pb, n_val, gen, device)
        self.batch = batch
        self.val_batch = min(batch, self.val_x.shape[0])

    def _random(self, pb: Problem, n: int, gen, device):
        x = torch.randn(n, pb.in_channels, *self.spatial, device=device, generator=gen)
        if pb.position_channels:
            x[:, :pb.position_channels] = files.DOMAIN * torch.rand(n, pb.position_channels, *self.spatial,
                                                                    device=device, generator=gen)
        y = torch.randn(n, pb.out_channels, *self.spatial, device=device, generator=gen)
        return x, y

    def batches(self, x, y, size: int):
        """Contiguous batches (views, no copies); the remainder is left out so that shapes never change."""
        return [(x[i:i + size], y[i:i + size]) for i in range(0, x.shape[0] - size + 1, size)] if size else []

    def describe(self) -> dict:
        out = {"source": "file" if self.path else "synthetic", "train_samples": int(self.train_x.shape[0]),
               "val_samples": int(self.val_x.shape[0]), "per": "device (rank)"}
        if self.path:
            out.update(path=self.path, samples_in_file=self.samples_in_file, synthetic_file=self.synthetic_file)
        return out


class FNOBench:
    def __init__(self, p: dict[str, Any], ctx: RunContext):
        self.p, self.ctx = p, ctx
        device, dist = ctx.device, ctx.dist
        self.device, self.dist = device, dist
        cfg = settings(p)
        self.cfg = cfg
        pb: Problem = cfg["problem"]
        self.problem = pb
        torch.manual_seed(p["seed"])  # the same initial weights on every rank
        torch.set_float32_matmul_precision(p["matmul_precision"])
        if p["complex_mixed_precision"] and device.type != "cuda":
            raise BadInput("fno: complex_mixed_precision=on needs a CUDA GPU")

        self.data = Data(p, cfg, ctx)
        spatial = self.data.spatial
        model = build_model(pb, cfg["width"], cfg["modes"], cfg["layers"], complex_weights=p["complex_weights"],
                            half_spectral=p["complex_mixed_precision"])
        misfit = modes_misfit(pb.kind, cfg["modes"], spatial)
        if misfit:
            raise BadInput(f"fno: {pb.name} with modes={shape_text(cfg['modes'])}: {misfit}")
        if p["complex_mixed_precision"] and pb.kind != "dse":
            fft_sizes = spatial if pb.kind == "grid" else (model.transform.n,) * 2
            if any(n & (n - 1) for n in fft_sizes):
                raise BadInput(f"fno: complex_mixed_precision=on needs power-of-two FFT sizes (cuFFT half precision); "
                               f"the grid is {shape_text(fft_sizes)}")
        self.raw_model = model.to(device)
        self.n_params = count_parameters(model)
        self.loss = loss_fn(pb.loss)
        self.flops = self._count_flops(spatial)

        if dist.world_size > 1:
            from torch.nn.parallel import DistributedDataParallel as DDP

            model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
        self.model = model
        impl = {"foreach": {"foreach": True}, "fused": {"fused": True}, "for-loop": {"foreach": False}}[p["adam_impl"]]
        self.optimizer = torch.optim.Adam(self.raw_model.parameters(), lr=cfg["lr"], weight_decay=p["weight_decay"],
                                          **impl)
        epochs = max(1, p["epochs"])
        self.scheduler = (torch.optim.lr_scheduler.StepLR(self.optimizer, step_size=STEP_LR[0], gamma=STEP_LR[1])
                          if pb.scheduler == "step" else
                          torch.optim.lr_scheduler.CosineAnnealingLR(self.optimizer, T_max=epochs))
        amp = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(p["amp"])
        self.autocast = (lambda: torch.autocast(device.type, dtype=amp)) if amp else nullcontext
        self.scaler = torch.amp.GradScaler(device.type) if p["amp"] == "fp16" else None

        self.memory_split = self._memory_split() if device.type == "cuda" and p["mode"] == "train" else None
        self.forward = self.model
        self._train = self._train_step
        self._infer = self._infer_step
        self.compiled = p["compile"] == "inductor"
        if self.compiled:
            self._compile()
        self.train_batches = self.data.batches(self.data.train_x, self.data.train_y, self.data.batch)
        self.all_batches = self.train_batches + self.data.batches(self.data.val_x, self.data.val_y, self.data.batch)
        self._i = -1

        self.compile_setup_s = 0.0
        self.epochs = self._run_epochs() if p["mode"] == "train" and p["epochs"] > 0 else None
        self.compile_report = self._compile_report() if p["compile_report"] else None

        self.info = BenchInfo(
            units_per_step=self.data.batch, unit="timesteps", flops_per_unit=self.flops["per_sample"],
            flops_convention=flops.FLOPS_CONVENTION.format(
                passes="forward+backward pass (training)" if p["mode"] == "train" else "forward pass (inference)"),
            precision=self._precision(), compiled=self.compiled, compile_setup_s=self.compile_setup_s)

    # set-up ------------------------------------------------------------------------------------------
    def _precision(self) -> str:
        if self.p["amp"] != "off":
            return self.p["amp"]
        if self.device.type == "cuda" and self.p["matmul_precision"] != "highest":
            return "tf32"
        return "fp32"

    def _count_flops(self, spatial) -> dict:
        """Per sample, on the meta device (no memory, no compute), with a batch of 2."""
        pb, cfg = self.problem, self.cfg
        with torch.device("meta"):
            model = build_model(pb, cfg["width"], cfg["modes"], cfg["layers"])
            x = torch.empty(2, pb.in_channels, *spatial)
            y = torch.empty(2, pb.out_channels, *spatial)
        counted = flops.count(model, x, train=self.p["mode"] == "train", loss=lambda out: self.loss(out, y))
        return {"per_sample": counted["total"] / 2, "fft_per_sample": counted["fft"] / 2}

    def _compile(self) -> None:
        p = self.p
        if not p["complex_weights"]:  # FFTs are library calls however they are compiled: the warning misleads
            warnings.filterwarnings("ignore", message="Torchinductor does not support code generation for complex")
        options = {} if p["compile_mode"] == "default" else {"mode": p["compile_mode"]}
        if p["compile_scope"] == "pointwise":
            self.raw_model.exclude_spectral_from_compile()
        if p["compile_scope"] in ("model", "pointwise"):
            self.forward = torch.compile(self.model, **options)
        else:
            self._train = torch.compile(self._train_step, **options)
            self._infer = torch.compile(self._infer_step, **options)

    def _memory_split(self) -> dict:
        """CARAML's memory columns from one eager training step: peak in the forward pass, activations kept
        for backward, and what persists after the step (weights, gradients, Adam state, data)."""
        x, y = self.data.train_x[:self.data.batch], self.data.train_y[:self.data.batch]
        torch.cuda.synchronize(self.device)
        before = torch.cuda.memory_allocated(self.device)
        torch.cuda.reset_peak_memory_stats(self.device)
        with self.autocast():
            loss = self.loss(self.model(x), y)
        fwd_peak = torch.cuda.max_memory_allocated(self.device)
        activations = torch.cuda.memory_allocated(self.device) - before
        (self.scaler.scale(loss) if self.scaler else loss).backward()
        del loss
        self.optimizer.zero_grad(set_to_none=False)  # gradients stay allocated, as during training
        persistent = torch.cuda.memory_allocated(self.device)
        self.optimizer.zero_grad(set_to_none=True)
        torch.cuda.reset_peak_memory_stats(self.device)
        return {"peak_forward_bytes": fwd_peak, "activation_bytes": activations,
                "persistent_bytes_without_adam_state": persistent}

    # steps -------------------------------------------------------------------------------------------
    def _train_step(self, x, y):
        with self.autocast():
            loss = self.loss(self.forward(x), y)
        backward_and_step(loss, self.optimizer, self.scaler)
        return loss.detach()

    def _infer_step(self, x):
        with torch.no_grad(), self.autocast():
            return self.forward(x)

    def _mark(self) -> None:
        if self.compiled:  # CUDA graphs (reduce-overhead, max-autotune): a new iteration starts here
            torch.compiler.cudagraph_mark_step_begin()

    def step(self) -> None:
        self._mark()
        if self.p["mode"] == "train":
            self._i = (self._i + 1) % len(self.train_batches)
            self._train(*self.train_batches[self._i])
        else:
            self._i = (self._i + 1) % len(self.all_batches)
            self._infer(self.all_batches[self._i][0])

    # CARAML's measurements ---------------------------------------------------------------------------
    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def _run_epochs(self) -> dict:
        """CARAML's epoch loop: shuffled training batches, then validation (no gradients), each timed."""
        data, dist = self.data, self.dist
        n_train = len(self.train_batches) * data.batch
        val = data.batches(data.val_x, data.val_y, data.val_batch)
        gen = torch.Generator(device="cpu").manual_seed(self.p["seed"])
        train_s, val_s, step_s = [], [], []
        train_loss = val_loss = None
        for epoch in range(self.p["epochs"]):
            order = torch.randperm(data.train_x.shape[0], generator=gen)[:n_train].to(self.device)
            self._sync()
            start = time.perf_counter()
            for i in range(0, n_train, data.batch):
                idx = order[i:i + data.batch]
                self._mark()
                if epoch == 0 and i <= data.batch:  # the first steps alone: compilation, for warmup.compile_s
                    t0 = time.perf_counter()
                    train_loss = self._train(data.train_x[idx], data.train_y[idx])
                    self._sync()
                    step_s.append(time.perf_counter() - t0)
                else:
                    train_loss = self._train(data.train_x[idx], data.train_y[idx])
            self._sync()
            middle = time.perf_counter()
            train_loss = float(train_loss)  # now: a CUDA graph's output is overwritten by its next replay
            total = None
            for x, y in val:
                self._mark()
                with self.autocast():
                    loss = self.loss(self._infer(x), y)
                total = loss if total is None else total + loss
            self._sync()
            end = time.perf_counter()
            self.scheduler.step()
            train_s.append(middle - start)
            val_s.append(end - middle)
            val_loss = float(total) / len(val) if val else None
        if self.compiled and len(step_s) > 1:
            self.compile_setup_s = max(0.0, step_s[0] - step_s[-1])
        counted = slice(1, None) if len(train_s) > 1 else slice(None)  # the first epoch left out
        n_epochs = len(train_s[counted])
        # every rank's samples, over the slowest rank's time
        train_time = dist.all_reduce(sum(train_s[counted]), "max")
        both_time = dist.all_reduce(sum(train_s[counted]) + sum(val_s[counted]), "max")
        train_samples = dist.all_reduce(float(n_train), "sum")
        val_samples = dist.all_reduce(float(len(val) * data.val_batch), "sum")
        return {"epochs": len(train_s), "counted_epochs": n_epochs, "first_epoch_left_out": len(train_s) > 1,
                "train_samples_per_epoch": int(train_samples), "val_samples_per_epoch": int(val_samples),
                "train_time_s": train_s, "val_time_s": val_s,
                "caraml_timesteps_per_s": n_epochs * (train_samples + val_samples) / both_time if both_time else None,
                "train_timesteps_per_s": n_epochs * train_samples / train_time if train_time else None,
                "last_train_loss": train_loss, "last_val_loss": val_loss}

    def _compile_report(self) -> dict:
        """CARAML's fno_compile.py: inference on one batch, eager and under each compile mode, 5 iterations each,
        the mean of iterations 2-4, and the speedup over eager."""
        x = self.all_batches[0][0]
        rows = []
        for mode in ("eager",) + COMPILE_MODES:
            torch._dynamo.reset()
            fn = self.raw_model if mode == "eager" else torch.compile(
                self.raw_model, **({} if mode == "default" else {"mode": mode}))
            times = []
            try:
                for _ in range(REPORT_ITERATIONS):
                    if mode != "eager":
                        torch.compiler.cudagraph_mark_step_begin()
                    self._sync()
                    t0 = time.perf_counter()
                    with torch.no_grad(), self.autocast():
                        fn(x)
                    self._sync()
                    times.append(time.perf_counter() - t0)
                rows.append({"mode": mode, "time_s": statistics.mean(times[REPORT_TIMED]), "first_s": times[0],
                             "times_s": times})
            except Exception as exc:  # noqa: BLE001 - a mode that fails is a row that says so
                rows.append({"mode": mode, "error": f"{type(exc).__name__}: {str(exc)[:300]}"})
        torch._dynamo.reset()  # the bench's own compiled callables compile again on their next call,
        self.compile_setup_s = 0.0  # so the harness's first warm-up step measures the compilation
        eager = rows[0].get("time_s")
        for row in rows:
            row["speedup"] = eager / row["time_s"] if eager and row.get("time_s") else None
        return {"iterations": REPORT_ITERATIONS, "timed": "mean of iterations 2-4", "batch": int(x.shape[0]),
                "amp": self.p["amp"], "rows": rows}

    # record ------------------------------------------------------------------------------------------
    def details(self) -> dict:
        pb, cfg, data = self.problem, self.cfg, self.data
        dp = self.ctx.dims.dp
        out = {
            "global_batch_size": data.batch * dp, "dp": dp,
            "settings": {"problem": pb.name, "kind": pb.kind, "in_channels": pb.in_channels,
                         "out_channels": pb.out_channels, "width": cfg["width"], "modes": list(cfg["modes"]),
                         "layers": cfg["layers"], "batch_size": data.batch, "lr": cfg["lr"],
                         "weight_decay": self.p["weight_decay"], "scheduler": pb.scheduler, "loss": pb.loss},
            "model_params": self.n_params, "model_params_m": self.n_params / 1e6,
            "model_size_mb": self.n_params * 4 / 1e6,  # as CARAML: parameters x 4 bytes
            "input_shape": "[" + ",".join(str(n) for n in (data.batch, pb.in_channels, *data.spatial)) + "]",
            "grid": shape_text(data.spatial) if pb.kind == "grid" else None,
            "particles": data.spatial[-1] if pb.kind != "grid" else None,
            "data": data.describe(),
            "throughput_conventions": CONVENTIONS,
            "flops": self.flops,
            "math": {"matmul_precision": self.p["matmul_precision"],
                     "spectral_dtype": "fp16" if self.p["complex_mixed_precision"] else "fp32",
                     "spectral_weights": "complex64" if self.p["complex_weights"] else "real (re, im) pairs",
                     "transform": {"grid": "rfftn/irfftn", "dse": "direct spectral evaluation (Vandermonde matmul)",
                                   "nufft": "Kaiser-Bessel NUFFT (width 4, 2x oversampled grid "
                                            f"{self.raw_model.transform.n if pb.kind == 'nufft' else 0})"}[pb.kind]},
        }
        if self.epochs:
            out["epochs"] = self.epochs
            out["caraml_timesteps_per_s"] = self.epochs["caraml_timesteps_per_s"]
            out["train_throughput"] = {"value": self.epochs["train_timesteps_per_s"], "unit": "timesteps/s"}
        if self.memory_split:
            out["memory_split"] = self.memory_split
        if self.compile_report:
            out["compile_report"] = self.compile_report
        return out

    def close(self) -> None:
        self.train_batches = self.all_batches = []
        self.data = None
