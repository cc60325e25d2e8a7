"""The one exception type for bad input: the CLI prints its message as one line and exits 2."""


class BadInput(Exception):
    """Input the user can fix: an unknown key, a value of the wrong type, a missing device feature."""
