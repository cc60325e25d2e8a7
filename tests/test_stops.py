"""Stop signals (SIGTERM, Ctrl-C, ...) as a flag checked between steps, and at once where nothing checks it."""

from __future__ import annotations

import signal

import pytest


def test_the_first_stop_signal_ends_a_block_that_checks_no_flag():
    from caraml.measure.stops import StopRequested

    with StopRequested() as stop:
        signal.raise_signal(signal.SIGTERM)  # between steps: a flag, checked after the step
        assert stop.signal == "SIGTERM"
        with pytest.raises(KeyboardInterrupt):  # a stop already asked for: the block does not start
            with stop.at_once():
                pytest.fail("the block ran after a stop")
    with StopRequested() as stop, pytest.raises(KeyboardInterrupt):
        with stop.at_once():
            signal.raise_signal(signal.SIGINT)
            pytest.fail("the block went on after a stop")
    assert stop.signal == "SIGINT"


def test_a_second_stop_signal_ends_at_once_and_the_first_is_the_one_recorded():
    from caraml.measure.stops import StopRequested

    with StopRequested() as stop, pytest.raises(KeyboardInterrupt):
        signal.raise_signal(signal.SIGTERM)
        signal.raise_signal(signal.SIGINT)
    assert stop.signal == "SIGTERM"
