"""A small, safe expression language for derived values: `global_batch_size // devices`.

Parsed with `ast` and evaluated node by node over a whitelist (numbers, strings, names of
parameters, tuples, arithmetic, comparisons and `in`, `and`/`or`/`not`, `x if c else y`, and the functions min,
max, int, float, round, abs, str); anything else is refused. No `eval` of file contents.
"""

from __future__ import annotations

import ast
import math
import operator
from typing import Any

from caraml.errors import BadInput

_BIN = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
        ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Not: operator.not_}
_CMP = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
        ast.Gt: operator.gt, ast.GtE: operator.ge, ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b}
_FUNCS = {"min": min, "max": max, "int": int, "float": float, "round": round, "abs": abs, "str": str,
          "log2": math.log2}


class _Refused(Exception):
    pass


def evaluate(text: str, names: dict[str, Any], where: str = "expression") -> Any:
    """The value of `text` with `names` as variables; a float that is whole becomes an int."""
    try:
        tree = ast.parse(str(text).strip(), mode="eval")
    except SyntaxError:
        raise BadInput(f"{where}: '{text}' is not a valid expression (e.g. global_batch_size // devices)") from None
    try:
        value = _eval(tree.body, names)
    except _Refused as exc:
        raise BadInput(f"{where}: '{text}': {exc}") from None
    except NameError as exc:
        raise BadInput(f"{where}: '{text}' uses unknown name {exc}; known names: {', '.join(sorted(names))}") from None
    except (ArithmeticError, TypeError, ValueError) as exc:
        raise BadInput(f"{where}: '{text}' cannot be computed: {exc}") from None
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _eval(node: ast.AST, names: dict[str, Any]) -> Any:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, str, bool)):
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in names:
            raise NameError(f"'{node.id}'")
        return names[node.id]
    if isinstance(node, (ast.Tuple, ast.List)):
        return tuple(_eval(e, names) for e in node.elts)
    if isinstance(node, ast.BinOp) and type(node.op) in _BIN:
        left, right = _eval(node.left, names), _eval(node.right, names)
        if isinstance(node.op, ast.Pow) and abs(right) > 64:
            raise _Refused("exponent too large")
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
    raise _Refused(f"'{ast.unparse(node)}' is not allowed (only arithmetic, comparisons, if-else, "
                   f"and {', '.join(sorted(_FUNCS))})")
