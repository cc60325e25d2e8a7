"""A small, safe expression language for derived values: `global_batch_size // devices`.

Parsed with `ast` and evaluated node by node over a whitelist (numbers, strings, names of
parameters, tuples, arithmetic, comparisons and `in`, `and`/`or`/`not`, `x if c else y`, and the functions min,
max, int, float, round, abs, str); anything else is refused. No `eval` of file contents. Every value is
kept small (MAX_INT, MAX_LEN), checked before an operation could make a huge one: `x ** 64 ** 64` or
`'a' * 10**9` is one error line, not a hang.
"""

from __future__ import annotations

import ast
import math
import operator
from typing import Any

from caraml.errors import BadInput, shown

_BIN = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
        ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Not: operator.not_}
_CMP = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
        ast.Gt: operator.gt, ast.GtE: operator.ge, ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b}
MAX_CHARS = 1000  # of an expression: a line, not a 50k-term sum that recursion cannot walk
MAX_INT = 10**18
MAX_LEN = 10_000  # characters of a string, items of a tuple


class _Refused(Exception):
    pass


def _round(x, digits=None):
    if digits is not None and not -30 <= digits <= 30:  # round(1, -10**18) computes 10**(10**18)
        raise _Refused("round() takes at most 30 digits")
    return round(x) if digits is None else round(x, digits)


_FUNCS = {"min": min, "max": max, "int": int, "float": float, "round": _round, "abs": abs, "str": str,
          "log2": math.log2}


def _small(value: Any) -> Any:
    """`value`, refused when it is a number beyond ±MAX_INT (or not finite) or a text or tuple beyond MAX_LEN."""
    if isinstance(value, int) and abs(value) > MAX_INT:
        raise _Refused(f"a value beyond ±10**18 ({value.bit_length()} bits)")
    if isinstance(value, complex) or isinstance(value, float) and not math.isfinite(value):
        raise _Refused(f"{value} is not a finite real number")
    if isinstance(value, (str, tuple, list)) and len(value) > MAX_LEN:
        raise _Refused(f"a value longer than {MAX_LEN} (it has {len(value)})")
    if isinstance(value, (tuple, list)) and any(isinstance(v, (tuple, list, dict)) for v in value):
        raise _Refused("a tuple of tuples is not allowed")  # (t,) * 10000 of a 10000-tuple t: 10**8 items as text
    return value


def _check_operands(op: ast.operator, left: Any, right: Any) -> None:
    """Refuse what would make a huge value before making it (the operands themselves are small)."""
    if isinstance(op, ast.Pow) and isinstance(right, (int, float)) and abs(right) > 64:
        raise _Refused("exponent too large")
    if isinstance(op, ast.Mult):
        for seq, n in ((left, right), (right, left)):
            if isinstance(seq, (str, tuple, list)) and isinstance(n, int) and len(seq) * n > MAX_LEN:
                raise _Refused(f"a repeat longer than {MAX_LEN}")
    if isinstance(op, ast.Mod) and isinstance(left, str):  # '%0999999999d' % 1
        raise _Refused("string formatting with % is not allowed")


def evaluate(text: str, names: dict[str, Any], where: str = "expression") -> Any:
    """The value of `text` with `names` as variables; a float that is whole becomes an int."""
    quoted = shown(text)
    if len(str(text)) > MAX_CHARS:
        raise BadInput(f"{where}: '{quoted}' is longer than {MAX_CHARS} characters; split it into several derived "
                       "values")
    try:
        tree = ast.parse(str(text).strip(), mode="eval")
    except (SyntaxError, RecursionError, MemoryError):
        raise BadInput(f"{where}: '{quoted}' is not a valid expression (e.g. global_batch_size // devices)") from None
    try:
        value = _eval(tree.body, names)
    except _Refused as exc:
        raise BadInput(f"{where}: '{quoted}': {exc}") from None
    except NameError as exc:
        raise BadInput(f"{where}: '{quoted}' uses unknown name {exc}; "
                       f"known names: {', '.join(sorted(names))}") from None
    except RecursionError:
        raise BadInput(f"{where}: '{quoted}' nests too deeply; split it into several derived values") from None
    except (ArithmeticError, TypeError, ValueError) as exc:
        raise BadInput(f"{where}: '{quoted}' cannot be computed: {shown(exc)}") from None
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _eval(node: ast.AST, names: dict[str, Any]) -> Any:
    return _small(_value(node, names))


def _value(node: ast.AST, names: dict[str, Any]) -> Any:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, str, bool)):
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in names:
            raise NameError(f"'{shown(node.id, 50)}'")
        return names[node.id]
    if isinstance(node, (ast.Tuple, ast.List)):
        return tuple(_eval(e, names) for e in node.elts)
    if isinstance(node, ast.BinOp) and type(node.op) in _BIN:
        left, right = _eval(node.left, names), _eval(node.right, names)
        _check_operands(node.op, left, right)
        return _BIN[type(node.op)](left, right)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_eval(node.operand, names))
    if isinstance(node, ast.BoolOp):
        values = (_eval(v, names) for v in node.values)
        return all(values) if isinstance(node.op, ast.And) else any(values)
    if isinstance(node, ast.Compare) and all(type(op) in _CMP for op in node.ops):
        left = _eval(node.left, names)
        for op, comp in zip(node.ops, node.comparators):
            right = _eval(comp, names)
            if not _CMP[type(op)](left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.IfExp):
        return _eval(node.body, names) if _eval(node.test, names) else _eval(node.orelse, names)
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCS
            and not node.keywords):
        return _FUNCS[node.func.id](*(_eval(a, names) for a in node.args))
    raise _Refused(f"'{shown(ast.unparse(node), 80)}' is not allowed (only arithmetic, comparisons, if-else, "
                   f"and {', '.join(sorted(_FUNCS))})")
