"""Campaigns: suites of parameter sweeps selected by tags (JUBE's model), run locally or under SLURM."""
