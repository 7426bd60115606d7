"""Example (legacy generation): a blocked matmul in the style of the matmul tutorial's fully optimised kernel,
result = lhsT.T @ rhs.

Blocks of TILES_K x 128 rows of K are loaded into SBUF once and reused: an rhs block [K-block, BLOCK_N]
serves every block of M, an lhsT block every tile of N in it. Each 128 x 512 output tile sums its K-block in
one PSUM tile (TILES_K matmuls), and the K-blocks are summed in an fp32 SBUF accumulator that holds a whole
column of output blocks, stored once at the end. The benchmarks estimate this kernel at model sizes
(benchmarks/sim_speed.py).
"""

import numpy as np

import opennki.legacy as nki
import opennki.legacy.isa as nisa
import opennki.legacy.language as nl

TILE_M, TILE_K, TILE_N = 128, 128, 512       # stationary free size, partitions, moving free size


def blocked_matmul(lhsT, rhs, tiles_m=2, tiles_n=2, tiles_k=8):
    K, M = lhsT.shape
    _, N = rhs.shape
    block_m, block_n, block_k = TILE_M * tiles_m, TILE_N * tiles_n, TILE_K * tiles_k
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for n in nl.affine_range(N // block_n):
        # fp32 sums of a column of output tiles: [M tiles, N tiles of the block, 128, 512]
        acc = nl.zeros((M // TILE_M, tiles_n, nl.par_dim(TILE_M), TILE_N), nl.float32, buffer=nl.sbuf)
        for k in nl.affine_range(K // block_k):
            rows = k * block_k
            rhs_block = nl.ndarray((tiles_k, nl.par_dim(TILE_K), block_n), dtype=rhs.dtype, buffer=nl.sbuf)
            for bk in nl.affine_range(tiles_k):
                rhs_block[bk] = nl.load(rhs[rows + bk * TILE_K:rows + (bk + 1) * TILE_K,
                                            n * block_n:(n + 1) * block_n])
            for m in nl.affine_range(M // block_m):
                lhs_block = nl.ndarray((tiles_k, nl.par_dim(TILE_K), block_m), dtype=lhsT.dtype, buffer=nl.sbuf)
                for bk in nl.affine_range(tiles_k):
                    lhs_block[bk] = nl.load(lhsT[rows + bk * TILE_K:rows + (bk + 1) * TILE_K,
                                                 m * block_m:(m + 1) * block_m])
                for bn in nl.affine_range(tiles_n):
                    for bm in nl.affine_range(tiles_m):
                        part = nl.zeros((TILE_M, TILE_N), nl.float32, buffer=nl.psum)
                        for bk in nl.affine_range(tiles_k):
                            part += nisa.nc_matmul(lhs_block[bk, :, bm * TILE_M:(bm + 1) * TILE_M],
                                                   rhs_block[bk, :, bn * TILE_N:(bn + 1) * TILE_N])
                        acc[m * tiles_m + bm, bn] += part
        for i in nl.affine_range(M // TILE_M):
            for bn in nl.affine_range(tiles_n):
                col = n * block_n + bn * TILE_N
                nl.store(result[i * TILE_M:(i + 1) * TILE_M, col:col + TILE_N],
                         value=nl.copy(acc[i, bn], dtype=result.dtype))
    return result


def make_inputs(rng):
    lhsT = rng.standard_normal((1024, 256), dtype=np.float32)
    rhs = rng.standard_normal((1024, 1024), dtype=np.float32)
    return lhsT, rhs


def reference(lhsT, rhs):
    return lhsT.T.astype(np.float64) @ rhs


EXAMPLE = dict(name="blocked_matmul", generation="legacy", kernel=nki.jit(blocked_matmul), make_inputs=make_inputs,
               reference=reference)

if __name__ == "__main__":
    args = make_inputs(np.random.default_rng(0))
    print("max abs error:", np.abs(EXAMPLE["kernel"](*args) - reference(*args)).max())
