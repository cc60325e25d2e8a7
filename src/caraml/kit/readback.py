"""A device scalar read on the host without waiting for the device: for the live line's loss.

`Readback.request(t)` queues a copy of the scalar `t` into pinned host memory and records an event after it;
`Readback.latest()` gives the value of the newest request whose event has completed (a non-blocking query), else
the value it gave before. So a line shows the loss of a step that has finished - usually the one a line before -
and the measured window gets no device synchronisation. The copy is queued on the stream that computed `t`, so it
reads the value that step left, even where a later step reuses the tensor's memory (CUDA graphs). On the CPU the
value is at hand: `latest()` is the last requested one.
"""

from __future__ import annotations


class Readback:
    """The newest completed host copy of a device scalar (see the module's doc)."""

    def __init__(self):
        self._pending: list = []  # (event, pinned buffer), oldest first
        self._value: float | None = None

    def request(self, tensor) -> None:
        """Queue a copy of the scalar `tensor` (a no-op for None); never waits for the device."""
        if tensor is None:
            return
        import torch

        value = tensor.detach()
        if value.device.type != "cuda":
            self._value = float(value.float().reshape(-1)[0])
            return
        buffer = torch.empty((), dtype=value.dtype, pin_memory=True)
        buffer.copy_(value.reshape(()), non_blocking=True)
        event = torch.cuda.Event()
        event.record()
        self._pending.append((event, buffer))
        del self._pending[:-4]  # a device far behind the host: only the newest few copies are worth reading

    def latest(self) -> float | None:
        """The value of the newest request that has completed (None before any); a non-blocking query."""
        done = None
        for i, (event, _) in enumerate(self._pending):
            if event.query():
                done = i
        if done is not None:
            self._value = float(self._pending[done][1].float())
            del self._pending[:done + 1]
        return self._value
