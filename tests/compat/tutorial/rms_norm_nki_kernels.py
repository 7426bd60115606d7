"""
RMS normalisation and tensor addition, NKI tutorial style (written for opennki's compatibility tests).

Run with NKI installed:      python rms_norm_nki_kernels.py
Run on opennki, unchanged:  opennki run rms_norm_nki_kernels.py
"""
import sys

import numpy as np
from neuronxcc import nki
import neuronxcc.nki.language as nl


@nki.jit
def nki_rms_norm(a_tensor, g_tensor):
    """out[i, :] = a[i, :] / sqrt(mean(a[i, :]^2) + 1e-6) * g, 128 rows per tile."""
    out_tensor = nl.ndarray(a_tensor.shape, dtype=a_tensor.dtype, buffer=nl.shared_hbm)
    num_rows, num_cols = a_tensor.shape
    ix = nl.arange(128)[:, None]
    iy = nl.arange(num_cols)[None, :]
    g_tile = nl.load(g_tensor.reshape((1, num_cols))[nl.arange(1)[:, None], iy])
    for i in nl.affine_range((num_rows + 127) // 128):
        rows = i * 128 + ix
        a_tile = nl.load(a_tensor[rows, iy], mask=(rows < num_rows))
        mean_sq = nl.mean(nl.square(a_tile), axis=[1], mask=(rows < num_rows))
        inv_rms = nl.rsqrt(mean_sq + 1e-6, mask=(rows < num_rows))
        out_tile = nl.multiply(nl.multiply(a_tile, inv_rms), g_tile.broadcast_to((128, num_cols)),
                               mask=(rows < num_rows))
        nl.store(out_tensor[rows, iy], value=out_tile, mask=(rows < num_rows))
    return out_tensor


@nki.jit
def nki_tensor_add(a_input, b_input):
    """c = a + b, one [128, 512] tile per SPMD program on a 2-D launch grid."""
    c_output = nl.ndarray(a_input.shape, dtype=a_input.dtype, buffer=nl.shared_hbm)
    offset_i_x = nl.program_id(0) * 128
    offset_i_y = nl.program_id(1) * 512
    ix = offset_i_x + nl.arange(128)[:, None]
    iy = offset_i_y + nl.arange(512)[None, :]
    c_tile = nl.load(a_input[ix, iy]) + nl.load(b_input[ix, iy])
    nl.store(c_output[ix, iy], value=c_tile)
    return c_output


def rms_norm_numpy(a, g):
    return a / np.sqrt(np.mean(np.square(a), axis=1, keepdims=True) + 1e-6) * g


if __name__ == "__main__":
    rows = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    a = np.random.rand(rows, 256).astype(np.float32)
    g = np.random.rand(256).astype(np.float32)
    out = nki_rms_norm(a, g)
    match = np.allclose(out, rms_norm_numpy(a, g), atol=1e-4, rtol=1e-3)
    print("RMSNorm: NKI and NumPy match" if match else "RMSNorm: NKI and NumPy differ")

    x = np.random.rand(256, 1024).astype(np.float32)
    y = np.random.rand(256, 1024).astype(np.float32)
    z = nki_tensor_add[2, 2](x, y)
    match_add = np.allclose(z, x + y)
    print("Tensor add: NKI and NumPy match" if match_add else "Tensor add: NKI and NumPy differ")
    sys.exit(0 if match and match_add else 1)
