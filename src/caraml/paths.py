"""Folders caraml writes into: made and checked up front, so a bad path is one clear line, not a traceback."""

from __future__ import annotations

import os
import re
from pathlib import Path

from caraml.errors import BadInput


def ensure_writable_dir(path: str | os.PathLike, what: str = "results directory", option: str = "--results") -> Path:
    """Create `path` (with parents) and prove a file can be written in it; BadInput naming it otherwise."""
    folder = Path(path)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".write-test-{os.getpid()}"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise BadInput(f"{what} {path} cannot be written: {reason}; pass {option} DIR") from None
    return folder


def safe_name(text) -> str:
    """A file name made from a value read from a record or a state file (a workload, a run id): letters,
    digits and `._-` only, no leading dot, so `x/../../etc` can never leave the folder it is joined to."""
    name = re.sub(r"[^A-Za-z0-9._-]", "_", str(text)).lstrip(".")[:200]
    return name or "_"
