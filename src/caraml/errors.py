"""Bad input and what is missing to run: the CLI prints either as one line and exits 2."""

from __future__ import annotations

import re
import sys
from functools import lru_cache

SHOWN_CHARS = 200  # how much of a user's value an error message quotes


class BadInput(Exception):
    """Input the user can fix: an unknown key, a value of the wrong type, a missing device feature."""


# what pip installs for an import name where the two differ: the package, or caraml's extra that pins it
_INSTALLS = {"pynvml": "nvidia-ml-py", "yaml": "pyyaml", "PIL": "pillow", "neuralop": "neuraloperator",
             "liger_kernel": "liger-kernel", "megatron": "'caraml[megatron]'", "torchao": "'caraml[fp8]'",
             "h5py": "'caraml[hdf5]'"}


def missing_package(exc: ModuleNotFoundError) -> str | None:
    """What to install, in one line, where a package this command imports is not installed (a source tree run by a
    bare interpreter, a venv without the extras). None where the package is there but a module of it is not (a
    version that does not match), for the standard library's (where Python >= 3.10 lists them) and caraml's own
    modules: those are no install."""
    top = (exc.name or "").partition(".")[0]
    if not top or exc.name != top or top == "caraml" or top in getattr(sys, "stdlib_module_names", ()):
        return None
    return (f"this needs the Python package {top}, which {sys.executable} cannot import: "
            f"pip install {_INSTALLS.get(top, top)}")


def shown(value, limit: int = SHOWN_CHARS) -> str:
    """A user's value as an error message quotes it: one line, at most `limit` characters (a 100k-character
    value would otherwise be the message)."""
    text = printable(str(value))
    return text if len(text) <= limit else text[:limit] + "…"


# What a terminal acts on instead of showing: C0 controls, DEL, C1 controls (CSI, OSC as one byte), the Unicode
# line and paragraph separators, and the bidirectional overrides that make text read in another order.
_ACTIVE = "\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069"
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


@lru_cache(maxsize=8)
def _active(keep: str) -> re.Pattern:
    return re.compile("[" + _ACTIVE + "]" if not keep else "(?![" + re.escape(keep) + "])[" + _ACTIVE + "]")


def _escape(match: re.Match) -> str:
    char = match.group()
    return _NAMED.get(char) or (f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}")


def printable(text: str, keep: str = "") -> str:
    """`text` with every character a terminal would act on (an escape sequence's ESC, a carriage return, a line
    break, ...) written as its escape (`\\x1b`, `\\r`, `\\n`), so that text from a record or a user reads as text;
    the characters in `keep` (e.g. a line break CSV quotes) stay as they are."""
    return _active(keep).sub(_escape, text)


def did_you_mean(word, candidates) -> str:
    """"did you mean X? " for the closest of `candidates` to a mistyped `word`, or "" when nothing is close:
    the same word in another case; the names that extend it (`smoke` -> `smoke-PIC1D, smoke-RBC2D`); within a
    family of widths (`fp64` among fp32, fp16) a misspelt width's own, else the nearest width; difflib's closest."""
    import difflib

    names = [str(c) for c in candidates]
    text = str(word)
    lower = text.lower()
    close = [n for n in names if n.lower() == lower] or _nearest_width(text, names)
    if not close:
        longer = [n for n in names if n.lower().startswith(lower) and n[len(text):][:1] in "-_."] if text else []
        if len(longer) > 1:
            return f"did you mean one of {shown(', '.join(longer), 200)}? "
        close = longer or difflib.get_close_matches(text, names, n=1, cutoff=0.6) or \
            difflib.get_close_matches(lower, [n.lower() for n in names], n=1, cutoff=0.6)
    if not close:
        return ""
    best = next((n for n in names if n.lower() == close[0].lower()), close[0])
    return f"did you mean {shown(best, 60)}? "


_WIDTH = re.compile(r"([A-Za-z]+)(\d+)")


def _nearest_width(word: str, names: list[str]) -> list[str]:
    """The name of `word`'s family (letters then a width: fp64, bf16, H100) that it misspells (bf61 -> bf16,
    H10 -> H100), else the one of the nearest width (fp64 -> fp32 rather than the closer-spelt fp16)."""
    import difflib

    mine = _WIDTH.fullmatch(word)
    if not mine:
        return []
    widths = [(n, _WIDTH.fullmatch(n)) for n in names]
    family = [(n, m.group(2)) for n, m in widths if m and m.group(1).lower() == mine.group(1).lower()]
    digits = mine.group(2)
    misspelt = [n for n, d in family if sorted(d) == sorted(digits) or d.startswith(digits) or digits.startswith(d)]
    if misspelt:
        return difflib.get_close_matches(word, misspelt, n=1, cutoff=0) or misspelt[:1]
    return [min(family, key=lambda nd: abs(int(nd[1]) - int(digits)))[0]] if family else []
