"""The query language of subsets: a checked parse of a Python-like expression and a small interpreter.

Only comparisons, arithmetic, and/or/not, a few pandas methods and ``score()``/``output()`` exist here,
so an expression read from someone else's store cannot run code.
"""

from __future__ import annotations

import ast
import difflib
import functools
import operator
import re
from collections.abc import Sequence

import numpy as np
import pandas as pd


class SubsetError(ValueError):
    """A subset that cannot be defined or evaluated: bad expression, unknown column, bad indices."""


_COMPARE = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
            ast.Gt: operator.gt, ast.GtE: operator.ge}
_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
           ast.BitAnd: operator.and_, ast.BitOr: operator.or_, ast.BitXor: operator.xor}
_SERIES_METHODS = {"isin", "between", "isna", "notna", "isnull", "notnull", "abs", "round"}
_STR_METHODS = {"contains", "startswith", "endswith", "match", "fullmatch", "len", "lower", "upper", "strip"}
_FUNCTIONS = {"abs", "score", "output"}
_BACKTICK = re.compile(r"`([^`]+)`")


class _Expression:
    """A parsed, checked query expression over the instances table.

    Parsing happens at definition time, so a syntax error or a forbidden construct is reported
    before anything is saved; names are resolved against the columns when evaluated.
    """

    def __init__(self, text: str):
        if not isinstance(text, str) or not text.strip():
            raise SubsetError("A subset expression must be a non-empty string, e.g. \"label == 3\".")
        self.text = text
        self.quoted: dict[str, str] = {}

        def quote(match):
            placeholder = f"_q{len(self.quoted)}_"
            self.quoted[placeholder] = match.group(1)
            return placeholder

        source = _BACKTICK.sub(quote, text.strip())
        try:
            tree = ast.parse(source, mode="eval")
        except SyntaxError as exc:
            raise SubsetError(f"Cannot parse subset expression {text!r}: {exc.msg}"
                              f" (column {exc.offset}).") from None
        self.tree = tree.body
        self._check(self.tree)

    def _check(self, node: ast.AST) -> None:
        allowed = (ast.BoolOp, ast.UnaryOp, ast.BinOp, ast.Compare, ast.Name, ast.Constant, ast.List,
                   ast.Tuple, ast.Call, ast.keyword, ast.Load, ast.boolop, ast.unaryop, ast.operator,
                   ast.cmpop)
        if not isinstance(node, allowed) or isinstance(node, (ast.MatMult, ast.LShift, ast.RShift)):
            raise SubsetError(f"{type(node).__name__} is not allowed in a subset expression ({self.text!r}); "
                              "use comparisons, and/or/not, arithmetic, .isin(), .between(), .str.contains(), "
                              "score(k) or output(k).")
        if isinstance(node, ast.Name) and node.id.startswith("__"):
            raise SubsetError(f"Name {node.id!r} is not allowed in a subset expression.")
        if isinstance(node, ast.Call):
            self._check_call(node)
            for child in [*node.args, *node.keywords]:
                self._check(child)
            return
        for child in ast.iter_child_nodes(node):
            self._check(child)

    def _check_call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Name):
            if func.id not in _FUNCTIONS:
                raise SubsetError(f"Function {func.id!r} is not available in subset expressions; "
                                  f"available: {', '.join(sorted(_FUNCTIONS))}.")
            return
        if isinstance(func, ast.Attribute):
            target = func.value
            if isinstance(target, ast.Attribute) and target.attr == "str" and func.attr in _STR_METHODS:
                self._check(target.value)
                return
            if func.attr in _SERIES_METHODS:
                self._check(target)
                return
            raise SubsetError(f"Method .{func.attr}() is not available in subset expressions; available: "
                              f"{', '.join(sorted(_SERIES_METHODS))} and .str.{{{', '.join(sorted(_STR_METHODS))}}}.")
        raise SubsetError(f"Only named functions and column methods can be called in {self.text!r}.")

    # ----------------------------------------------------------------- evaluation
    def evaluate(self, context: _Context) -> np.ndarray:
        try:
            value = self._condition(self.tree, context)
        except SubsetError:
            raise
        except (TypeError, ValueError, KeyError, IndexError, AttributeError, ZeroDivisionError) as exc:
            raise SubsetError(f"Cannot evaluate subset expression {self.text!r}: {exc}") from None
        if isinstance(value, bool):
            return np.full(context.n, value)
        return value.to_numpy(dtype=bool)

    def _eval(self, node, ctx: _Context):
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, (ast.List, ast.Tuple)):
            return [self._eval(e, ctx) for e in node.elts]
        if isinstance(node, ast.Name):
            return ctx.column(self.quoted.get(node.id, node.id), self.text)
        if isinstance(node, ast.BoolOp):
            values = [self._condition(v, ctx) for v in node.values]
            combine = operator.and_ if isinstance(node.op, ast.And) else operator.or_
            return functools.reduce(combine, values)
        if isinstance(node, ast.UnaryOp):
            if isinstance(node.op, (ast.Not, ast.Invert)):
                value = self._condition(node.operand, ctx)
                return (not value) if isinstance(value, bool) else ~value
            value = self._eval(node.operand, ctx)
            return -value if isinstance(node.op, ast.USub) else +value
        if isinstance(node, ast.BinOp):
            left, right = self._eval(node.left, ctx), self._eval(node.right, ctx)
            _check_arithmetic(node.op, left, right, self.text)
            return _BINARY[type(node.op)](left, right)
        if isinstance(node, ast.Compare):
            result = None
            left = self._eval(node.left, ctx)
            for op, right_node in zip(node.ops, node.comparators):
                right = self._eval(right_node, ctx)
                if isinstance(op, (ast.In, ast.NotIn)):
                    part = _membership(left, right, self.text)
                    part = ~part if isinstance(op, ast.NotIn) else part
                else:
                    part = _COMPARE[type(op)](left, right)
                result = part if result is None else result & part
                left = right
            return result
        if isinstance(node, ast.Call):
            return self._call(node, ctx)
        raise SubsetError(f"Cannot evaluate {ast.unparse(node)!r} in {self.text!r}.")

    def _condition(self, node, ctx):
        return _as_condition(self._eval(node, ctx), ast.unparse(node), self.text)

    def _call(self, node: ast.Call, ctx: _Context):
        args = [self._eval(a, ctx) for a in node.args]
        kwargs = {k.arg: self._eval(k.value, ctx) for k in node.keywords}
        func = node.func
        if isinstance(func, ast.Name):
            if func.id == "abs":
                return abs(*args)
            if len(args) != 1 or kwargs:
                raise SubsetError(f"{func.id}() takes one class (index or name), e.g. {func.id}(3), in {self.text!r}.")
            return ctx.class_column(func.id, args[0], self.text)
        if isinstance(func.value, ast.Attribute) and func.value.attr == "str":
            series = self._eval(func.value.value, ctx)
            return getattr(_series(series, ctx).str, func.attr)(*args, **kwargs)
        series = self._eval(func.value, ctx)
        return getattr(_series(series, ctx), func.attr)(*args, **kwargs)


