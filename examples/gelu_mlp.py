"""Example (legacy generation): a two-layer MLP block, y = gelu(x @ w1) @ w2, tiled for the Tensor Engine.

x arrives transposed (xT: [D, T]) so both matmuls contract over the partition dim; the hidden activations
stay on chip between the two matmuls.
"""

import numpy as np

import opennki.legacy as nki
import opennki.legacy.language as nl


@nki.jit
def gelu_mlp(xT, w1, w2):
    D, T = xT.shape          # model dim (contraction of layer 1), tokens
    _, H = w1.shape          # hidden dim
    _, n_out = w2.shape      # output dim
    y = nl.ndarray((T, n_out), dtype=xT.dtype, buffer=nl.shared_hbm)
    for t in nl.affine_range(T // 128):
        # layer 1, produced transposed: hT[h, t] = sum_d w1[d, h] * xT[d, t], one 128-row block of H at a time
        # one tile per hidden block, declared before the loop that fills it (tensors created inside a loop
        # body are local to it in NKI)
        hT = nl.ndarray((H // 128, nl.par_dim(128), 128), dtype=nl.bfloat16, buffer=nl.sbuf)
        for h in nl.affine_range(H // 128):
            acc = nl.zeros((128, 128), nl.float32, buffer=nl.psum)
            for d in nl.affine_range(D // 128):
                w_tile = nl.load(w1[d * 128:(d + 1) * 128, h * 128:(h + 1) * 128])
                x_tile = nl.load(xT[d * 128:(d + 1) * 128, t * 128:(t + 1) * 128])
                acc += nl.matmul(w_tile, x_tile, transpose_x=True)
            hT[h] = nl.gelu(acc)
        # layer 2: y[t, o] = sum_h hT[h, t] * w2[h, o]
        for o in nl.affine_range(n_out // 512):
            out = nl.zeros((128, 512), nl.float32, buffer=nl.psum)
            for h in nl.affine_range(H // 128):
                w_tile = nl.load(w2[h * 128:(h + 1) * 128, o * 512:(o + 1) * 512], dtype=nl.bfloat16)
                out += nl.matmul(hT[h], w_tile, transpose_x=True)
            nl.store(y[t * 128:(t + 1) * 128, o * 512:(o + 1) * 512], value=nl.copy(out, dtype=y.dtype))
    return y


def make_inputs(rng):
    xT = rng.standard_normal((256, 256), dtype=np.float32)
    w1 = rng.standard_normal((256, 384), dtype=np.float32) / 16
    w2 = rng.standard_normal((384, 512), dtype=np.float32) / 20
    return xT, w1, w2


def reference(xT, w1, w2):
    from math import erf, sqrt
    h = xT.T.astype(np.float64) @ w1
    gelu = 0.5 * h * (1 + np.vectorize(erf)(h / sqrt(2)))
    return gelu @ w2


EXAMPLE = dict(name="gelu_mlp", generation="legacy", kernel=gelu_mlp, make_inputs=make_inputs,
               reference=reference)

if __name__ == "__main__":
    args = make_inputs(np.random.default_rng(0))
    print("max abs error:", np.abs(gelu_mlp(*args) - reference(*args)).max())
