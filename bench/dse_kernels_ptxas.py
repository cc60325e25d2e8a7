"""PIC1D's DSE kernels (dse_backend=triton and triton-fused) compiled ahead of time for a CUDA GPU that need not be
here: Triton's compiler makes the PTX, ptxas (the one Triton brings) reports each kernel's registers, spills and
stack; Triton's metadata its shared memory. Runs on a machine without a GPU. At CARAML's PIC1D sizes by default,
TF32 and IEEE products, each kernel launched as its op launches it (dse_triton.launches()).

    PYTHONPATH=src python3 bench/dse_kernels_ptxas.py --out DIR [--arch 90] [--set FUSED_WARPS=8 ...]
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path


def refuse(line: str):
    """One line, exit 2: what is wrong here and what would be right."""
    print(f"dse_kernels_ptxas: {line}", file=sys.stderr)
    sys.exit(2)


PTXAS_LINE = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")


def ptxas_path() -> str:
    """Triton's own ptxas (the one that compiles its kernels), else one on the PATH."""
    import triton

    bundled = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
    found = str(bundled) if bundled.is_file() else shutil.which("ptxas")
    if not found:
        refuse("no ptxas: neither Triton's own (triton/backends/nvidia/bin) nor one on the PATH")
    return found


def resources(ptx: str, arch: int, ptxas: str) -> dict:
    """ptxas -v's report of one kernel: registers, stack, spill stores and loads (bytes per thread)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kernel.ptx"
        path.write_text(ptx)
        report = subprocess.run([ptxas, f"-arch=sm_{arch}a", "-v", str(path), "-o", str(path.with_suffix(".o"))],
                                capture_output=True, text=True, check=True).stderr
    registers = re.search(r"Used (\d+) registers", report)
    stack, stores, loads = PTXAS_LINE.search(report).groups()
    return {"registers": int(registers.group(1)), "stack_bytes": int(stack), "spill_store_bytes": int(stores),
            "spill_load_bytes": int(loads)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path, help="folder for dse_kernels_ptxas.json")
    parser.add_argument("--arch", type=int, default=90, help="compute capability x 10 (90: H100, H200)")
    parser.add_argument("--modes", type=int, default=16)
    parser.add_argument("--width", type=int, default=32)
    parser.add_argument("--hidden", type=int, default=128, help="the head's hidden width (4 x width in PIC1D)")
    parser.add_argument("--set", action="append", default=[], metavar="CONST=VALUE",
                        help="a dse_triton constant for this compile (one of dse_triton.TUNABLE: BLOCK_P, "
                        "FUSED_WARPS, ...)")
    args = parser.parse_args()

    from caraml.errors import BadInput
    from caraml.workloads.fno import dse_triton

    if why := dse_triton.unavailable(args.modes, args.width):
        refuse(why)
    for item in args.set:
        name, _, value = item.partition("=")
        try:
            dse_triton.set_constant(name, value)
        except BadInput as problem:
            refuse(f"--set {item}: {problem}")
    ptxas, rows = ptxas_path(), []
    for kernel, (block, warps) in dse_triton.launches().items():
        for ieee in (False, True):
            compiled = dse_triton.ahead_of_time(kernel, args.modes, args.width, args.hidden, ieee, args.arch)
            rows.append({"kernel": kernel, "products": "ieee" if ieee else "tf32", "block": block, "warps": warps,
                         "shared_bytes": compiled.metadata.shared,
                         **resources(compiled.asm["ptx"], args.arch, ptxas)})
            row = rows[-1]
            print(f"{kernel:24s} {row['products']:4s} BLOCK={block:<4d} warps={warps}  registers {row['registers']:3d}"
                  f"  spill stores {row['spill_store_bytes']:6d} B  loads {row['spill_load_bytes']:6d} B"
                  f"  stack {row['stack_bytes']:6d} B  shared {row['shared_bytes'] / 1024:6.1f} KiB", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    import triton

    (args.out / "dse_kernels_ptxas.json").write_text(json.dumps(
        {"arch": args.arch, "modes": args.modes, "width": args.width, "hidden": args.hidden, "set": args.set,
         "triton": triton.__version__, "ptxas": subprocess.run([ptxas, "--version"], capture_output=True,
                                                               text=True).stdout.strip().splitlines()[-1],
         "kernels": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