def _check_arithmetic(op: ast.operator, left, right, text: str) -> None:
    """Refuse constant arithmetic that could exhaust the machine (``9**9**9``, ``'a' * 10**9``)."""
    sized = (str, bytes, list)
    if isinstance(op, ast.Pow) and isinstance(right, (int, float)) and abs(right) > 64:
        raise SubsetError(f"Exponents above 64 are not allowed in subset expressions ({text!r}).")
    if isinstance(op, ast.Mult) and (isinstance(left, sized) or isinstance(right, sized)):
        raise SubsetError(f"Repeating text or lists is not allowed in subset expressions ({text!r}).")


def _series(value, ctx: _Context) -> pd.Series:
    return value if isinstance(value, pd.Series) else pd.Series(value, index=ctx.index)


def _membership(left, right, text):
    if not isinstance(right, list):
        raise SubsetError(f"'in' needs a list of values on its right, e.g. label in [3, 5], in {text!r}.")
    if isinstance(left, pd.Series):
        return left.isin(right)
    return left in right


def _as_condition(value, what: str, text: str):
    """A boolean per instance (or a plain bool); anything else is a clear error."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, pd.Series):
        if value.dtype == bool:
            return value
        if value.dtype == object or str(value.dtype) == "boolean":
            filled = value.astype(object).where(value.notna(), False)
            if filled.map(lambda v: isinstance(v, (bool, np.bool_))).all():
                return filled.astype(bool)
    raise SubsetError(f"{what!r} in {text!r} is not a condition (True/False per instance); "
                      f"compare it, e.g. {what} > 0.")


class _Context:
    """What an expression can see: the instances table and, on demand, scores and outputs."""

    def __init__(self, store):
        self.store = store
        self.table = store.instances
        self.n = len(self.table)
        self.index = self.table.index
        self._class_arrays: dict[str, np.ndarray] = {}

    def column(self, name: str, text: str) -> pd.Series:
        if name == "index":
            return pd.Series(np.arange(self.n), index=self.index)
        if name in self.table.columns:
            return self.table[name]
        columns = ["index", *map(str, self.table.columns)]
        close = difflib.get_close_matches(name, columns, n=3)
        hint = f" Did you mean {' or '.join(map(repr, close))}?" if close else ""
        raise SubsetError(f"Unknown column {name!r} in subset expression {text!r}.{hint} "
                          f"Columns: {', '.join(columns)}; functions: score(class), output(class). "
                          "Quote names with spaces in backticks: `my column`.")

    def class_column(self, kind: str, cls, text: str) -> pd.Series:
        k = _class_index(cls, self.store.class_names, self._n_classes())
        if kind not in self._class_arrays:
            self._class_arrays[kind] = np.asarray(self.store.scores if kind == "score" else self.store.outputs)
        return pd.Series(self._class_arrays[kind][:, k], index=self.index)

    def _n_classes(self) -> int:
        return int(self.store.outputs.shape[1])


def _class_index(cls, class_names: Sequence[str], n_classes: int) -> int:
    """A class given by index or by name, checked."""
    if isinstance(cls, (int, np.integer)) and not isinstance(cls, bool):
        if 0 <= int(cls) < n_classes:
            return int(cls)
        raise SubsetError(f"Class {cls} is out of range: this store has {n_classes} classes (0..{n_classes - 1}).")
    if isinstance(cls, str) and cls in class_names:
        return list(class_names).index(cls)
    names = ", ".join(map(repr, class_names)) if class_names else f"indices 0..{n_classes - 1}"
    raise SubsetError(f"Unknown class {cls!r}; classes: {names}.")
