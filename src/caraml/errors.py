"""The one exception type for bad input: the CLI prints its message as one line and exits 2."""

SHOWN_CHARS = 200  # how much of a user's value an error message quotes


class BadInput(Exception):
    """Input the user can fix: an unknown key, a value of the wrong type, a missing device feature."""


def shown(value, limit: int = SHOWN_CHARS) -> str:
    """A user's value as an error message quotes it: one line, at most `limit` characters (a 100k-character
    value would otherwise be the message)."""
    text = str(value).replace("\r", "\\r").replace("\n", "\\n")
    return text if len(text) <= limit else text[:limit] + "…"
