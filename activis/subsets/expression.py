"""The query language of subsets: a checked parse of a Python-like expression and a small interpreter.

Only comparisons, arithmetic, and/or/not, a few pandas methods and ``score()``/``output()`` exist here,
so an expression read from someone else's store cannot run code. Nor can it hang or crash the
kernel: its length, operation count and nesting depth are bounded before it is evaluated, constant
arithmetic may not grow integers past 4096 bits (``9 ** 64 ** ...``), regular expressions are
checked by `patterns`, and comparing a column of numbers with text is an error rather than an
empty subset.
"""

from __future__ import annotations

import ast
import difflib
import functools
import inspect
import operator
import re
from collections.abc import Sequence

import numpy as np
import pandas as pd

from .errors import SubsetError
from .patterns import check_pattern_cost, pattern_shape

MAX_CHARS = 100_000  # a list of 10,000 indices fits; a 20,000-term "or" does not
MAX_OPERATIONS = 1_000  # nodes other than constants: each costs a pass over a column
MAX_DEPTH = 64
MAX_INT_BITS = 4096
_REGEX_METHODS = {"contains", "match", "fullmatch"}

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

        prefix = "_q"
        while prefix in text:  # a placeholder must not be a name the expression already uses
            prefix += "q"

        def quote(match):
            placeholder = f"{prefix}{len(self.quoted)}_"
            self.quoted[placeholder] = match.group(1)
            return placeholder

        if len(text) > MAX_CHARS:
            raise SubsetError(f"Subset expression {_clip(text)!r} is too long: {len(text):,} characters, at most "
                              f"{MAX_CHARS:,}. For many instances use indices= or mask= instead.")
        source = _BACKTICK.sub(quote, text.strip())
        try:
            tree = ast.parse(source, mode="eval")
        except SyntaxError as exc:
            raise SubsetError(f"Cannot parse subset expression {_clip(text)!r}: {exc.msg}"
                              f" (column {exc.offset}).") from None
        except (RecursionError, MemoryError):
            raise SubsetError(f"Subset expression {_clip(text)!r} is nested too deeply to parse "
                              f"(at most {MAX_DEPTH} levels).") from None
        self.tree = tree.body
        _check_size(self.tree, text)
        self._check(self.tree)
        _fold_constants(self.tree, text)

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
                pattern = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "pat"), None)
                literal = any(k.arg == "regex" and isinstance(k.value, ast.Constant) and k.value.value is False
                              for k in node.keywords)
                if (func.attr in _REGEX_METHODS and not literal and isinstance(pattern, ast.Constant)
                        and isinstance(pattern.value, str)):
                    pattern_shape(pattern.value)  # refused on any data: say so before anything is saved
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
        except (TypeError, ValueError, KeyError, IndexError, AttributeError, ArithmeticError) as exc:
            raise SubsetError(f"Cannot evaluate subset expression {_clip(self.text)!r}: {exc}") from None
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
            return _negate(node.op, self._eval(node.operand, ctx))
        if isinstance(node, ast.BinOp):
            return _arithmetic(node.op, self._eval(node.left, ctx), self._eval(node.right, ctx), self.text)
        if isinstance(node, ast.Compare):
            result = None
            left = self._eval(node.left, ctx)
            for op, right_node in zip(node.ops, node.comparators):
                right = self._eval(right_node, ctx)
                if isinstance(op, (ast.In, ast.NotIn)):
                    part = _membership(left, right, self.text)
                    part = ~part if isinstance(op, ast.NotIn) else part
                else:
                    _check_comparable(left, right, self.text)
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
            series = _series(self._eval(func.value.value, ctx), ctx)
            method = getattr(series.str, func.attr)
            if func.attr in _REGEX_METHODS:
                _check_regex_call(method, args, kwargs, series, ast.unparse(func.value.value))
            return method(*args, **kwargs)
        series = _series(self._eval(func.value, ctx), ctx)
        if func.attr == "isin" and args:
            _check_comparable(series, args[0], self.text)
        return getattr(series, func.attr)(*args, **kwargs)


def _clip(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def _check_size(tree: ast.AST, text: str) -> None:
    """Bound the work before any recursion: nesting depth and operation count, iteratively."""
    operations = 0
    stack = [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise SubsetError(f"Subset expression {_clip(text)!r} is nested too deeply (at most {MAX_DEPTH} levels).")
        if not isinstance(node, (ast.Constant, ast.expr_context, ast.boolop, ast.operator, ast.unaryop, ast.cmpop)):
            operations += 1
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))
    if operations > MAX_OPERATIONS:
        raise SubsetError(f"Subset expression {_clip(text)!r} is too long: {operations:,} operations; at most "
                          f"{MAX_OPERATIONS:,}. Use 'x in [...]' or .isin() for many values, or indices=.")


_NOT_CONSTANT = object()


