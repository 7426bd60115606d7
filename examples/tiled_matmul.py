"""Example (legacy generation): the textbook tiled matmul, result = lhsT.T @ rhs.

The contraction dim K arrives on the partition axis of both operands. Each 128 x 512 output tile
accumulates K / 128 matmuls in one PSUM tile, with fresh SBUF tiles per k-step (so the loads of one step
overlap the matmul of the previous one), then is copied out in the output dtype. The benchmarks time this
kernel too (benchmarks/sim_speed.py, benchmarks/cost_matmul.py).
"""

import numpy as np

import opennki.legacy as nki
import opennki.legacy.isa as nisa
import opennki.legacy.language as nl


def tiled_matmul(lhsT, rhs):
    K, M = lhsT.shape
    _, N = rhs.shape
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // 128):
        for n in nl.affine_range(N // 512):
            acc = nl.zeros((128, 512), nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // 128):
                a = nl.load(lhsT[k * 128:(k + 1) * 128, m * 128:(m + 1) * 128])
                b = nl.load(rhs[k * 128:(k + 1) * 128, n * 512:(n + 1) * 512])
                acc += nisa.nc_matmul(a, b)
            nl.store(result[m * 128:(m + 1) * 128, n * 512:(n + 1) * 512], value=nl.copy(acc, dtype=result.dtype))
    return result


def make_inputs(rng):
    lhsT = rng.standard_normal((512, 256), dtype=np.float32)
    rhs = rng.standard_normal((512, 1024), dtype=np.float32)
    return lhsT, rhs


def reference(lhsT, rhs):
    return lhsT.T.astype(np.float64) @ rhs


EXAMPLE = dict(name="tiled_matmul", generation="legacy", kernel=nki.jit(tiled_matmul), make_inputs=make_inputs,
               reference=reference)

if __name__ == "__main__":
    args = make_inputs(np.random.default_rng(0))
    print("max abs error:", np.abs(EXAMPLE["kernel"](*args) - reference(*args)).max())
