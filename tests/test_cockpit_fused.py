"""The cockpit's one-pass reductions agree with torch in float64, on every layout and dtype."""

import pytest
import torch

from activis.cockpit.fused import distance, ratio_sum


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
def test_distance_is_the_norm_of_the_difference(dtype):
    g = torch.Generator().manual_seed(0)
    a = torch.randn(300, 70, generator=g).to(dtype)
    b = (a.double() + 1e-3 * torch.randn(300, 70, generator=g, dtype=torch.float64)).to(dtype)
    want = float(torch.dist(a.double(), b.double()))
    assert distance(a, b) == pytest.approx(want, rel=1e-12)
    # a transposed (non-contiguous) pair and a zero distance
    assert distance(a.T, b.T) == pytest.approx(want, rel=1e-12)
    assert distance(a, a.clone()) == 0.0


def test_distance_across_dtypes_falls_back_to_torch():
    a = torch.randn(50)
    assert distance(a, a.double() + 1) == pytest.approx(50 ** 0.5, rel=1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_ratio_sum_in_float64(dtype):
    g = torch.Generator().manual_seed(1)
    num = torch.rand(200, 30, generator=g).to(dtype)
    den = torch.rand(200, 30, generator=g).to(dtype)
    den[:, :10] = 0  # dead units: only epsilon below
    want = float((num.double() / (den.double() + 1e-7)).sum())
    assert ratio_sum(num, den, 1e-7) == pytest.approx(want, rel=1e-12)
    assert ratio_sum(num.T, den.T, 1e-7) == pytest.approx(want, rel=1e-12)
