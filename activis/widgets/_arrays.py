"""Numpy arrays to and from the browser as binary buffers, never as JSON lists of numbers.

Use as a traitlet serializer: ``traitlets.Any(None).tag(sync=True, **array_serialization)``. The
value crosses as ``{"dtype", "shape", "buffer"}`` where ``buffer`` is a memoryview that
ipywidgets sends as a binary frame; ``js/common/arrays.js`` decodes it into a typed array.
"""

from __future__ import annotations

import numpy as np

# dtypes the browser has typed arrays for; int64/float16 are narrowed to these before sending
_SENDABLE = {"float32", "float64", "int8", "uint8", "int16", "uint16", "int32", "uint32"}
_NARROW = {"float16": "float32", "int64": "int32", "uint64": "uint32", "bool": "uint8"}


def array_to_json(value, _widget=None):
    if value is None:
        return None
    arr = np.asarray(value)
    name = _NARROW.get(arr.dtype.name, arr.dtype.name)
    if name not in _SENDABLE:
        raise TypeError(f"cannot send arrays of dtype {arr.dtype} to the browser")
    arr = np.ascontiguousarray(arr, dtype=np.dtype(name).newbyteorder("<"))
    return {"dtype": name, "shape": list(arr.shape), "buffer": memoryview(arr.reshape(-1).view(np.uint8))}


def array_from_json(value, _widget=None):
    if value is None:
        return None
    dtype = np.dtype(value["dtype"]).newbyteorder("<")
    return np.frombuffer(bytes(value["buffer"]), dtype=dtype).reshape(value["shape"])


array_serialization = {"to_json": array_to_json, "from_json": array_from_json}
