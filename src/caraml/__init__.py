"""CARAML in Python: benchmarks of AI workloads on accelerators, throughput and energy together.

Importing the package is cheap: torch is imported only where a run needs it.
"""

import sys

__version__ = "0.1.0"
OLDEST_PYTHON = (3, 9)  # the containers' Pythons: NGC and ROCm images have 3.10, CARAML's own ROCm image 3.9

if sys.version_info < OLDEST_PYTHON:  # one line here, not a SyntaxError or ImportError further in
    print(f"caraml needs Python {'.'.join(map(str, OLDEST_PYTHON))} or newer; {sys.executable} is Python "
          f"{sys.version.split()[0]}: run caraml with a newer python3 (e.g. the container's, or "
          "`python3.10 -m caraml`)", file=sys.stderr)
    raise SystemExit(2)
