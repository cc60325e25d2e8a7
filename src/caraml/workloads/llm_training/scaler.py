"""Megatron's dynamic loss scaler for fp16, with the settings CARAML passes it.

The loss is multiplied by `scale` before backward. An overflow (non-finite gradients) skips the step;
the scale halves only after `hysteresis` overflows since the last growth, never below `min_scale`;
`window` overflow-free steps double it and refill the hysteresis.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class LossScaler:
    scale: float = 4096.0  # --initial-loss-scale
    window: int = 500  # --loss-scale-window
    hysteresis: int = 2  # --hysteresis
    min_scale: float = 1.0  # --min-loss-scale
    growth: float = 2.0
    backoff: float = 0.5
    skipped: int = 0  # steps skipped for overflow
    _good_steps: int = field(default=0, repr=False)
    _hysteresis_left: int = field(default=-1, repr=False)

    def __post_init__(self):
        if self._hysteresis_left < 0:
            self._hysteresis_left = self.hysteresis

    def update(self, overflow: bool) -> None:
        if overflow:
            self.skipped += 1
            self._good_steps = 0
            self._hysteresis_left -= 1
            if self._hysteresis_left <= 0:
                self.scale = max(self.scale * self.backoff, self.min_scale)
            return
        self._good_steps += 1
        if self._good_steps == self.window:
            self._good_steps = 0
            self._hysteresis_left = self.hysteresis
            self.scale *= self.growth

    def state(self) -> dict:
        return {"scale": self.scale, "skipped_steps": self.skipped, "window": self.window,
                "hysteresis": self.hysteresis, "min_scale": self.min_scale}
