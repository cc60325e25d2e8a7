"""`caraml data ...`: each module in SUBCOMMANDS adds one subcommand with its `add_parser(group)`.

Modules are imported when the parser is built, so they keep their heavy imports inside their functions. A
workload's own data command lives in its package (caraml.workloads.fno.cli).
"""

from __future__ import annotations

from importlib import import_module

SUBCOMMANDS = ("caraml.data.prepare", "caraml.data.info", "caraml.workloads.fno.cli")


def add_parser(sub) -> None:
    data = sub.add_parser("data", help="prepare and inspect datasets (Megatron .bin/.idx token files, FNO HDF5 files)",
                          description="Prepare and inspect the datasets the workloads read.")
    group = data.add_subparsers(dest="data_command", required=True, parser_class=type(data))
    for name in SUBCOMMANDS:
        import_module(name).add_parser(group)
