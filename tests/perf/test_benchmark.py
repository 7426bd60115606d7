"""benchmark: NKI's API (decorator and wrapper forms, NCLatency, console block), answered by the cost model."""

import numpy as np
import pytest

import opennki
import opennki.legacy as nki
from opennki.perf.estimate import estimate
from opennki.perf import PERCENTILES, SERVICES, NCLatency, estimate_call, run_benchmark
from opennki.sim import ShapeSpec
from tests.cost import kernels as K


@pytest.fixture
def a(rng):
    return rng.standard_normal((512, 1024)).astype(np.float32)


def test_benchmark_sets_nc_latency_in_microseconds(a, capsys):
    bench = nki.benchmark(warmup=2, iters=10)(K.scale_fresh)
    out = bench(a)
    assert out.shape == a.shape                       # outputs exist; their contents are undefined
    lat = bench.benchmark_result.nc_latency
    expected_us = estimate(K.scale_fresh, (a,)).latency_ns / 1000
    assert lat.get_latency_percentile(0) == pytest.approx(expected_us)
    values = [lat.get_latency_percentile(p) for p in PERCENTILES]
    assert values == sorted(values) and values[-1] <= 1.01 * values[0]
    printed = capsys.readouterr().out.splitlines()
    assert printed[:2] == ["Latency results are:", "NCLatency:"]
    assert [line.split(" = ")[0] for line in printed[2:10]] == [f"p{p}" for p in PERCENTILES]
    assert all(line.endswith("us") for line in printed[2:10])


def test_unknown_percentile_is_refused():
    lat = NCLatency([5.0, 6.0, 7.0])
    with pytest.raises(ValueError, match="percentile 75"):
        lat.get_latency_percentile(75)


def test_str_is_a_five_number_summary():
    lat = NCLatency([float(x) for x in range(1, 101)])
    text = str(lat)
    for key in ("min=1.00us", "p25=25.00us", "p50=50.00us", "p75=75.00us", "max=100us"):
        assert key in text


def test_too_few_iterations(a):
    one = nki.benchmark(iters=1)(K.scale_fresh)
    one(a)
    lat = one.benchmark_result.nc_latency
    assert len({lat.get_latency_percentile(p) for p in PERCENTILES}) == 1    # every percentile is the one run
    for bad in ({"iters": 0}, {"iters": -3}, {"iters": 2.5}, {"warmup": -1}):
        with pytest.raises(ValueError, match="must be an integer"):
            nki.benchmark(**bad)(K.scale_fresh)(a)


def test_target_comes_from_the_environment_or_a_keyword(a, monkeypatch):
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn1")
    b1 = nki.benchmark(K.scale_fresh)
    b1(a)
    assert b1.benchmark_result.estimate.hw.name == "trn1"
    b2 = nki.benchmark(K.scale_fresh, platform_target="trn3")
    b2(a)
    assert b2.benchmark_result.estimate.hw.name == "trn3"
    assert (b1.benchmark_result.nc_latency.get_latency_percentile(50)
            != b2.benchmark_result.nc_latency.get_latency_percentile(50))


def test_shape_placeholders_and_new_generation(capsys):
    lhsT, rhs = ShapeSpec((256, 128), "bfloat16"), ShapeSpec((256, 512), "bfloat16")
    bench = nki.benchmark(warmup=5, iters=10)(K.tiled_matmul)
    bench(lhsT, rhs)
    assert bench.benchmark_result.estimate.flops == 2 * 256 * 128 * 512
    new = opennki.benchmark(K.one_load)
    new(ShapeSpec((128, 512), "float32"))
    assert new.benchmark_result.nc_latency.get_latency_percentile(99) > 0


def test_gridded_benchmark_result_lands_on_both_kernels(a):
    bench = nki.benchmark(K.scale_fresh)
    child = bench[2]
    child(a)
    assert child.benchmark_result is bench.benchmark_result
    assert child.benchmark_result.estimate.programs == 2


def test_the_benchmark_service_is_what_the_decorator_runs(a, capsys):
    bench = nki.benchmark(warmup=1, iters=3)(K.scale_fresh)
    bench(a)
    assert SERVICES["benchmark"] is run_benchmark
    direct = run_benchmark(K.scale_fresh, (a,), None, warmup=1, iters=3, echo=False)
    assert bench.benchmark_result.iters == direct.iters == 3
    assert direct.nc_latency.samples_us == bench.benchmark_result.nc_latency.samples_us
    assert direct.estimate.latency_ns == estimate(K.scale_fresh, (a,)).latency_ns > 0


def test_estimate_call_for_tools(a):
    r = estimate_call(K.scale_fresh, (a,), target="trn2")
    row, header = r.table_row(), r.TABLE_HEADER
    assert row.startswith("scale_fresh") and "trn2" in row and len(row.split()) >= 10
    assert header.split()[:3] == ["kernel", "target", "latency"]
    assert r.to_dict()["dma_transfer_count"] == 8
