"""The one check of a folder argument (a run, a store, a dynamics folder), raised as the caller's error class.

A number, None, bytes or empty text is refused by name rather than failing deep in `os` (``""`` would be
the working directory); a path that is a file is refused where a folder is needed.
"""

from __future__ import annotations

import os
import pathlib


def folder_path(value, what: str, error: type[Exception]) -> pathlib.Path:
    """``value`` as a folder's path, or ``error`` naming ``what``: text or a pathlib.Path, not a file."""
    if isinstance(value, bytes) or not isinstance(value, str | os.PathLike) or not os.fspath(value):
        raise error(f"{what} is a folder's path (text or a pathlib.Path), not {type(value).__name__} {value!r}")
    path = pathlib.Path(value)
    if path.is_file():
        raise error(f"{what}={str(path)!r} is a file; {what} is a folder")
    return path
