"""The process's console streams, made so that output which cannot be written never ends the work it describes.

A write to stderr (or to the stdout of a command whose work is saved elsewhere: a run, a sweep) that fails - a
full disk under a log file, a reader that left the pipe (`| head`) - drops that stream: what follows is not
written, and its descriptor is pointed at /dev/null, so that neither the buffered rest, nor a library writing to
the descriptor, nor the interpreter's last flush fails again. The work goes on and its exit code is its own.
"""

from __future__ import annotations

import errno
import os
import sys


class Forgiving:
    """A text stream whose failed writes drop it instead of raising (see the module's doc); the rest of the
    stream's interface (isatty, fileno, encoding, ...) is the wrapped stream's."""

    def __init__(self, stream, name: str, warn=None):
        self._stream = stream
        self._name = name
        self._warn = warn  # where to say that the stream was dropped (not when its reader left): a stream or None
        self.lost: OSError | None = None

    def write(self, text: str) -> int:
        if self.lost is None:
            try:
                return self._stream.write(text)
            except OSError as exc:
                self._drop(exc)
        return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()  # once dropped: the buffered rest goes to /dev/null
        except OSError as exc:
            if self.lost is None:
                self._drop(exc)

    def _drop(self, exc: OSError) -> None:
        self.lost = exc
        try:
            null = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(null, self._stream.fileno())
            finally:
                os.close(null)
            self._stream.flush()
        except (OSError, ValueError, AttributeError):  # no descriptor of its own (a test's capture)
            pass
        if self._warn is not None and exc.errno != errno.EPIPE:  # a reader that left needs no explanation
            print(f"caraml: warning: {self._name} cannot be written ({exc.strerror or exc}); the rest of it is "
                  "dropped; records are saved as usual", file=self._warn, flush=True)

    def __getattr__(self, name):
        return getattr(self._stream, name)


def forgive(stdout: bool = False) -> None:
    """From now on a failed write to this process's stderr (and to its stdout, when `stdout`) drops the stream
    instead of ending the process. Streams replaced by someone else (a test's capture) are left as they are."""
    if sys.stderr is sys.__stderr__ and sys.stderr is not None:
        sys.stderr = Forgiving(sys.stderr, "stderr")
    if stdout and sys.stdout is sys.__stdout__ and sys.stdout is not None:
        sys.stdout = Forgiving(sys.stdout, "stdout", warn=sys.stderr)
