"""CARAML in Python: benchmarks of AI workloads on accelerators, throughput and energy together.

Importing the package is cheap: torch is imported only where a run needs it.
"""

__version__ = "0.1.0"
