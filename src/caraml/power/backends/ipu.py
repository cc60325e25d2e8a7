"""Graphcore IPUs through gcipuinfo (shipped with the Poplar SDK): board power per IPU, integrated.

gcipuinfo reports power as text like "123.45W", or "N/A" for an IPU whose board power is reported on
its partner IPU (two IPUs share one C600/M2000 board sensor); such IPUs are marked, not read as 0 W.
"""

from __future__ import annotations

from caraml.power.backends import Backend, Device, Unavailable


def watts(text) -> float | None:
    """'123.45W' -> 123.45; 'N/A' or anything else -> None."""
    text = str(text).strip()
    if text.upper().endswith("W"):
        text = text[:-1]
    try:
        return float(text)
    except ValueError:
        return None


class Ipu(Backend):
    name = "ipu"

    def __init__(self, root: str):
        self.info_ = None
        self.keys: list[str | None] = []

    def open(self) -> list[Device]:
        try:
            import gcipuinfo
        except ImportError:
            raise Unavailable("gcipuinfo (Graphcore Poplar SDK) is not importable") from None
        self.gc = gcipuinfo
        self.info_ = gcipuinfo.gcipuinfo()
        found = self.info_.getDevices()
        if not found:
            raise Unavailable("gcipuinfo sees no IPU")
        powers = self.info_.getNamedAttributeForAll(gcipuinfo.IpuPower)
        devices = []
        for i, attrs in enumerate(found):
            attrs = attrs if isinstance(attrs, dict) else {}
            serial = attrs.get("serial number") or attrs.get("board serial number") or f"ipu-{i}"
            uuid = f"{serial}:{attrs.get('id', i)}"
            has_power = i < len(powers) and watts(powers[i]) is not None
            key = f"ipu:{uuid}"
            self.keys.append(key if has_power else None)
            devices.append(Device(key=key, backend=self.name, name=f"Graphcore IPU {attrs.get('id', i)}", uuid=uuid,
                                  scope="IPU board power as gcipuinfo reports it", kind="accelerator", counter=False,
                                  power=has_power,
                                  note="" if has_power else ("no power value of its own "
                                                             "(board sensor on its partner IPU)")))
        return devices

    def read(self):
        powers = self.info_.getNamedAttributeForAll(self.gc.IpuPower)
        return {key: (watts(powers[i]), None) for i, key in enumerate(self.keys) if key}


def make(root: str) -> Ipu:
    return Ipu(root)
