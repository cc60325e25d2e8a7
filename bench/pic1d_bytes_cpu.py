"""PIC1D's training step counted on the meta device (no memory, no compute; a CPU, seconds): matmul FLOPs
(torch.utils.flop_counter) and the bytes its eager aten ops read and write (each op's tensor inputs plus outputs;
views free), by op, for each dse_layout. Eager bytes: the compiled step fuses the elementwise ops, not the products.

    PYTHONPATH=src python3 bench/pic1d_bytes_cpu.py [--batch 20 --particles 100000 --width 32 --modes 16 --layers 4]
"""

from __future__ import annotations

import argparse
import collections

VIEWS = {"view", "_unsafe_view", "t", "transpose", "permute", "expand", "detach", "alias", "select", "slice",
         "unsqueeze", "squeeze", "view_as_real", "view_as_complex", "_reshape_alias", "as_strided"}


def count(layout: str, batch: int, particles: int, width: int, modes: int, layers: int) -> dict:
    import torch
    import torch.nn.functional as F
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves
    from torch.utils.flop_counter import FlopCounterMode

    from caraml.workloads.fno.model import FNO

    by_op = collections.Counter()

    class Bytes(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            name = func.overloadpacket.__name__
            if name not in VIEWS:
                by_op[name] += sum(t.numel() * t.element_size() for t in tree_leaves((args, kwargs, out))
                                   if isinstance(t, torch.Tensor))
            return out

    with torch.device("meta"):
        model = FNO(2, 1, width, (modes,), layers, kind="dse", dse_layout=layout)
        x, y = torch.rand(batch, 2, particles), torch.rand(batch, 1, particles)
        opt = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=True)
    flops = FlopCounterMode(display=False)
    with flops, Bytes():
        F.l1_loss(model(x), y).backward()
        opt.step()
    return {"bytes": sum(by_op.values()), "by_op": dict(by_op.most_common()), "flops": flops.get_total_flops(),
            "flops_by_op": {str(k): v for k, v in flops.get_flop_counts()["Global"].items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name, default in (("batch", 20), ("particles", 100_000), ("width", 32), ("modes", 16), ("layers", 4)):
        parser.add_argument(f"--{name}", type=int, default=default)
    a = parser.parse_args()
    rows = {layout: count(layout, a.batch, a.particles, a.width, a.modes, a.layers)
            for layout in ("channels-first", "channels-last")}
    print(f"PIC1D step (batch {a.batch}, {a.particles} particles, width {a.width}, {a.modes} modes, {a.layers} "
          f"layers; fp32, Adam): matmul FLOPs {rows['channels-last']['flops'] / 1e9:.1f} G "
          f"({', '.join(f'{k} {v / 1e9:.1f} G' for k, v in rows['channels-last']['flops_by_op'].items())})")
    ops = sorted({op for r in rows.values() for op in r["by_op"]}, key=lambda op: -rows["channels-first"]["by_op"]
                 .get(op, 0))
    print(f"{'eager aten bytes (GiB)':<24} {'channels-first':>15} {'channels-last':>15}")
    for op in ops:
        first, last = (rows[k]["by_op"].get(op, 0) / 2**30 for k in rows)
        if max(first, last) >= 0.01:
            print(f"{op:<24} {first:15.2f} {last:15.2f}")
    first, last = (rows[k]["bytes"] / 2**30 for k in rows)
    print(f"{'total':<24} {first:15.2f} {last:15.2f}")


if __name__ == "__main__":
    main()
