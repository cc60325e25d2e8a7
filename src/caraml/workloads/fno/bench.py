"""The FNO benchmark: data on the device, the model, Adam, compile options; `step()` is one training
iteration (or one inference batch) on one batch, and CARAML's epoch runner gives its Timesteps/s.

Build order: data -> model (FLOPs counted on the meta device) -> DDP -> optimiser -> (CUDA) memory split of one
eager step -> compile. Then the harness warms up (the first step compiles) and measures `step()`, and after the
steady-state window runs the extra phase `caraml-epochs`: CARAML's epoch runner (mode=train, epochs > 0) and
CARAML's compile report (compile_report=on; the phase is `caraml-compile-report` when it runs alone), both
checking the harness's stop flag at every step. (Until this version the epochs and the report ran in `build`,
before the window, where no stop signal reached them.)
"""

from __future__ import annotations

import statistics
import time
import warnings

import torch
import torch.nn.functional as F

from caraml.contract import BenchInfo, RunContext
from caraml.errors import BadInput
from caraml.kit.compile import compile_options
from caraml.kit.data_parallel import wrap_ddp
from caraml.kit.epochs import EpochTimes, run_epochs
from caraml.kit.optim import kernel_flags
from caraml.kit.precision import autocast, grad_scaler, matmul_tf32_allowed, precision_in_use
from caraml.kit.step import backward_and_step
from caraml.workloads.fno import COMPILE_MODES, files, flops
from caraml.workloads.fno.config import FNOConfig
from caraml.workloads.fno.model import build_model, count_parameters
from caraml.workloads.fno.problems import (
    STEP_LR,
    TRAIN_FRACTION,
    Problem,
    modes_misfit,
    shape_text,
)

REPORT_ITERATIONS = 5  # CARAML's fno_compile.py: 5 iterations, the mean of iterations 2-4 timed
REPORT_TIMED = slice(1, 4)

