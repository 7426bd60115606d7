"""This project's end-to-end legacy kernels (tests/kernels/e2e/kernels.py) against NumPy on random data, and
unchanged when every listener is attached."""

import math

import ml_dtypes
import numpy as np
import pytest

from opennki.listeners import Recorder
from opennki.listeners.tracer import Tracer
from tests.kernels.e2e import kernels as K
from tests.language.coverage import covers


def _causal_attention(q, k, v):
    d, seq = q.shape
    scores = (q.T.astype(np.float64) @ k.astype(np.float64)) / math.sqrt(d)
    scores[np.triu_indices(seq, 1)] = -np.inf
    p = np.exp(scores - scores.max(1, keepdims=True))
    return (p / p.sum(1, keepdims=True)) @ v.astype(np.float64)


@covers("matmul", "exp", "max", "sum", "maximum", "reciprocal", "sequential_range", "affine_range", "full")
def test_flash_attention_forward_with_causal_mask(rng):
    d, seq = 64, 384
    q, k = rng.standard_normal((2, d, seq)).astype(np.float32)
    v = rng.standard_normal((seq, d)).astype(np.float32)
    np.testing.assert_allclose(K.flash_attention_fwd(q, k, v), _causal_attention(q, k, v), rtol=2e-4, atol=2e-5)


def test_flash_attention_in_bf16(rng):
    d, seq = 128, 256
    q, k = rng.standard_normal((2, d, seq)).astype(ml_dtypes.bfloat16)
    v = rng.standard_normal((seq, d)).astype(ml_dtypes.bfloat16)
    out = K.flash_attention_fwd(q, k, v)
    # the kernel rounds the probabilities (exp(scores - running max), the bf16 matmul operand) and their row
    # sums (nl.sum keeps the bf16 dtype); the reference does too, block by block like the kernel's online
    # softmax, and is exact elsewhere
    # (a probability on a bf16 rounding boundary may round the other way from fp32 scores: atol)
    np.testing.assert_allclose(out, _causal_attention_bf16_probs(q, k, v), rtol=2e-4, atol=1e-4)
    assert np.abs(out - _causal_attention(q, k, v)).max() > 1e-3        # the rounding is visible


def bf16_round(x):
    return np.asarray(x, np.float32).astype(ml_dtypes.bfloat16).astype(np.float64)


