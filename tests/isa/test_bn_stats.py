"""nisa.bn_stats / nisa.bn_aggr (spec/isa.md §6.21): batch-norm statistics per partition."""

import numpy as np
import pytest

import opennki.isa as nisa2
import opennki.language as nl2
import opennki.legacy.isa as nisa
import opennki.legacy.language as nl
from opennki.errors import ShapeError
from tests.isa.helpers import rand, rejects, run, to_hbm, to_sbuf


def _stats_ref(x):
    cols = []
    for part in (x[:, 0::2], x[:, 1::2]):
        mu = part.mean(1)
        cols += [np.full(len(x), part.shape[1]), mu, ((part - mu[:, None]) ** 2).sum(1)]
    return np.stack(cols, 1)


def test_bn_stats_even_odd_halves(rng):
    x = rand(rng, 128, 4, 75).astype(np.float32)            # 300 elements: odd-length halves need no care

    def kernel(x):
        out = nl.ndarray((128, 6), dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out, nisa.bn_stats(nl.load(x)))
        return out

    np.testing.assert_allclose(run(kernel, x), _stats_ref(x.reshape(128, -1).astype(np.float64)), rtol=1e-5,
                               atol=1e-5)


def test_bn_aggr_over_chunks_gives_mean_and_population_variance(rng):
    x = rand(rng, 96, 1200, low=-3, high=5)

    def kernel(x):
        out = nl.ndarray((96, 2), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.load(x)
        stats = nl.ndarray((96, 18), dtype=nl.float32)
        for c in nl.affine_range(3):
            stats[:, 6 * c:6 * c + 6] = nisa.bn_stats(t[:, 400 * c:400 * c + 400])
        nl.store(out, nisa.bn_aggr(stats))
        return out

    got = run(kernel, x)
    np.testing.assert_allclose(got[:, 0], x.mean(1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[:, 1], x.var(1), rtol=1e-5)


def test_single_element_gives_an_empty_odd_half_and_new_generation(rng):
    x = rand(rng, 16, 1)

    def kernel(x):
        t = to_sbuf(x, nl2.float32)
        r = nl2.ndarray((16, 8), dtype=nl2.float32, buffer=nl2.sbuf)
        nisa2.bn_stats(dst=r[:, 0:6], data=t)
        nisa2.bn_aggr(dst=r[:, 6:8], data=r[:, 0:6])
        return to_hbm(r)

    got = run(kernel, x)
    np.testing.assert_array_equal(got[:, :6], np.stack([np.ones(16), x[:, 0], np.zeros(16)] + [np.zeros(16)] * 3, 1))
    np.testing.assert_array_equal(got[:, 6], x[:, 0])
    np.testing.assert_array_equal(got[:, 7], 0.0)


def _too_long(x):
    nisa.bn_stats(nl.zeros((128, 513), dtype=nl.float32))


def _aggr_not_triples(x):
    nisa.bn_aggr(nl.zeros((128, 7), dtype=nl.float32))


def _stats_dst(x):
    nisa2.bn_stats(dst=nl2.ndarray((128, 4), dtype=nl2.float32, buffer=nl2.sbuf), data=nl.load(x))


@pytest.mark.parametrize("kernel,match", [(_too_long, "at most 512"), (_aggr_not_triples, "triples"),
                                          (_stats_dst, "6 elements")], ids=["bn_stats_fmax", "aggr_triples",
                                                                            "stats_dst"])
def test_bn_rejects(rng, kernel, match):
    rejects(kernel, rand(rng, 128, 16), error=ShapeError, match=match)
