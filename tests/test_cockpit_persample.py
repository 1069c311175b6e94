"""The closed-form reductions of per-sample gradients against the materialised gradients.

`Outer` never forms the products u_i v_iᵀ of a Linear layer; `Dense` holds them. Both must count
every histogram bin identically, at every gradient scale (few large products, or many), for bin
ranges with and without an edge at 0, with zeros and signs of both kinds in either factor.
"""

import numpy as np
import pytest
import torch

from activis.cockpit.persample import Bins, Dense, Outer

RANGES = [Bins(100, -2.0, 2.0), Bins(7, -1.0, 2.0), Bins(9, -1.3, 0.7), Bins(5, 0.5, 1.0), Bins(4, -3.0, -0.5)]


def factors(seed, scale, signed_v=True, shape=(6, 9, 13)):
    g = torch.Generator().manual_seed(seed)
    B, m, n = shape
    u = torch.randn(B, m, generator=g, dtype=torch.float64) * scale
    v = torch.randn(B, n, generator=g, dtype=torch.float64)
    if not signed_v:
        v = v.relu()  # post-ReLU inputs: many exact zeros, no negatives
    u[0, :3] = 0.0
    v[1] = 0.0
    return u, v


@pytest.mark.parametrize("shape", [(6, 9, 13), (4, 5, 300)])  # rows binned directly, rows searched
@pytest.mark.parametrize("scale", [1e-3, 0.05, 1.0, 40.0])
@pytest.mark.parametrize("signed_v", [True, False])
def test_outer_histograms_equal_the_materialised_ones(scale, signed_v, shape):
    for seed in range(3):
        u, v = factors(seed, scale, signed_v, shape)
        theta = torch.randn(u.shape[1], v.shape[1], generator=torch.Generator().manual_seed(seed),
                            dtype=torch.float64) * 1.5
        outer, dense = Outer(u, v), Dense(u[:, :, None] * v[:, None, :])
        for bins in RANGES:
            got, want = outer.hist1d(bins).numpy(), dense.hist1d(bins).numpy()
            np.testing.assert_array_equal(got, want, err_msg=f"{bins} scale {scale}")
            assert got.sum() == u.numel() * v.shape[1]
        for gb, pb in [(Bins(40, -1.0, 1.0), Bins(50, -2.0, 2.0)), (Bins(9, -0.3, 0.6), Bins(3, -1.0, 1.0))]:
            np.testing.assert_array_equal(outer.hist2d(theta, gb, pb).numpy(), dense.hist2d(theta, gb, pb).numpy())
        # the same with the factors' roles swapped (the longer one is searched)
        np.testing.assert_array_equal(Outer(v, u).hist1d(RANGES[0]).numpy(),
                                      Dense(v[:, :, None] * u[:, None, :]).hist1d(RANGES[0]).numpy())


def test_outer_reductions_equal_the_materialised_ones():
    u, v = factors(0, 0.3)
    other_u, other_v = factors(1, 0.3)
    outer, dense = Outer(u, v), Dense(u[:, :, None] * v[:, None, :])
    other_outer, other_dense = Outer(other_u, other_v), Dense(other_u[:, :, None] * other_v[:, None, :])
    direction = torch.randn(u.shape[1], v.shape[1], dtype=torch.float64)
    for got, want in [(outer.sq_norms(), dense.sq_norms()), (outer.dot(direction), dense.dot(direction)),
                      (outer.dot_mean(), dense.dot_mean()), (outer.sum_sq(), dense.sum_sq()),
                      (outer.dot_mean(of=other_outer), dense.dot_mean(of=other_dense))]:
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    # the Gram route and the direct route of dot_mean agree (B large against m, n forces the direct one)
    wide_u, wide_v = factors(2, 0.3, shape=(40, 3, 4))
    torch.testing.assert_close(Outer(wide_u, wide_v).dot_mean(),
                               Dense(wide_u[:, :, None] * wide_v[:, None, :]).dot_mean())


def test_bins_refuse_nonsense():
    with pytest.raises(ValueError, match="lo < hi"):
        Bins(10, 1.0, 1.0)
    with pytest.raises(ValueError, match="bins >= 1"):
        Bins(0, -1.0, 1.0)
