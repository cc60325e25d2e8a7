"""`caraml data`: prepare the data sets the workloads read (each workload's command in a module of its own)."""
