"""JUBE's tag expressions: `H100`, `!H100`, `A100|H100`, `800M+!container`, brackets, old `a,!b` lists.

Precedence as in JUBE (which maps `!`, `+`, `|` onto Python's not, and, or): `!` binds tightest,
then `+`, then `|`. A tiny recursive-descent parser; nothing is evaluated as code.
"""

from __future__ import annotations

import re
from functools import lru_cache

from caraml.errors import BadInput, shown

MAX_CHARS = 1000  # a tag expression is a few tags; recursion walks it
_TOKEN = re.compile(r"\s*(?:([()|+!])|([A-Za-z0-9_.\-]+))")


def _old_format(text: str) -> str:
    """JUBE's old comma form: `a,b,!c` means `!c+(a|b)`."""
    parts = [p.strip() for p in text.split(",") if p.strip()]
    nots = [p for p in parts if p.startswith("!")]
    ors = [p for p in parts if not p.startswith("!")]
    out = "+".join(nots)
    if ors:
        out += ("+" if out else "") + "(" + "|".join(ors) + ")"
    return out


def _tokens(text: str) -> list[str]:
    out, pos = [], 0
    text = text.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise ValueError(f"unexpected '{text[pos:].strip()[:1]}'")
        out.append(m.group(1) or m.group(2))
        pos = m.end()
        while pos < len(text) and text[pos].isspace():
            pos += 1
    return out


@lru_cache(maxsize=None)
def parse(text: str):
    """A tag expression as a tree: ('tag', name) | ('not', t) | ('and', a, b) | ('or', a, b)."""
    source = _old_format(text) if "," in text else text
    try:
        if len(text) > MAX_CHARS:
            raise ValueError(f"it is longer than {MAX_CHARS} characters")
        tokens = _tokens(source)
        if not tokens:
            raise ValueError("it is empty")
        tree, rest = _or(tokens)
        if rest:
            raise ValueError(f"unexpected '{shown(rest[0], 20)}'")
        return tree
    except (ValueError, RecursionError) as exc:  # RecursionError: `!!!...a` or `(((...` nested too deep
        raise BadInput(f"tag expression '{shown(text)}' does not parse: {exc}; write e.g. H100, !H100, A100|H100, "
                       "800M+!container") from None


def _or(tokens):
    left, tokens = _and(tokens)
    while tokens and tokens[0] == "|":
        right, tokens = _and(tokens[1:])
        left = ("or", left, right)
    return left, tokens


def _and(tokens):
    left, tokens = _not(tokens)
    while tokens and tokens[0] == "+":
        right, tokens = _not(tokens[1:])
        left = ("and", left, right)
    return left, tokens


def _not(tokens):
    if not tokens:
        raise ValueError("it ends where a tag was expected")
    if tokens[0] == "!":
        inner, tokens = _not(tokens[1:])
        return ("not", inner), tokens
    if tokens[0] == "(":
        inner, tokens = _or(tokens[1:])
        if not tokens or tokens[0] != ")":
            raise ValueError("a '(' is not closed")
        return inner, tokens[1:]
    if tokens[0] in "|+)":
        raise ValueError(f"unexpected '{shown(tokens[0], 20)}'")
    return ("tag", tokens[0]), tokens[1:]


def matches(text: str | None, active) -> bool:
    """Whether the tag expression holds for the set of active tags (no expression: always)."""
    if text is None:
        return True
    return _eval(parse(str(text)), frozenset(active))


def _eval(tree, active) -> bool:
    kind = tree[0]
    if kind == "tag":
        return tree[1] in active
    if kind == "not":
        return not _eval(tree[1], active)
    if kind == "and":
        return _eval(tree[1], active) and _eval(tree[2], active)
    return _eval(tree[1], active) or _eval(tree[2], active)


def names(text: str) -> set[str]:
    """Every tag an expression mentions."""
    out: set[str] = set()
    stack = [parse(str(text))]
    while stack:
        node = stack.pop()
        if node[0] == "tag":
            out.add(node[1])
        else:
            stack.extend(node[1:])
    return out
