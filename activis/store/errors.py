"""The store's error classes, in one place so that every module of the package raises the same ones.

`StoreError` is the store's one error class; `StoreFullError` is an `OSError` because a full disk
is the system's failure, not the store's, and says so with the errno a caller may test.
"""

from __future__ import annotations


class StoreError(ValueError):
    """A store that cannot be read or written as asked: corrupt, truncated, foreign, too new, or bad input.

    Where a builtin class was the natural one it is also that class: `StoreExistsError` is a
    `FileExistsError`, `UnknownColumnError` a `KeyError`.
    """


class StoreExistsError(StoreError, FileExistsError):
    """The target of a new store is taken (a store, a file, or a directory with other files in it)."""


class UnknownColumnError(StoreError, KeyError):
    """A per-instance column that is not in the store; the message lists the columns there are."""

    def __str__(self) -> str:  # KeyError quotes its message; keep it readable
        return str(self.args[0]) if self.args else ""


class StoreFullError(OSError):
    """The disk (or a file-size limit) ran out while writing; committed batches are intact."""


class StoreWarning(UserWarning):
    """Something a store keeps differently from how it was given (a metadata column renamed)."""
