"""DataLoader workers: started by a fork server, never forked from the benchmark's process, whose gloo and NCCL
threads enter Python at any moment (a worker forked while one of them holds CPython's runtime lock waits for ever in
CPython's after-fork, and its rank for its batches); and the stop signals left to the main process. Every workload's
loaders take their worker options from caraml.kit.loader_workers."""

from __future__ import annotations

import os
import signal
from types import SimpleNamespace

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from caraml.kit.loader_workers import ignore_stop_signals, worker_options


def _from_the_fork_server(loader: DataLoader) -> bool:
    context = loader.multiprocessing_context
    return (loader.num_workers > 0 and context is not None and context.get_start_method() == "forkserver"
            and loader.worker_init_fn is ignore_stop_signals and loader.persistent_workers)


class _WhereAmI(Dataset):
    """Each sample: the worker's parent, whether it ignores SIGINT and SIGHUP, and whether SIGTERM ends it."""

    def __len__(self) -> int:
        return 2

    def __getitem__(self, i):
        ignored = [signal.getsignal(s) == signal.SIG_IGN for s in (signal.SIGINT, signal.SIGHUP)]
        return torch.tensor([os.getppid(), *ignored, signal.getsignal(signal.SIGTERM) == signal.SIG_DFL])


@pytest.mark.subprocess
def test_workers_come_from_a_fork_server_and_leave_ctrl_c_to_the_main_process():
    loader = DataLoader(_WhereAmI(), batch_size=None, **worker_options(1, __name__))
    assert _from_the_fork_server(loader)
    for _ in range(2):  # the same worker, kept between epochs
        rows = [row.tolist() for row in loader]
        assert len(rows) == 2
        for parent, *signals in rows:
            assert parent != os.getpid(), "the worker was forked from this process"
            assert all(signals), signals  # SIGTERM still ends it: multiprocessing ends workers so at exit
    del loader


def test_no_workers_is_the_main_process_loading():
    assert worker_options(0, __name__) == {"num_workers": 0}


def test_fnos_loaders_take_their_workers_from_the_fork_server():
    from caraml.runner import RunSpec, build_bench

    bench = build_bench(RunSpec("fno", {"data": "synthetic-host"}, preset="smoke-RBC2D"), device="cpu")
    try:
        assert bench.data.workers == 1
        assert _from_the_fork_server(bench.data.train_loader) and _from_the_fork_server(bench.data.val_loader)
    finally:
        bench.close()


def test_image_classifications_loaders_take_their_workers_from_the_fork_server():
    from caraml.workloads.image_classification import epochs, synthetic

    assert _from_the_fork_server(synthetic.loader(2, 8, 10, seed=0, workers=2, pin=False))
    cfg = SimpleNamespace(batch_size=2, workers=2)
    data = torch.utils.data.TensorDataset(torch.zeros(4, 1))
    for shuffle in (True, False):
        assert _from_the_fork_server(epochs.loader(data, cfg, SimpleNamespace(world_size=1, rank=0), False, shuffle))

