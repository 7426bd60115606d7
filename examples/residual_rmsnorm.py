"""Example (new generation): residual add followed by RMSNorm, written with explicit `nisa` instructions.

out = (x + r) * rsqrt(mean((x + r)^2) + eps) * g, one tile of up to 128 rows at a time; the sum of squares
comes for free from the Scalar Engine's reduce registers while it squares the tile.
"""

import numpy as np

import opennki as nki
import opennki.isa as nisa
import opennki.language as nl


@nki.jit
def residual_rmsnorm(x, r, g):
    n, d = x.shape
    out = nl.ndarray((n, d), dtype=x.dtype, buffer=nl.shared_hbm)
    g_tile = nl.ndarray((128, d), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=g_tile, src=g.ap([[0, 128], [1, d]]))     # the DMA broadcasts g to every partition
    for t in range((n + 127) // 128):
        p = min(128, n - t * 128)
        rows = slice(t * 128, t * 128 + p)
        a = nl.ndarray((p, d), dtype=nl.float32, buffer=nl.sbuf)
        b = nl.ndarray((p, d), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=a, src=x[rows, :])
        nisa.dma_copy(dst=b, src=r[rows, :])
        nisa.tensor_tensor(dst=a, data1=a, data2=b, op=nl.add)
        sq = nl.ndarray((p, d), dtype=nl.float32, buffer=nl.sbuf)
        ssq = nl.ndarray((p, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=sq, op=nl.square, data=a, reduce_op=nl.add, reduce_res=ssq,
                        reduce_cmd=nisa.reduce_cmd.reset_reduce)
        inv = nl.ndarray((p, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=inv, data=ssq, op0=nl.multiply, operand0=1.0 / d, op1=nl.add, operand1=1e-6)
        nisa.activation(dst=inv, op=nl.rsqrt, data=inv)
        y = nl.ndarray((p, d), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=a, data=a, op0=nl.multiply, operand0=inv)
        nisa.tensor_tensor(dst=y, data1=a, data2=g_tile[0:p, :], op=nl.multiply)
        nisa.dma_copy(dst=out[rows, :], src=y)
    return out


def make_inputs(rng):
    x = rng.standard_normal((300, 256), dtype=np.float32)
    r = rng.standard_normal((300, 256), dtype=np.float32)
    g = rng.standard_normal(256, dtype=np.float32)
    return x, r, g


def reference(x, r, g):
    s = (x + r).astype(np.float64)
    return s / np.sqrt(np.mean(s * s, axis=1, keepdims=True) + 1e-6) * g


EXAMPLE = dict(name="residual_rmsnorm", generation="new", kernel=residual_rmsnorm, make_inputs=make_inputs,
               reference=reference)

if __name__ == "__main__":
    args = make_inputs(np.random.default_rng(0))
    print("max abs error:", np.abs(residual_rmsnorm(*args) - reference(*args)).max())
