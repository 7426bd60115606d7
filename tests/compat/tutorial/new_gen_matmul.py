"""
A tiled matrix multiplication in the new NKI generation's style (`import nki`), written for opennki's
compatibility tests. Run with `opennki run new_gen_matmul.py`.
"""
import numpy as np
import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def nki_matmul_tiled(lhsT, rhs):
    K, M = lhsT.shape
    _, N = rhs.shape
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // 128):
        for n in nl.affine_range(N // 512):
            acc = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // 128):
                lhs_tile = nl.ndarray((128, 128), dtype=lhsT.dtype, buffer=nl.sbuf)
                rhs_tile = nl.ndarray((128, 512), dtype=rhs.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=lhs_tile, src=lhsT[k * 128:(k + 1) * 128, m * 128:(m + 1) * 128])
                nisa.dma_copy(dst=rhs_tile, src=rhs[k * 128:(k + 1) * 128, n * 512:(n + 1) * 512])
                nisa.nc_matmul(dst=acc, stationary=lhs_tile, moving=rhs_tile)
            out_tile = nl.ndarray((128, 512), dtype=result.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=out_tile, src=acc)
            nisa.dma_copy(dst=result[m * 128:(m + 1) * 128, n * 512:(n + 1) * 512], src=out_tile)
    return result


if __name__ == "__main__":
    lhsT = np.random.rand(256, 128).astype(np.float32)
    rhs = np.random.rand(256, 1024).astype(np.float32)
    out = nki.simulate(nki_matmul_tiled)(lhsT, rhs)
    ok = np.allclose(out, lhsT.T @ rhs, rtol=1e-4, atol=1e-4)
    print("matmul: NKI and NumPy match" if ok else "matmul: NKI and NumPy differ")
    raise SystemExit(0 if ok else 1)