def _causal_attention_bf16_probs(q, k, v, block=128):
    d, seq = q.shape
    qf, kf, vf = (a.astype(np.float64) for a in (q, k, v))
    out = np.zeros((seq, d))
    for qi in range(seq // block):
        rows = slice(qi * block, (qi + 1) * block)
        m = np.full((block, 1), -np.inf)
        total, acc = np.zeros((block, 1)), np.zeros((block, d))
        for ki in range(qi + 1):
            cols = slice(ki * block, (ki + 1) * block)
            scores = (qf[:, rows].T @ kf[:, cols]) / math.sqrt(d)
            if ki == qi:
                scores[np.triu_indices(block, 1)] = -np.inf
            m_new = np.maximum(m, scores.max(1, keepdims=True))
            alpha = np.exp(m - m_new)
            probs = bf16_round(np.exp(scores - m_new))
            total = total * alpha + bf16_round(probs.sum(1, keepdims=True))
            acc = acc * alpha + probs @ vf[cols]
            m = m_new
        out[rows] = acc / total
    return out


@covers("rsqrt", "broadcast_to", "matmul", "copy")
def test_rmsnorm_then_matmul(rng):
    x = rng.standard_normal((256, 384)).astype(np.float32)
    gamma = rng.standard_normal((1, 384)).astype(np.float32)
    w = (rng.standard_normal((384, 320)) / 16).astype(np.float32)
    normed = x / np.sqrt((x.astype(np.float64) ** 2).mean(1, keepdims=True) + 1e-6) * gamma
    np.testing.assert_allclose(K.rmsnorm_matmul(x, gamma, w, 1e-6), normed @ w, rtol=1e-4, atol=1e-4)


def test_selective_scan(rng):
    channels, steps, n_state = 96, 200, 4
    x = rng.standard_normal((channels, steps)).astype(np.float32)
    delta = rng.uniform(0.01, 0.2, (channels, steps)).astype(np.float32)
    a = -rng.uniform(0.5, 2.0, (channels, n_state)).astype(np.float32)
    b, c = rng.standard_normal((2, n_state, steps)).astype(np.float32)
    h = np.zeros((channels, n_state))
    expected = np.zeros((channels, steps))
    for t in range(steps):
        h = np.exp(delta[:, t:t + 1] * a) * h + delta[:, t:t + 1] * b[:, t] * x[:, t:t + 1]
        expected[:, t] = (h * c[:, t]).sum(1)
    np.testing.assert_allclose(K.selective_scan(x, delta, a, b, c), expected, rtol=1e-4, atol=1e-4)


@covers("max", "load", "store", "arange")
@pytest.mark.parametrize("kernel_size,stride", [(2, 2), (3, 2)])
def test_max_pool2d_with_a_ragged_channel_tile(kernel_size, stride, rng):
    x = rng.standard_normal((150, 13, 11)).astype(np.float32)
    oh, ow = (13 - kernel_size) // stride + 1, (11 - kernel_size) // stride + 1
    windows = np.lib.stride_tricks.sliding_window_view(x, (kernel_size, kernel_size), axis=(1, 2))
    expected = windows[:, ::stride, ::stride].max(axis=(3, 4))[:, :oh, :ow]
    np.testing.assert_array_equal(K.max_pool2d(x, kernel_size, stride), expected)


@covers("floor", "gather_flattened", "load")
@pytest.mark.parametrize("out_shape", [(40, 50), (12, 7)])
def test_nearest_resize_with_indirect_row_loads(out_shape, rng):
    img = rng.standard_normal((3, 24, 30)).astype(np.float32)
    oh, ow = out_shape
    rows = np.floor(np.arange(oh, dtype=np.float32) * np.float32(24 / oh)).astype(int)
    cols = np.floor(np.arange(ow, dtype=np.float32) * np.float32(30 / ow)).astype(int)
    np.testing.assert_array_equal(K.resize_nearest(img, oh, ow), img[:, rows][:, :, cols])


@covers("atomic_rmw")
def test_embedding_gradient_scatter_add(rng):
    vocab, dim, n = 200, 32, 512
    ids = rng.integers(0, 40, (n, 1)).astype(np.int32)          # many duplicates in every tile
    grads = rng.standard_normal((n, dim)).astype(np.float32)
    expected = np.zeros((vocab, dim))
    np.add.at(expected, ids[:, 0], grads)
    np.testing.assert_allclose(K.embedding_grad(ids, grads, vocab), expected, rtol=1e-5, atol=1e-5)


def test_top16_values_and_indices(rng):
    x = rng.permutation(128 * 300).reshape(128, 300).astype(np.float32) / 100    # distinct values
    values, indices = K.top16(x)
    order = np.argsort(-x, axis=1)[:, :16]
    np.testing.assert_array_equal(indices, order)
    np.testing.assert_array_equal(values, np.take_along_axis(x, order, axis=1))


@covers("rsqrt", "subtract", "multiply", "add", "tile_size")
@pytest.mark.parametrize("dim", [384, 1000])
def test_layernorm_with_bn_stats(dim, rng):
    x = (rng.standard_normal((200, dim)) * 3 + 1).astype(np.float32)
    gamma, beta = rng.standard_normal((2, 1, dim)).astype(np.float32)
    x64 = x.astype(np.float64)
    expected = (x64 - x64.mean(1, keepdims=True)) / np.sqrt(x64.var(1, keepdims=True) + 1e-5) * gamma + beta
    np.testing.assert_allclose(K.layernorm_bn(x, gamma, beta, 1e-5), expected, rtol=1e-4, atol=1e-4)


def test_matmul_with_direct_allocation(rng):
    a_t = rng.standard_normal((512, 96)).astype(np.float32)
    b = rng.standard_normal((512, 256)).astype(np.float32)
    np.testing.assert_allclose(K.matmul_direct_alloc(a_t, b), a_t.T.astype(np.float64) @ b, rtol=1e-4,
                               atol=1e-3)


def test_listeners_do_not_change_results(rng):
    d, seq = 64, 256
    q, k = rng.standard_normal((2, d, seq)).astype(np.float32)
    v = rng.standard_normal((seq, d)).astype(np.float32)
    plain = K.flash_attention_fwd(q, k, v)
    recorder, tracer = Recorder(), Tracer()
    observed = K.flash_attention_fwd.launch((q, k, v), listeners=[recorder, tracer])
    np.testing.assert_array_equal(observed, plain)       # NaN equals NaN here: so also against NumPy
    np.testing.assert_allclose(observed, _causal_attention(q, k, v), rtol=2e-4, atol=2e-5)
    assert len(recorder.events) > 100
