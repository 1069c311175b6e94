"""The shown layer's activations, sent once to the page so that a brush's matrix row is drawn there at once.

A kernel round trip alone costs about 70 ms in JupyterLab, so a brushed row that waits for the kernel
cannot be drawn within 100 ms. The matrix therefore holds the shown layer (at the shown checkpoint) in
the page, in its stored dtype (float16 crosses as its bits and is widened by a table there; float32 as
is), and computes the brushed row itself (``js/matrix/local_rows.js``, the saved page's code); the
kernel's row follows and replaces it. Only layers up to `PAGE_LAYER_BYTES` travel: above that the row
waits for the kernel, and the view says so (``data-page-rows="off"``). The layer carries its checkpoint
(``page_step``): the page moves the checkpoint before the kernel drops the old one's layer, and in between
a brush's row waits for the kernel rather than be computed from another checkpoint's activations.
"""

from __future__ import annotations

import numpy as np

from ._base import after_first_frame

PAGE_LAYER_BYTES = 32 * 2**20
_PAGE_DTYPES = {"float16": np.uint16, "float32": np.float32}  # stored dtype -> what crosses (its bits)


def page_layer(store, layer: str, budget: int = PAGE_LAYER_BYTES) -> tuple[np.ndarray | None, str]:
    """The layer as it crosses to the page and its stored dtype; (None, dtype) when it is too large
    or stored in a dtype the page does not widen."""
    activations = store.activations(layer)
    dtype = np.dtype(activations.dtype).name
    if dtype not in _PAGE_DTYPES or activations.nbytes > budget:
        return None, dtype
    return np.ascontiguousarray(activations).view(_PAGE_DTYPES[dtype]), dtype


class PageLayer:
    """Keeps a matrix's ``page_activations`` in step with its layer and store: cleared at once when they
    change (the page never computes a row from another layer's values), resent after the frame that
    shows the new values, and only while a shared selection can brush the matrix."""

    def __init__(self, matrix, budget: int = PAGE_LAYER_BYTES):
        self._matrix = matrix
        self.budget = budget
        self._sent = None  # (layer, store) the page holds

    def refresh(self) -> None:
        matrix = self._matrix
        wanted = (matrix.layer, matrix.store) if matrix.shared_selection is not None else None
        if wanted == self._sent:
            return
        if self._sent is not None:
            with matrix.hold_sync():
                matrix.page_activations, matrix.page_dtype, matrix.page_step = None, "", -1
            self._sent = None
        if wanted is not None:
            after_first_frame(lambda: self._send(wanted))

    def _send(self, wanted) -> None:
        matrix = self._matrix
        if wanted != (matrix.layer, matrix.store) or matrix.shared_selection is None or wanted == self._sent:
            return  # moved on (or closed) before the frame was out: the newer request sends
        values, dtype = page_layer(matrix.store, matrix.layer, self.budget)
        self._sent = wanted
        with matrix.hold_sync():
            matrix.page_activations, matrix.page_dtype = values, dtype  # a dtype without values: too large
            matrix.page_step = matrix.store.step
