from neuronxcc import nki
from neuronxcc.nki import baremetal, benchmark, simulate_kernel
import neuronxcc.nki.language as nl
import numpy as np
import pytest

from softmax_kernels import scaled_copy_kernel, softmax_kernel, softmax_ref

def softmax_ref_rounded(x, dtype):
    """softmax_kernel's steps on fp32 values, each result rounded to `dtype` as the kernel's tiles are."""
    def r(v):
        return np.asarray(v, np.float32).astype(dtype).astype(np.float32)
    shifted = r(np.exp(r(x - x.max(axis=1, keepdims=True)).astype(np.float64)))
    total = r(shifted.sum(axis=1, keepdims=True, dtype=np.float32))
    return r(shifted * r(np.float32(1.0) / total))


bench_func = benchmark(warmup=5, iters=10)(softmax_kernel)


class TestSoftmax:

    @pytest.mark.parametrize("rows,cols,max_p99_us", [(256, 512, 1000.0), (512, 1024, 4000.0)])
    def test_softmax_perf(self, rows, cols, max_p99_us):
        x = np.random.rand(rows, cols).astype(np.float32)
        bench_func_ = bench_func[rows // 128]
        bench_func_(x)
        latency_res = bench_func_.benchmark_result.nc_latency
        p50 = latency_res.get_latency_percentile(50)
        p99 = latency_res.get_latency_percentile(99)
        assert 0 < p50 <= p99 <= max_p99_us

    @pytest.mark.simulation
    @pytest.mark.parametrize("rows,cols,dtype", [(256, 512, np.float32), (200, 256, nl.bfloat16)])
    def test_softmax_numerical(self, simulation_only, rows, cols, dtype):
        x = np.random.rand(rows, cols).astype(dtype)
        numeric_func = baremetal(softmax_kernel)
        grid = (rows + 127) // 128
        if simulation_only:
            out = simulate_kernel(numeric_func[grid], x)
        else:
            out = numeric_func[grid](x)
        if dtype == np.float32:
            assert np.allclose(out, softmax_ref(x), atol=1e-6, rtol=1e-5)
        else:
            # every step rounds to bf16 where the kernel writes a tile; a sum's order may move one ulp
            ref = softmax_ref_rounded(x.astype(np.float32), dtype)
            assert np.allclose(out.astype(np.float32), ref, atol=0, rtol=1.2e-2)
            assert not np.allclose(out.astype(np.float32), softmax_ref(x.astype(np.float32)), atol=0, rtol=1e-5)

    @pytest.mark.simulation
    def test_simulation_mode_kernel(self):
        x = np.random.rand(128, 64).astype(np.float32)
        assert np.allclose(scaled_copy_kernel(x, 3.0), x * 3.0)
        assert nki.jit is not None and isinstance(nl.tile_size.pmax, int)
