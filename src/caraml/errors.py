"""The one exception type for bad input: the CLI prints its message as one line and exits 2."""

import re
from functools import lru_cache

SHOWN_CHARS = 200  # how much of a user's value an error message quotes


class BadInput(Exception):
    """Input the user can fix: an unknown key, a value of the wrong type, a missing device feature."""


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
    """"did you mean X? " for the closest of `candidates` to a mistyped `word` (the same word in another case
    first, then difflib's closest match), or "" when nothing is close."""
    import difflib

    names = [str(c) for c in candidates]
    text = str(word)
    same = [n for n in names if n.lower() == text.lower()]
    close = same or difflib.get_close_matches(text, names, n=1, cutoff=0.6) or \
        difflib.get_close_matches(text.lower(), [n.lower() for n in names], n=1, cutoff=0.6)
    if not close:
        return ""
    best = next((n for n in names if n.lower() == close[0].lower()), close[0])
    return f"did you mean {shown(best, 60)}? "