CONVENTIONS = {
    "throughput": "ours: steady state, samples (timesteps) per second over the harness's measured window of "
                  "step()s after warm-up, summed over data-parallel replicas",
    "caraml_timesteps_per_s": "CARAML's Timesteps/s: epochs after the first x (train + validation samples) / "
                              "their summed train + validation time (slowest rank), from the epoch runner (run after "
                              "the steady-state window)",
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

    def __init__(self, cfg: FNOConfig, ctx: RunContext):
        self.batch = cfg.batch_size
        self.path = None
        if cfg.data == "file":
            self._read_file(cfg, ctx)
        else:
            self._make_synthetic(cfg, ctx)
        self.val_batch = min(self.batch, self.val_x.shape[0])

    def _read_file(self, cfg: FNOConfig, ctx: RunContext) -> None:
        """The file's first `samples` samples; this rank's equal shard of the train and of the validation part, and
        only those rows read (checked first to fit in the memory available: bad input otherwise)."""
        pb, rank, world = cfg.problem, ctx.rank, ctx.world_size
        path = files.resolve_path(cfg.data_path, pb, ctx.data_root)
        with files.DataFile(path, pb) as data:
            n = data.samples if not cfg.samples else min(cfg.samples, data.samples)
            n_train = int(TRAIN_FRACTION * n)
            # equal shards, so that every rank runs as many steps as the others
            tr, va = n_train // world, (n - n_train) // world
            if tr < self.batch:
                raise BadInput(f"fno: {path} has {n} samples: {n_train} train, {tr} per device, fewer than "
                               f"batch_size={self.batch}; use a smaller batch_size or a file with more samples")

            def read():
                data.check_fits(tr + va, readers=ctx.dist.local_world_size, world=world)
                shards = [(data.rows(start, start + count), start) for start, count in
                          ((rank * tr, tr), (n_train + rank * va, va))]
                for (x, y), start in shards:
                    for name, values in (("inputs", x), ("outputs", y)):
                        files.check_finite(values, f"{data.where}: {name}", first=start)
                return [rows for rows, _ in shards]

            train, val = _on_every_rank(ctx.dist, read)
            got = data.describe()
        self.path, self.samples_in_file, self.synthetic_file = str(path), got["samples_in_file"], got["synthetic"]
        self.file_dtype = got.get("file_dtype")
        self.spatial, domain = got["spatial"], got["domain"]
        (self.train_x, self.train_y), (self.val_x, self.val_y) = (
            self._on_device(pb, x, y, domain, ctx.device) for x, y in (train, val))

    @staticmethod
    def _on_device(pb: Problem, x, y, domain: float, device):
        x, y = torch.from_numpy(x), torch.from_numpy(y)
        if pb.position_channels and domain != files.DOMAIN:  # the model's transforms take positions in [0, 2 pi)
            x[:, :pb.position_channels] *= files.DOMAIN / domain
        return x.to(device), y.to(device)

    def _make_synthetic(self, cfg: FNOConfig, ctx: RunContext) -> None:
        """Random samples of the problem's shapes, made on the device, seeded per rank."""
        pb, batch = cfg.problem, self.batch
        self.spatial = cfg.spatial
        # default: 4 training batches and a validation batch for the epoch runner, else 2 batches to alternate
        wanted = cfg.samples or (5 * batch if cfg.runs_epochs else 2 * batch)
        n_train = int(TRAIN_FRACTION * wanted) if cfg.runs_epochs else wanted
        if n_train < batch:
            raise BadInput(f"fno: samples={wanted} leave {n_train} for training, fewer than batch_size={batch}")
        gen = torch.Generator(device=ctx.device).manual_seed(ctx.seed * 1000 + ctx.rank)
        self.train_x, self.train_y = self._random(pb, n_train, gen, ctx.device)
        self.val_x, self.val_y = self._random(pb, wanted - n_train, gen, ctx.device)

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
            if self.file_dtype:
                out["file_dtype"] = self.file_dtype
        return out


def _on_every_rank(dist, work):
    """work() on this rank; when it is refused (bad input) on any rank, every rank is refused, so that none is
    left waiting for the others in the first collective."""
    try:
        result, refused = work(), None
    except BadInput as exc:
        result, refused = None, exc
    if dist.all_reduce(1.0 if refused else 0.0, "max"):
        raise refused or BadInput("fno: the data file was refused by another process (its message is in its output)")
    return result


class FNOBench:
    def __init__(self, cfg: FNOConfig, ctx: RunContext):
        self.cfg, self.ctx = cfg, ctx
        self.device, self.dist, self.problem = ctx.device, ctx.dist, cfg.problem
        torch.manual_seed(ctx.seed)  # the same initial weights on every rank
        torch.set_float32_matmul_precision(cfg.matmul_precision)
        self.data = Data(cfg, ctx)
        self._build_model()
        self._build_optimizer()
        self.autocast = autocast(cfg.precision, ctx.device)
        self.scaler = grad_scaler(cfg.precision, ctx.device)
        self.memory_split = self._memory_split() if ctx.device.type == "cuda" and cfg.train else None
        self._set_up_steps()
        self.train_batches = self.data.batches(self.data.train_x, self.data.train_y, self.data.batch)
        self.all_batches = self.train_batches + self.data.batches(self.data.val_x, self.data.val_y, self.data.batch)
        self._i = -1
        # CARAML's own measurements, after the steady-state window (run_extra)
        self.extra_phase = ("caraml-epochs" if cfg.runs_epochs else
                            "caraml-compile-report" if cfg.compile_report else None)
        self.epochs: dict | None = None
        self.compile_report: dict | None = None
        self.info = BenchInfo(
            units_per_step=self.data.batch, unit="timesteps", flops_per_unit=self.flops["per_sample"],
            flops_convention=flops.FLOPS_CONVENTION.format(
                passes="forward+backward pass (training)" if cfg.train else "forward pass (inference)"),
            precision=precision_in_use(cfg.precision, ctx.device, tf32_allowed=matmul_tf32_allowed()),
            compiled=cfg.compiled)

    # set-up ------------------------------------------------------------------------------------------
    def _build_model(self) -> None:
        """The operator for the data's grid or particles (checked against the kept modes), its FLOPs counted on the
        meta device, on the device and, with several processes, under DDP."""
        cfg, pb, spatial = self.cfg, self.problem, self.data.spatial
        misfit = modes_misfit(pb.kind, cfg.modes, spatial)
        if misfit:
            raise BadInput(f"fno: {pb.name} with modes={shape_text(cfg.modes)}: {misfit}")
        try:
            model = build_model(pb, cfg.width, cfg.modes, cfg.layers, complex_weights=cfg.complex_weights,
                                half_spectral=cfg.complex_mixed_precision, particles=spatial[-1],
                                nufft_backend=cfg.nufft_backend)
        except ValueError as exc:  # a PIC2D operator torchkbnufft cannot make at these sizes
            raise BadInput(f"fno: {pb.name}: {exc}") from None
        if cfg.complex_mixed_precision and pb.kind != "dse":
            fft_sizes = spatial if pb.kind == "grid" else (model.transform.n,) * 2
            if any(n & (n - 1) for n in fft_sizes):
                raise BadInput(f"fno: complex_mixed_precision=on needs power-of-two FFT sizes (cuFFT half precision); "
                               f"the grid is {shape_text(fft_sizes)}")
        self.raw_model = model.to(self.device)
        self.n_params = count_parameters(model)
        self.loss = loss_fn(pb.loss)
        self.flops = self._count_flops(spatial)
        # the model's buffers are constants (the PIC2D trajectory and matrix, NUFFT tables): none to broadcast
        self.model = wrap_ddp(model, self.device, self.dist.world_size, broadcast_buffers=False)

    def _build_optimizer(self) -> None:
        """Adam (CARAML's), and its learning-rate schedule per epoch: StepLR for PIC, cosine for RBC."""
        cfg = self.cfg
        self.optimizer = torch.optim.Adam(self.raw_model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay,
                                          **kernel_flags(cfg.adam_impl))
        self.scheduler = (torch.optim.lr_scheduler.StepLR(self.optimizer, step_size=STEP_LR[0], gamma=STEP_LR[1])
                          if self.problem.scheduler == "step" else
                          torch.optim.lr_scheduler.CosineAnnealingLR(self.optimizer, T_max=max(1, cfg.epochs)))

    def _count_flops(self, spatial) -> dict:
        """Per sample, on the meta device (no memory, no compute), with a batch of 2."""
        pb, cfg = self.problem, self.cfg
        y = torch.empty(2, pb.out_channels, *spatial, device="meta")
        counted = flops.count(lambda: build_model(pb, cfg.width, cfg.modes, cfg.layers, particles=spatial[-1],
                                                  nufft_backend=cfg.nufft_backend),
                              lambda: torch.empty(2, pb.in_channels, *spatial), train=cfg.train,
                              loss=lambda out: self.loss(out, y))
        return {"per_sample": counted["total"] / 2, "fft_per_sample": counted["fft"] / 2}

    def _set_up_steps(self) -> None:
        """The train and inference steps, compiled as compile_scope says (compile=inductor)."""
        cfg = self.cfg
        self.forward = self.model
        self._train = self._train_step
        self._infer = self._infer_step
        if not cfg.compiled:
            return
        if not cfg.complex_weights:  # FFTs are library calls however they are compiled: the warning misleads
            warnings.filterwarnings("ignore", message="Torchinductor does not support code generation for complex")
        options = compile_options(cfg.compile, cfg.compile_mode)
        if cfg.compile_scope == "pointwise":
            self.raw_model.exclude_spectral_from_compile()
        if cfg.compile_scope in ("model", "pointwise"):
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
        if self.cfg.compiled:  # CUDA graphs (reduce-overhead, max-autotune): a new iteration starts here
            torch.compiler.cudagraph_mark_step_begin()

    def step(self) -> None:
        self._mark()
        if self.cfg.train:
            self._i = (self._i + 1) % len(self.train_batches)
            self._train(*self.train_batches[self._i])
        else:
            self._i = (self._i + 1) % len(self.all_batches)
            self._infer(self.all_batches[self._i][0])

    # CARAML's measurements, the harness's extra phase --------------------------------------------------
    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def run_extra(self, should_stop) -> None:
        """After the steady-state window: CARAML's epochs, then its compile report. `should_stop()` is asked at
        every step (the same number of times on every rank); once it says stop, nothing more runs, and what was
        measured so far is kept."""
        if self.cfg.runs_epochs:
            self.epochs = self._run_epochs(should_stop)
            if self.epochs["stopped"]:
                return
        if self.cfg.compile_report:
            self.compile_report = self._compile_report(should_stop)

    def _run_epochs(self, should_stop) -> dict:
        """CARAML's epoch loop: shuffled training batches, then validation (no gradients), each timed."""
        data = self.data
        n_train = len(self.train_batches) * data.batch
        val = data.batches(data.val_x, data.val_y, data.val_batch)
        gen = torch.Generator(device="cpu").manual_seed(self.ctx.seed)
        shuffle = lambda: torch.randperm(data.train_x.shape[0], generator=gen)[:n_train].to(self.device)
        state = {"order": shuffle(), "train_loss": None, "val_loss": None}

        def train(epoch):
            loss, order = None, state["order"]
            for i in range(0, n_train, data.batch):
                idx = order[i:i + data.batch]
                self._mark()
                loss = self._train(data.train_x[idx], data.train_y[idx])
                yield
            state["train_loss"] = float(loss)  # now: a CUDA graph's output is overwritten by its next replay

        def validate(epoch):
            total = None
            for x, y in val:
                self._mark()
                with self.autocast():
                    loss = self.loss(self._infer(x), y)
                total = loss if total is None else total + loss
                yield
            state["val_loss"] = float(total) / len(val) if val else None

        def end_of_epoch(epoch):  # outside the timed parts: the learning rate, the next epoch's order
            self.scheduler.step()
            state["order"] = shuffle()

        times = run_epochs(self.cfg.epochs, train, validate, self._sync, should_stop, end_of_epoch)
        return self._epoch_figures(times, n_train, len(val) * data.val_batch, state)

    def _epoch_figures(self, times: EpochTimes, n_train: int, n_val: int, state: dict) -> dict:
        """CARAML's Timesteps/s and TrainTimesteps/s over the epochs completed, the first left out. The ranks
        leave run_epochs together (at the same step when stopped), so the reductions here are safe either way."""
        dist, train_s, val_s = self.dist, times.train_s, times.val_s
        counted = slice(1, None) if len(train_s) > 1 else slice(None)  # the first epoch left out
        n_epochs = len(train_s[counted])
        # every rank's samples, over the slowest rank's time
        train_time = dist.all_reduce(sum(train_s[counted]), "max")
        both_time = dist.all_reduce(sum(train_s[counted]) + sum(val_s[counted]), "max")
        train_samples = dist.all_reduce(float(n_train), "sum")
        val_samples = dist.all_reduce(float(n_val), "sum")
        return {"epochs": len(train_s), "counted_epochs": n_epochs, "first_epoch_left_out": len(train_s) > 1,
                "stopped": times.stopped, "train_samples_per_epoch": int(train_samples),
                "val_samples_per_epoch": int(val_samples), "train_time_s": train_s, "val_time_s": val_s,
                "caraml_timesteps_per_s": n_epochs * (train_samples + val_samples) / both_time if both_time else None,
                "train_timesteps_per_s": n_epochs * train_samples / train_time if train_time else None,
                "last_train_loss": state["train_loss"] if train_s else None,
                "last_val_loss": state["val_loss"] if train_s else None}

    def _compile_report(self, should_stop) -> dict:
        """CARAML's fno_compile.py: inference on one batch, eager and under each compile mode, 5 iterations each,
        the mean of iterations 2-4, and the speedup over eager. `should_stop()` is asked before every iteration,
        also those of a mode that failed, so that every rank asks as often."""
        x = self.all_batches[0][0]
        rows, stopped = [], False
        for mode in ("eager",) + COMPILE_MODES:
            torch._dynamo.reset()
            fn = self.raw_model if mode == "eager" else torch.compile(
                self.raw_model, **compile_options("inductor", mode))
            times, error = [], None
            for _ in range(REPORT_ITERATIONS):
                if should_stop():
                    stopped = True
                    break
                if error is None:
                    try:
                        times.append(self._report_iteration(fn, x, compiled=mode != "eager"))
                    except Exception as exc:  # noqa: BLE001 - a mode that fails is a row that says so
                        error = f"{type(exc).__name__}: {str(exc)[:300]}"
            if error is not None:
                rows.append({"mode": mode, "error": error})
            elif len(times) == REPORT_ITERATIONS:
                rows.append({"mode": mode, "time_s": statistics.mean(times[REPORT_TIMED]), "first_s": times[0],
                             "times_s": times})
            if stopped:
                break
        torch._dynamo.reset()  # the report's compiled callables go; nothing of the benchmark runs after it
        eager = rows[0].get("time_s") if rows else None
        for row in rows:
            row["speedup"] = eager / row["time_s"] if eager and row.get("time_s") else None
        return {"iterations": REPORT_ITERATIONS, "timed": "mean of iterations 2-4", "batch": int(x.shape[0]),
                "precision": self.cfg.precision, "rows": rows, "stopped": stopped}

    def _report_iteration(self, fn, x, compiled: bool) -> float:
        if compiled:
            torch.compiler.cudagraph_mark_step_begin()
        self._sync()
        t0 = time.perf_counter()
        with torch.no_grad(), self.autocast():
            fn(x)
        self._sync()
        return time.perf_counter() - t0

    # record ------------------------------------------------------------------------------------------
    def health(self) -> str | None:
        """Why the run trained nothing (weights gone NaN or Inf, e.g. from NaN data); None when it trained."""
        from caraml.kit.health import weights_not_finite

        return weights_not_finite(self.optimizer, f"check the data for NaN or Inf, or lower lr (now {self.cfg.lr:g})")

    def details(self) -> dict:
        pb, cfg, data = self.problem, self.cfg, self.data
        dp = self.ctx.dims.dp
        out = {
            "global_batch_size": data.batch * dp, "dp": dp,
            "settings": {"problem": pb.name, "kind": pb.kind, "in_channels": pb.in_channels,
                         "out_channels": pb.out_channels, "width": cfg.width, "modes": list(cfg.modes),
                         "layers": cfg.layers, "batch_size": data.batch, "lr": cfg.lr,
                         "weight_decay": cfg.weight_decay, "scheduler": pb.scheduler, "loss": pb.loss,
                         **({"pic2d_operator": cfg.pic2d_operator} if pb.name == "PIC2D" else {}),
                         **({"nufft_backend": cfg.nufft_backend} if pb.kind == "kbnufft" else {})},
            "model_params": self.n_params, "model_params_m": self.n_params / 1e6,
            "model_size_mb": self.n_params * 4 / 1e6,  # as CARAML: parameters x 4 bytes
            "input_shape": "[" + ",".join(str(n) for n in (data.batch, pb.in_channels, *data.spatial)) + "]",
            "grid": shape_text(data.spatial) if pb.kind == "grid" else None,
            "particles": data.spatial[-1] if pb.kind != "grid" else None,
            "data": data.describe(),
            "throughput_conventions": CONVENTIONS,
            "flops": self.flops,
            "math": {"matmul_precision": cfg.matmul_precision,
                     "spectral_dtype": "fp16" if cfg.complex_mixed_precision else "fp32",
                     "spectral_weights": "complex64" if cfg.complex_weights else "real (re, im) pairs",
                     "transform": self.raw_model.transform.describe()},
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
