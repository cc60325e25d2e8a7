"""A stop that reaches the compiler too: Ctrl-C goes to the whole foreground process group, so inductor's C++
compiler dies of it and the compile error (its command and every diagnostic, line breaks written as a literal
backslash-n) arrives while the stop is already asked for. The run says it was stopped, in one line; the compiler's
output stays in the record's traceback."""

from __future__ import annotations

import json
import signal

import pytest
from conftest import cli

from caraml.runner import first_line

# What inductor raised when a Ctrl-C killed its compiler (its shape; the text is made up): many lines, with the
# line breaks of the compiler's output as a literal backslash-n.
COMPILER_NOISE = ("CppCompileError: C++ compile error\\n\\nCommand:\\ng++ /tmp/torchinductor/ab/cab.cpp -shared -fPIC "
                  "-O3 -march=native -o /tmp/torchinductor/ab/cab.so\\n\\nOutput:\\ng++: fatal error: Killed signal "
                  "terminated program cc1plus\\ncompilation terminated.\\n" + "\\n".join(["note: in expansion"] * 40))


class InductorError(RuntimeError):
    """Stands for torch._inductor's exception of that name (the runner sees only its type name and message)."""


class _CompilerKilledByTheSameStop:
    """A first step that compiles: the stop reaches this process and the compiler at once; the compile pool's wait
    swallows the interruption and raises the compiler's failure instead."""

    def __init__(self):
        from caraml.contract import BenchInfo

        self.info = BenchInfo(units_per_step=1, unit="things", flops_per_unit=None, flops_convention="not counted",
                              precision="fp32", compiled=True)

    def step(self) -> None:
        try:
            signal.raise_signal(signal.SIGINT)  # Ctrl-C: the stop is asked for (inside the step: at once)
        except KeyboardInterrupt:
            pass
        raise InductorError(COMPILER_NOISE)

    def details(self) -> dict:
        return {}

    def close(self) -> None:
        pass


@pytest.fixture()
def compiling_workload():
    from caraml import workloads
    from caraml.params import Param
    from caraml.workloads import Workload, register

    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    register(Workload(name="fake_compiling", unit="things", params=[Param("batch", int, 1, minimum=1)], presets={},
                      build=lambda params, ctx: _CompilerKilledByTheSameStop(), columns=("system", "throughput")))
    try:
        yield "fake_compiling"
    finally:
        workloads._REGISTERED.pop("fake_compiling")
        for sig, handler in handlers.items():  # `caraml run` catches stop signals from its start
            signal.signal(sig, handler)


def test_first_line_takes_the_line_before_a_real_or_a_literal_line_break():
    assert first_line(InductorError(COMPILER_NOISE)) == "InductorError: CppCompileError: C++ compile error"
    assert first_line(RuntimeError("\n  one\ntwo")) == "RuntimeError: one"
    assert first_line(KeyError("complex64")) == "KeyError: 'complex64'"
    assert first_line(RuntimeError()) == "RuntimeError"
    assert first_line(RuntimeError("x" * 500)).endswith("x…") and len(first_line(RuntimeError("x" * 500))) < 230


def test_a_stop_that_kills_the_compiler_is_said_in_one_line_without_the_compilers_output(compiling_workload,
                                                                                          tmp_path):
    proc = cli("run", compiling_workload, "power=off", "device=cpu", "--system", "CPU", "--results", tmp_path,
               "warmup_steps=2", "measure_steps=2", check=1)
    (said,) = [line for line in proc.stderr.splitlines() if line.startswith("caraml: interrupted:")]
    assert said == ("caraml: interrupted: stopped by SIGINT during warmup "
                    "(InductorError: CppCompileError: C++ compile error)"), said
    assert "\\n" not in proc.stderr and "Command:" not in proc.stderr and "g++" not in proc.stderr
    (path,) = (tmp_path / "runs").glob("*.json")
    saved = json.loads(path.read_text())
    assert saved["status"] == "interrupted" and "cc1plus" in saved["traceback"]  # the whole story stays on record
