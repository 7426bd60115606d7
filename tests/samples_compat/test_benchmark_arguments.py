"""Keyword arguments after a parameter left to its default, as the official flash-attention perf tests call
`bench_func(q, k, v, seed, use_causal_mask=..., sliding_window=..., config=...)`: the benchmark's shape-only
run must bind them by name (regression: they were passed by position, one slot too early)."""

import numpy as np

import opennki.legacy as nki
import opennki.legacy.language as nl


class _Config:
    tile = 64


def _configured(x, seed, bias=None, scale=None, causal=True, window=-1, config=None):
    assert bias is None and scale is None and causal is False and window == 8
    assert isinstance(config, _Config)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.multiply(nl.load(x), float(config.tile)))
    return out


def test_benchmark_binds_keywords_after_a_defaulted_parameter(rng):
    x = rng.standard_normal((128, 64)).astype(np.float32)
    bench = nki.benchmark(warmup=1, iters=2)(_configured)
    bench(x, None, causal=False, window=8, config=_Config())
    assert bench.benchmark_result.nc_latency.get_latency_percentile(50) > 0
    np.testing.assert_allclose(nki.jit(_configured)(x, None, causal=False, window=8, config=_Config()), 64 * x)
