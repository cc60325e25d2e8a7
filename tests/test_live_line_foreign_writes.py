"""Writes that are not the live line's own (torch's warnings, the heartbeat thread's lines) while a progress line is
live on a terminal: a warning comes out above the line, whole, and the line is drawn again under it; two writers
never cut each other's lines."""

from __future__ import annotations

import io
import re
import threading
import warnings

from caraml.measure.log import LiveLog


class Terminal(io.StringIO):
    """A stream that says it is a terminal; `screen()` is what a terminal would show after the writes."""

    def isatty(self) -> bool:
        return True

    def screen(self) -> list[str]:
        lines = [""]
        for token in re.split(r"(\r\x1b\[2K|\n|\x1b\[\?25[lh])", self.getvalue()):
            if token == "\r\x1b[2K":  # back to the line's start, the line erased (rich's redraw)
                lines[-1] = ""
            elif token == "\n":
                lines.append("")
            elif not token.startswith("\x1b[?25"):  # the cursor hidden or shown: nothing on the screen
                lines[-1] += token
        return [line for line in lines if line]


def test_a_warning_while_the_progress_line_is_live_comes_above_it():
    out = Terminal()
    log = LiveLog(stream=out)
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        before = warnings.showwarning
        log.progress("measuring step 1/10")
        warnings.warn("TensorFloat32 tensor cores are available but not enabled", UserWarning, stacklevel=1)
        log.progress("measuring step 2/10")
        log.close()
        assert warnings.showwarning is before  # handed back with the live line
    *warning, progress = out.screen()  # the warning's lines (its source line too), then the live line alone
    assert warning[0].endswith("UserWarning: TensorFloat32 tensor cores are available but not enabled"), warning
    assert not any("caraml:" in line for line in warning), warning
    assert progress == "caraml: measuring step 2/10"


def test_a_warning_for_a_file_of_its_own_goes_there_and_none_is_routed_without_a_live_line():
    out, elsewhere = Terminal(), io.StringIO()
    log = LiveLog(stream=out)
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        before = warnings.showwarning
        log.say("build: done")  # a plain line: no live line, warnings left as they are
        assert warnings.showwarning is before
        log.progress("measuring step 1/10")
        warnings.showwarning(UserWarning("to its own file"), UserWarning, "lib.py", 7, file=elsewhere)
        log.close()
    assert elsewhere.getvalue() == "lib.py:7: UserWarning: to its own file\n"
    assert "to its own file" not in out.getvalue()


class _Interleaving(io.StringIO):
    """A stream whose first write lets another thread write before it returns, as far as that thread can: a
    second writer that takes no lock puts its line between the first line and its line break."""

    def __init__(self):
        super().__init__()
        self.log: LiveLog | None = None
        self.other: threading.Thread | None = None

    def write(self, s: str) -> int:
        n = super().write(s)
        if self.other is None:
            self.other = threading.Thread(target=self.log.say, args=("build: still running after 5.0 s",))
            self.other.start()
            self.other.join(0.5)  # with the log's lock the other writer waits until this line is whole
        return n


def test_two_writers_never_cut_each_others_lines():
    stream = _Interleaving()
    stream.log = log = LiveLog(stream=stream)
    log.say("warm-up: 2 steps")
    stream.other.join(5)
    assert stream.getvalue().splitlines() == ["caraml: warm-up: 2 steps", "caraml: build: still running after 5.0 s"]