def _fold_constants(node: ast.AST, text: str):
    """The value of a constant sub-expression (checked like at evaluation), else _NOT_CONSTANT.

    Run at definition time, so ``age > (9 ** 64) ** 64 ** ...`` is refused before it is saved, and
    when a store's saved subsets are read.
    """
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.BinOp):
        left, right = _fold_constants(node.left, text), _fold_constants(node.right, text)
        if left is _NOT_CONSTANT or right is _NOT_CONSTANT:
            return _NOT_CONSTANT
        try:
            return _arithmetic(node.op, left, right, text)
        except SubsetError:
            raise
        except (TypeError, ValueError, ArithmeticError):
            return _NOT_CONSTANT  # reported, with its cause, when evaluated
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _fold_constants(node.operand, text)
        return _NOT_CONSTANT if value is _NOT_CONSTANT else _negate(node.op, value)
    for child in ast.iter_child_nodes(node):
        _fold_constants(child, text)
    return _NOT_CONSTANT


def _negate(op: ast.unaryop, value):
    return -value if isinstance(op, ast.USub) else +value


def _arithmetic(op: ast.operator, left, right, text: str):
    """``left op right``, refusing what could exhaust the machine (``9**9**9``, ``'a' * 10**9``)."""
    sized = (str, bytes, list)
    if isinstance(op, ast.Pow) and isinstance(right, (int, float)) and abs(right) > 64:
        raise SubsetError(f"Exponents above 64 are not allowed in subset expressions ({_clip(text)!r}).")
    if isinstance(op, ast.Mult) and (isinstance(left, sized) or isinstance(right, sized)):
        raise SubsetError(f"Repeating text or lists is not allowed in subset expressions ({_clip(text)!r}).")
    for value in (left, right):
        if isinstance(value, int) and value.bit_length() > MAX_INT_BITS:
            raise SubsetError(f"A number in subset expression {_clip(text)!r} is too large: "
                              f"integers may have at most {MAX_INT_BITS} bits.")
    result = _BINARY[type(op)](left, right)
    if isinstance(result, int) and result.bit_length() > MAX_INT_BITS:
        raise SubsetError(f"A number in subset expression {_clip(text)!r} is too large: "
                          f"integers may have at most {MAX_INT_BITS} bits.")
    return result


def _kind(value) -> str | None:
    """'numbers' or 'text' for a column or constant whose values are all of one of those; else None."""
    if isinstance(value, pd.Series):
        dtype = value.dtype
        if isinstance(dtype, pd.CategoricalDtype):
            return _kind(pd.Series(dtype.categories))
        if pd.api.types.is_bool_dtype(dtype) or pd.api.types.is_numeric_dtype(dtype):
            return "numbers"
        inferred = pd.api.types.infer_dtype(value, skipna=True)
        return {"string": "text", "integer": "numbers", "floating": "numbers", "boolean": "numbers",
                "mixed-integer-float": "numbers", "decimal": "numbers"}.get(inferred)
    if isinstance(value, (bool, int, float, np.number, np.bool_)):
        return "numbers"
    return "text" if isinstance(value, str) else None


def _describe_operand(value) -> str:
    if isinstance(value, pd.Series):
        return f"{value.name!r} holds {_kind(value)}" if value.name is not None else f"the values hold {_kind(value)}"
    return f"{value!r} is {'text' if isinstance(value, str) else 'a number'}"


def _check_comparable(left, right, text: str) -> None:
    """Numbers compared with text match nothing in pandas: an error here, as the user surely erred."""
    rights = right if isinstance(right, list) else [right]
    for other in rights:
        kinds = {_kind(left), _kind(other)}
        if kinds == {"numbers", "text"}:
            raise SubsetError(f"Cannot compare numbers with text in subset expression {_clip(text)!r}: "
                              f"{_describe_operand(left)}, {_describe_operand(other)}. Compare numbers with "
                              "numbers (age > 30) and text with text (topic == 'sports').")


def _check_regex_call(method, args: list, kwargs: dict, strings: pd.Series, column: str) -> None:
    """Bound a user regular expression's backtracking on this column before pandas runs it."""
    try:
        bound = inspect.signature(method).bind(*args, **kwargs)
    except TypeError as exc:
        raise SubsetError(f".str.{method.__name__}(): {exc}") from None
    bound.apply_defaults()
    given = bound.arguments
    if given.get("regex", True) is False:
        return
    flags = given.get("flags") if isinstance(given.get("flags"), int) else 0
    flags |= re.IGNORECASE if given.get("case") is False else 0
    check_pattern_cost(given.get("pat"), flags, strings, column)


def _series(value, ctx: _Context) -> pd.Series:
    return value if isinstance(value, pd.Series) else pd.Series(value, index=ctx.index)


def _membership(left, right, text):
    if not isinstance(right, list):
        raise SubsetError(f"'in' needs a list of values on its right, e.g. label in [3, 5], in {_clip(text)!r}.")
    _check_comparable(left, right, text)
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
            return pd.Series(np.arange(self.n), index=self.index, name="index")
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
        return pd.Series(self._class_arrays[kind][:, k], index=self.index, name=f"{kind}({cls!r})")

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
