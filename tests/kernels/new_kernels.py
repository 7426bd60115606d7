"""This project's own new-generation (`nki` style, `dst=` instructions) kernels for the foundation tests."""

import opennki as nki
import opennki.isa as nisa
import opennki.language as nl


@nki.jit
def add(a_input, b_input):
    """out = a + b, tile by tile of 128 rows, with explicit dma_copy and tensor_tensor."""
    n, d = a_input.shape
    out = nl.ndarray((n, d), dtype=a_input.dtype, buffer=nl.shared_hbm)
    for t in range((n + 127) // 128):
        rows = min(128, n - t * 128)
        a_tile = nl.ndarray((rows, d), dtype=a_input.dtype, buffer=nl.sbuf)
        b_tile = nl.ndarray((rows, d), dtype=b_input.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=a_tile, src=a_input[t * 128:t * 128 + rows, :])
        nisa.dma_copy(dst=b_tile, src=b_input[t * 128:t * 128 + rows, :])
        c_tile = nl.ndarray((rows, d), dtype=a_input.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=c_tile, data1=a_tile, data2=b_tile, op=nl.add)
        nisa.dma_copy(dst=out[t * 128:t * 128 + rows, :], src=c_tile)
    return out


@nki.jit
def matmul_tiled(lhsT, rhs):
    """result[M, N] = lhsT.T @ rhs, PSUM accumulation over K with nc_matmul's default accumulate rule."""
    K, M = lhsT.shape
    _, N = rhs.shape
    TK, TM, TN = nl.tile_size.pmax, nl.tile_size.gemm_stationary_fmax, nl.tile_size.gemm_moving_fmax
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // TM):
        for n in nl.affine_range(N // TN):
            res_psum = nl.ndarray((TM, TN), nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // TK):
                lhs_tile = nl.ndarray((TK, TM), dtype=lhsT.dtype, buffer=nl.sbuf)
                rhs_tile = nl.ndarray((TK, TN), dtype=rhs.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=lhs_tile, src=lhsT[k * TK:(k + 1) * TK, m * TM:(m + 1) * TM])
                nisa.dma_copy(dst=rhs_tile, src=rhs[k * TK:(k + 1) * TK, n * TN:(n + 1) * TN])
                nisa.nc_matmul(dst=res_psum, stationary=lhs_tile, moving=rhs_tile)
            res_sb = nl.ndarray(res_psum.shape, dtype=result.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=res_sb, src=res_psum)
            nisa.dma_copy(dst=result[m * TM:(m + 1) * TM, n * TN:(n + 1) * TN], src=res_sb)
    return result


@nki.jit
def softmax(x):
    """Row softmax written with explicit instructions: max-reduce, exp with a per-row bias and a fused
    sum into the Scalar Engine's reduce registers, reciprocal, scale."""
    n, d = x.shape
    out = nl.ndarray((n, d), dtype=x.dtype, buffer=nl.shared_hbm)
    for t in range((n + 127) // 128):
        rows = min(128, n - t * 128)
        tile = nl.ndarray((rows, d), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=x[t * 128:t * 128 + rows, :])
        neg_max = nl.ndarray((rows, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=neg_max, op=nl.maximum, data=tile, axis=(1,), negate=True)
        exps = nl.ndarray((rows, d), dtype=nl.float32, buffer=nl.sbuf)
        sums = nl.ndarray((rows, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=exps, op=nl.exp, data=tile, bias=neg_max, reduce_op=nl.add, reduce_res=sums,
                        reduce_cmd=nisa.reduce_cmd.reset_reduce)
        inv = nl.ndarray((rows, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=inv, op=nl.reciprocal, data=sums)
        result = nl.ndarray((rows, d), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=result, data=exps, op0=nl.multiply, operand0=inv)
        nisa.dma_copy(dst=out[t * 128:t * 128 + rows, :], src=result)
    return out
