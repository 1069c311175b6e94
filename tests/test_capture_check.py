"""Capture's one compiled pass over float32 rows counts what the stored float16 values hold, at the edges of
float16's range: the stored values are read again only when some value may not fit."""

import warnings

import numpy as np
import torch
from torch import nn

from activis.capturing import NonFiniteWarning, capture


def test_values_at_the_edge_of_float16_are_counted_as_stored(tmp_path):
    # 65510 rounds to float16's largest (65504): stored, finite, not counted; 65520 rounds to Inf: saturated and
    # counted; 3e-5 is below float16's smallest normal: counted as underflow; 1e-3 and 0 are plain
    values = torch.tensor([[65510.0, 1e-3], [65520.0, 0.0], [-65510.0, 3e-5], [1.0, -2.0]])
    model = nn.Sequential(nn.Identity(), nn.Linear(2, 2))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NonFiniteWarning)
        store = capture(model, values, tmp_path / "s", layers=["_0"], progress=False, keep_inputs=False)
        wide = capture(model, values, tmp_path / "w", layers=["_0"], progress=False, keep_inputs=False,
                       dtype="float32")
    stored = store.activations("_0")
    assert stored[0, 0] == 65504 and stored[1, 0] == 65504 and stored[2, 0] == -65504
    assert store.nonfinite.loc["_0"].to_dict() == {"nan": 0, "inf": 0, "overflow": 1, "underflow": 1}
    assert list(store.instances["nonfinite"]) == [0, 1, 0, 0]
    np.testing.assert_array_equal(wide.activations("_0"), values.numpy())
    assert wide.nonfinite.loc["_0"].to_dict() == {"nan": 0, "inf": 0, "overflow": 0, "underflow": 0}
