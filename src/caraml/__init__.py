"""CARAML in Python: benchmarks of AI workloads on accelerators, throughput and energy together.

Importing the package is cheap: torch is imported only where a run needs it.
"""

import os
import sys

__version__ = "0.1.0"
OLDEST_PYTHON = (3, 9)  # the containers' Pythons: NGC and ROCm images have 3.10, CARAML's own ROCm image 3.9


def _too_old(executable: str, version: str, graphcore: bool) -> str:
    """The one line that refuses a Python older than OLDEST_PYTHON, and says what to do instead."""
    oldest = ".".join(map(str, OLDEST_PYTHON))
    if graphcore:  # PopTorch exists for Python 3.8 only (Poplar SDK 3.3 and 3.4, torch 2.0.1): no caraml there
        return (f"caraml needs Python {oldest} or newer; {executable} is Python {version}, the only Python of "
                "Graphcore's Poplar SDK (PopTorch 3.3/3.4, torch 2.0.1), so caraml cannot drive the GC200: run "
                "CARAML's own GC200 benchmark in this image (jube run "
                "image_classification/image_classification_torch_benchmark.xml --tag container GC200)")
    return (f"caraml needs Python {oldest} or newer; {executable} is Python {version}: run caraml with a newer "
            "python3 (the container's own, or e.g. `python3.10 -m caraml`)")


if sys.version_info < OLDEST_PYTHON:  # one line here, not a SyntaxError or ImportError further in
    import importlib.util

    print(_too_old(sys.executable, sys.version.split()[0],
                   bool(os.environ.get("POPLAR_SDK_ENABLED") or importlib.util.find_spec("poptorch"))),
          file=sys.stderr)
    raise SystemExit(2)
