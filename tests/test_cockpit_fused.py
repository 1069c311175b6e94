"""The cockpit's one-pass reductions agree with torch in float64, on every layout and dtype."""

import pytest
import torch

from activis.cockpit.fused import distance, inner_and_square, parameter_pass, ratio_sum


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


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
def test_parameter_pass_gives_both_distances_and_the_snapshot(dtype):
    g = torch.Generator().manual_seed(2)
    params = [torch.randn(40, 30, generator=g).to(dtype), torch.randn(30, generator=g).to(dtype),
              torch.randn(30, 40, generator=g).to(dtype).T]  # a non-contiguous parameter
    initial = [p + 0.1 for p in params]
    previous = [(p.double() + 1e-3 * torch.randn(p.shape, generator=g, dtype=torch.float64)).to(dtype)
                for p in params]
    snapshot = [torch.empty_like(p) for p in params]
    to_initial, to_previous = parameter_pass(params, initial, previous, snapshot)
    for k, p in enumerate(params):
        assert to_initial[k] == pytest.approx(float(torch.dist(p.double(), initial[k].double())), rel=1e-12)
        assert to_previous[k] == pytest.approx(float(torch.dist(p.double(), previous[k].double())), rel=1e-12)
        assert torch.equal(snapshot[k], p)
    # each part only when asked for; a non-contiguous snapshot buffer is written all the same
    assert parameter_pass(params, None, previous, None) == (None, to_previous)
    assert parameter_pass(params, initial, None, None) == (to_initial, None)
    strided = [torch.empty(p.shape[::-1], dtype=dtype).T for p in params]
    assert parameter_pass(params, None, None, strided) == (None, None)
    assert all(torch.equal(s, p) for s, p in zip(strided, params))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
def test_inner_and_square_over_pieces(dtype):
    g = torch.Generator().manual_seed(4)
    a = [torch.randn(40, 30, generator=g).to(dtype), torch.randn(30, 40, generator=g).to(dtype).T]
    b = [torch.randn(40, 30, generator=g).to(dtype), torch.randn(30, 40, generator=g).to(dtype).T]
    flat_a = torch.cat([x.double().reshape(-1) for x in a])
    flat_b = torch.cat([x.double().reshape(-1) for x in b])
    dot, square = inner_and_square(a, b)
    assert dot == pytest.approx(float(flat_a @ flat_b), rel=1e-12)
    assert square == pytest.approx(float(flat_b @ flat_b), rel=1e-12)
