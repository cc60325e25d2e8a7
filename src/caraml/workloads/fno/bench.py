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
from caraml.kit.compile import COMPILE_MODES, compile_options
from caraml.kit.data_parallel import wrap_ddp
from caraml.kit.epochs import EpochTimes, run_epochs
from caraml.kit.optim import kernel_flags
from caraml.kit.precision import autocast, grad_scaler, matmul_tf32_allowed, precision_in_use
from caraml.kit.step import backward_and_step
from caraml.measure.timing import figure_spread
from caraml.workloads.fno import files, flops
from caraml.workloads.fno.config import FNOConfig
from caraml.workloads.fno.model import build_model, count_parameters, dse_backend_misfit
from caraml.workloads.fno.problems import (
    CARAML_CONFIG_FILES,
    STEP_LR,
    TRAIN_FRACTION,
    Problem,
    modes_misfit,
    shape_text,
)

REPORT_ITERATIONS = 5  # CARAML's fno_compile.py: 5 iterations, np.mean(times[2:]): the last three timed
REPORT_TIMED = slice(2, None)

# CARAML's summary figures of the epochs, also flat in the record for its table
CARAML_EPOCH_KEYS = ("mean_compile_time_s", "total_epoch_time_s", "total_train_time_s", "total_compute_time_s",
                     "timesteps", "train_timesteps", "counted_epochs")

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


class DeviceData:
    """data=synthetic: this rank's train and validation samples made on the device (the model alone, no loader),
    CARAML's 80/20 split; the same interface as loader.LoaderData."""

    source = "synthetic"

    def __init__(self, cfg: FNOConfig, ctx: RunContext, batch: int):
        pb, self.batch, self.device, world = cfg.problem_spec, batch, ctx.device, ctx.world_size
        self.spatial = cfg.spatial
        # default: 4 training batches and a validation batch for the epoch runner, else 2 batches to alternate
        wanted = cfg.samples or (5 * batch if cfg.runs_epochs else 2 * batch)
        n_train = int(TRAIN_FRACTION * wanted) if cfg.runs_epochs else wanted
        if n_train < batch:
            raise BadInput(f"fno: samples={wanted} leave {n_train} for training, fewer than the batch of {batch} per "
                           "device")
        gen = torch.Generator(device=ctx.device).manual_seed(ctx.seed * 1000 + ctx.rank)
        self.train_x, self.train_y = self._random(pb, n_train, gen, ctx.device)
        self.val_x, self.val_y = self._random(pb, wanted - n_train, gen, ctx.device)
        self.val_batch = min(cfg.val_batch_size or batch, self.val_x.shape[0])
        self.train_batches = self._batches(self.train_x, self.train_y, batch)
        self.val_batches = self._batches(self.val_x, self.val_y, self.val_batch)
        # the epochs' samples, all ranks' (CARAML counts its whole data set)
        self.n_train, self.n_val = (len(b) * size * world for b, size in ((self.train_batches, batch),
                                                                          (self.val_batches, self.val_batch)))
        self._gen = torch.Generator(device="cpu").manual_seed(ctx.seed)
        self._i = -1

    def _random(self, pb: Problem, n: int, gen, device):
        x = torch.randn(n, pb.in_channels, *self.spatial, device=device, generator=gen)
        if pb.position_channels:
            x[:, :pb.position_channels] = files.DOMAIN * torch.rand(n, pb.position_channels, *self.spatial,
                                                                    device=device, generator=gen)
        y = torch.randn(n, pb.out_channels, *self.spatial, device=device, generator=gen)
        return x, y

    @staticmethod
    def _batches(x, y, size: int):
        """Contiguous batches (views, no copies); the remainder is left out so that shapes never change."""
        return [(x[i:i + size], y[i:i + size]) for i in range(0, x.shape[0] - size + 1, size)] if size else []

    def train_epoch(self, epoch: int):
        """The training batches in a new random order (indexing on the device: a gather, no host copy)."""
        n = len(self.train_batches) * self.batch
        order = torch.randperm(self.train_x.shape[0], generator=self._gen)[:n].to(self.device)
        for i in range(0, n, self.batch):
            idx = order[i:i + self.batch]
            yield self.train_x[idx], self.train_y[idx]

    def val_epoch(self, epoch: int):
        yield from self.val_batches

    def next_batch(self):
        self._i = (self._i + 1) % len(self.train_batches)
        return self.train_batches[self._i]

    def sample_batch(self):
        return self.train_batches[0]

    def describe(self) -> dict:
        return {"source": "synthetic", "path_taken": "made on the device, no loader",
                "train_samples": int(self.train_x.shape[0]), "val_samples": int(self.val_x.shape[0]),
                "per": "device (rank)", "batch_per_device": self.batch, "val_batch_per_device": self.val_batch}

    def close(self) -> None:
        self.train_batches = self.val_batches = []


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
        self.device, self.dist, self.problem = ctx.device, ctx.dist, cfg.problem_spec
        torch.manual_seed(ctx.seed)  # the same initial weights on every rank
        torch.set_float32_matmul_precision(cfg.matmul_precision)
        self.data = _on_every_rank(ctx.dist, lambda: self._make_data(cfg, ctx))
        self._build_model()
        self._build_optimizer()
        self.autocast = autocast(cfg.precision, ctx.device)
        self.scaler = grad_scaler(cfg.precision, ctx.device)
        self.memory_split = self._memory_split() if ctx.device.type == "cuda" and cfg.train else None
        self._set_up_steps()
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
    @staticmethod
    def _make_data(cfg: FNOConfig, ctx: RunContext):
        """CARAML's loaders over a file or host arrays, or samples made on the device (data=synthetic). The batch
        per device is the global batch's share (bad input when it does not split evenly) or batch_size."""
        dp = ctx.dims.dp
        misfit = cfg.batch_misfit(dp)
        if misfit:
            raise BadInput(misfit)
        batch = cfg.local_batch(dp)
        if not cfg.loader:
            return DeviceData(cfg, ctx, batch)
        from caraml.workloads.fno.loader import LoaderData, resolve_source

        return LoaderData(cfg, ctx, resolve_source(cfg.data, cfg.data_path, cfg.problem_spec, ctx.data_root), batch)

    def _build_model(self) -> None:
        """The operator for the data's grid or particles (checked against the kept modes), its FLOPs counted on the
        meta device, on the device and, with several processes, under DDP."""
        cfg, pb, spatial = self.cfg, self.problem, self.data.spatial
        misfit = dse_backend_misfit(cfg.dse_backend, self.device, cfg.kept_modes[0], cfg.width)
        if misfit:
            raise BadInput(misfit)
        misfit = modes_misfit(pb.kind, cfg.kept_modes, spatial)
        if misfit:
            raise BadInput(f"fno: {pb.name} with modes={cfg.modes}: {misfit}")
        try:
            model = build_model(pb, cfg.width, cfg.kept_modes, cfg.layers, complex_weights=cfg.complex_weights,
                                half_spectral=cfg.complex_mixed_precision, particles=spatial[-1],
                                nufft_backend=cfg.nufft_backend, dse_layout=cfg.dse_layout,
                                dse_backend=cfg.dse_backend)
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
        counted = flops.count(lambda: build_model(pb, cfg.width, cfg.kept_modes, cfg.layers, particles=spatial[-1],
                                                  nufft_backend=cfg.nufft_backend, dse_layout=cfg.dse_layout),
                              lambda: torch.empty(2, pb.in_channels, *spatial), train=cfg.train,
                              loss=lambda out: self.loss(out, y))
        return {"per_sample": counted["total"] / 2, "fft_per_sample": counted["fft"] / 2}

    def _set_up_steps(self) -> None:
        """The train and inference steps, compiled as compile_scope says (compile=inductor|aot_eager)."""
        cfg = self.cfg
        self.forward = self.model
        self._train = self._train_step
        self._infer = self._infer_step
        if not cfg.compiled:
            return
        if not cfg.complex_weights:  # FFTs are library calls however they are compiled: the warning misleads
            warnings.filterwarnings("ignore", message="Torchinductor does not support code generation for complex")
        options = compile_options(cfg.compile, cfg.compile_mode, cfg.compile_tuning)
        if cfg.compile_scope == "pointwise":
            self.raw_model.exclude_spectral_from_compile()
        if cfg.compile_scope in ("model", "pointwise"):
            self.forward = torch.compile(self.model, **options)
        else:
            self._train = torch.compile(self._train_step, **options)
            self._infer = torch.compile(self._infer_step, **options)
        if cfg.compile_scope == "epoch":  # CARAML's torch.compile(self.train): the whole epoch, loader included
            self._whole_epoch = torch.compile(self._train_whole_epoch, **options)

    def _memory_split(self) -> dict:
        """CARAML's memory columns from one eager training step: peak in the forward pass, activations kept
        for backward, and what persists after the step (weights, gradients, Adam state, data)."""
        x, y = self.data.sample_batch()
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
        if self.cfg.compile == "inductor":  # CUDA graphs (reduce-overhead, max-autotune): a new iteration here
            torch.compiler.cudagraph_mark_step_begin()

    def step(self) -> None:
        x, y = self.data.next_batch()  # data=file|synthetic-host: from the loader, copied host -> device
        self._mark()
        if self.cfg.train:
            self._train(x, y)
        else:
            self._infer(x)

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
        """CARAML's epoch loop: this rank's training batches (shuffled), then validation (no gradients), each timed;
        on CUDA, CARAML's memory probes every 10th training batch. compile_scope=epoch runs each training epoch as
        one compiled call (CARAML's torch.compile(self.train)): a stop is then seen between epochs only."""
        data, cuda = self.data, self.device.type == "cuda"
        state = {"train_loss": None, "val_loss": None, "batches": [], "memory": None}
        probes = cuda and self.cfg.compile_scope != "step"  # a step compiled whole has no point between its passes

        def train(epoch):
            if self.cfg.compile_scope == "epoch":
                loss, batches, memory = self._whole_epoch(epoch)
                yield
            else:
                loss, batches, memory = None, 0, ([], [])
                for x, y in data.train_epoch(epoch):
                    self._mark()
                    loss = self._probed_step(x, y, memory) if probes and batches % 10 == 0 else self._train(x, y)
                    batches += 1
                    yield
            state["batches"].append(batches)
            state["memory"] = memory if memory[0] else None  # the last epoch's, as CARAML's table shows
            state["train_loss"] = float(loss)  # now: a CUDA graph's output is overwritten by its next replay

        # compile_scope=epoch: validation eager, as CARAML's valid() outside its compiled self.train
        infer = self._infer_step if self.cfg.compile_scope == "epoch" else self._infer

        def validate(epoch):
            total, n = None, 0
            for x, y in data.val_epoch(epoch):
                self._mark()
                with self.autocast():
                    loss = self.loss(infer(x), y)
                total, n = (loss if total is None else total + loss), n + 1
                yield
            state["val_loss"] = float(total) / n if n else None

        def end_of_epoch(epoch):  # outside the timed parts
            self.scheduler.step()

        times = run_epochs(self.cfg.epochs, train, validate, self._sync, should_stop, end_of_epoch)
        return self._epoch_figures(times, state)

    def _train_whole_epoch(self, epoch):
        """One training epoch as one function (compile_scope=epoch compiles it, as CARAML compiles self.train); the
        memory probes run inside, as CARAML's do (graph breaks)."""
        loss, batches, memory = None, 0, ([], [])
        for x, y in self.data.train_epoch(epoch):
            if self.device.type == "cuda" and batches % 10 == 0:
                loss = self._probed_step(x, y, memory)
            else:
                loss = self._train_step(x, y)
            batches += 1
        return loss, batches, memory

    def _probed_step(self, x, y, memory):
        """A training step with CARAML's memory probes: memory allocated after the forward pass and loss, and after
        the optimizer step (operator_learning's train(), every 10th batch)."""
        with self.autocast():
            loss = self.loss(self.forward(x), y)
        memory[0].append(torch.cuda.memory_allocated(self.device))
        backward_and_step(loss, self.optimizer, self.scaler)
        memory[1].append(torch.cuda.memory_allocated(self.device))
        return loss.detach()

    def _epoch_figures(self, times: EpochTimes, state: dict) -> dict:
        """CARAML's figures over the epochs completed (operator_learning's learn() with benchmark on): the first
        epoch left out of the totals; samples are the whole data set's (all ranks'), times the slowest rank's. The
        ranks leave run_epochs together (at the same step when stopped), so the reductions here are safe."""
        dist, data, train_s, val_s = self.dist, self.data, times.train_s, times.val_s
        counted = slice(1, None) if len(train_s) > 1 else slice(None)  # the first epoch left out
        n_epochs = len(train_s[counted])
        train_time = dist.all_reduce(sum(train_s[counted]), "max")
        compute_time = dist.all_reduce(sum(train_s[counted]) + sum(val_s[counted]), "max")
        epoch_time = dist.all_reduce(sum(times.epoch_s[counted]), "max")
        timesteps, train_timesteps = n_epochs * (data.n_train + data.n_val), n_epochs * data.n_train
        # CARAML: TFLOP/s per device per epoch = one batch's training FLOPs x batches / the epoch's train time
        batch_flops = self.flops["per_sample"] * data.batch
        tflops = [batch_flops * n / t / 1e12 for n, t in zip(state["batches"], train_s) if t > 0]
        out = {"epochs": len(train_s), "counted_epochs": n_epochs, "first_epoch_left_out": len(train_s) > 1,
               "stopped": times.stopped, "train_samples_per_epoch": data.n_train,
               "val_samples_per_epoch": data.n_val, "train_time_s": train_s, "val_time_s": val_s,
               "epoch_time_s": times.epoch_s,
               # CARAML's summary: TotalEpochTime, TotalComputeTime (train + validation), TotalTrainTime,
               # MeanCompileTime (the mean training time of the epochs after the first), TotalTimesteps, ...
               "total_epoch_time_s": epoch_time, "total_compute_time_s": compute_time,
               "total_train_time_s": train_time,
               "mean_compile_time_s": statistics.mean(train_s[counted]) if train_s else None,
               "timesteps": timesteps, "train_timesteps": train_timesteps,
               "caraml_timesteps_per_s": timesteps / compute_time if compute_time else None,
               "train_timesteps_per_s": train_timesteps / train_time if train_time else None,
               "tflops_per_epoch": tflops, "tflops": statistics.mean(tflops) if tflops else None,
               # each counted epoch's own Timesteps/s on this rank: how much the epochs behind the figure differ
               "spread": figure_spread([(data.n_train + data.n_val) / (t + v) for t, v in
                                        zip(train_s[counted], val_s[counted]) if t + v > 0], "epochs", "timesteps/s"),
               "last_train_loss": state["train_loss"] if train_s else None,
               "last_val_loss": state["val_loss"] if train_s else None}
        memory = state["memory"]
        if memory:  # CARAML's PeakFwdMem, PersistentMem, ActivationMem (MB = 2**20 bytes), the last epoch's means
            fwd, after = (statistics.mean(m) / 2**20 for m in memory)
            out["caraml_memory_mb"] = {"peak_fwd": fwd, "persistent": after, "activation": fwd - after,
                                       "probes": len(memory[0])}
        return out

    def _compile_report(self, should_stop) -> dict:
        """CARAML's fno_compile.py: inference on one batch, eager and under each compile mode, 5 iterations each,
        the mean of iterations 2-4, and the speedup over eager. `should_stop()` is asked before every iteration,
        also those of a mode that failed, so that every rank asks as often."""
        x = self.data.sample_batch()[0]
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
        return {"iterations": REPORT_ITERATIONS, "timed": "mean of iterations 3-5 (CARAML: times[2:])",
                "batch": int(x.shape[0]), "precision": self.cfg.precision, "rows": rows, "stopped": stopped}

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
            "caraml_config": CARAML_CONFIG_FILES[pb.name], "caraml_version": cfg.caraml_version,
            "settings": {"problem": pb.name, "kind": pb.kind, "in_channels": pb.in_channels,
                         "out_channels": pb.out_channels, "width": cfg.width, "modes": list(cfg.kept_modes),
                         "layers": cfg.layers, "batch_size": data.batch, "lr": cfg.lr,
                         "weight_decay": cfg.weight_decay, "scheduler": pb.scheduler, "loss": pb.loss,
                         **({"pic2d_operator": cfg.pic2d_operator} if pb.name == "PIC2D" else {}),
                         **({"nufft_backend": cfg.nufft_backend} if pb.kind == "kbnufft" else {}),
                         **({"dse_layout": cfg.dse_layout, "dse_backend": cfg.dse_backend}
                            if pb.kind == "dse" else {})},
            "model_params": self.n_params, "model_params_m": self.n_params / 1e6,
            "model_size_mb": self.n_params * 4 / 1e6,  # as CARAML: parameters x 4 bytes
            "input_shape": "[" + ",".join(str(n) for n in (data.batch, pb.in_channels, *data.spatial)) + "]",
            "grid": shape_text(data.spatial) if pb.kind == "grid" else None,
            "particles": data.spatial[-1] if pb.kind != "grid" else None,
            "data": data.describe(), "data_source": data.source,
            "throughput_conventions": CONVENTIONS,
            "flops": self.flops,
            "math": {"matmul_precision": cfg.matmul_precision,
                     "spectral_dtype": "fp16" if cfg.complex_mixed_precision else "fp32",
                     "spectral_weights": "complex64" if cfg.complex_weights else "real (re, im) pairs",
                     "transform": self.raw_model.transform.describe()},
        }
        if self.epochs:
            ep = self.epochs
            out["epochs"] = ep
            out["caraml_timesteps_per_s"] = ep["caraml_timesteps_per_s"]
            out["caraml_spread"] = ep["spread"]
            out["train_throughput"] = {"value": ep["train_timesteps_per_s"], "unit": "timesteps/s"}
            # CARAML's table columns, flat for the results table
            out.update({key: ep[key] for key in CARAML_EPOCH_KEYS})
            out["caraml_tflops"] = ep["tflops"]
            for key, value in (ep.get("caraml_memory_mb") or {}).items():
                if key != "probes":
                    out[f"{key}_mem_mb"] = value
        if self.memory_split:
            out["memory_split"] = self.memory_split
        if self.compile_report:
            out["compile_report"] = self.compile_report
        return out

    def close(self) -> None:
        if self.data is not None:
            self.data.close()
        self.data = None
