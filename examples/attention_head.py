"""Example (legacy generation): one attention head, softmax(q k^T / sqrt(d)) v, for 128 queries.

q and k arrive transposed ([d, seq]) so the score matmul contracts over the partition dim; the
probabilities are transposed on the Tensor Engine before the second matmul.
"""

import numpy as np

import opennki.legacy as nki
import opennki.legacy.language as nl


@nki.jit
def attention_head(qT, kT, v):
    d, sq = qT.shape             # head dim on partitions, 128 queries
    _, sk = kT.shape             # keys: a multiple of 128, at most 512 (one PSUM bank of scores)
    out = nl.ndarray((sq, d), dtype=v.dtype, buffer=nl.shared_hbm)
    q = nl.load(qT)
    k = nl.load(kT)
    scores = nl.matmul(q, k, transpose_x=True)                       # [sq, sk] in PSUM
    s = nl.multiply(scores, 1.0 / np.sqrt(d))
    probs = nl.exp(nl.subtract(s, nl.max(s, axis=[1])))
    inv_sum = nl.reciprocal(nl.sum(probs, axis=[1]))
    acc = nl.zeros((sq, d), nl.float32, buffer=nl.psum)
    for j in nl.affine_range(sk // 128):
        pT = nl.transpose(probs[:, j * 128:(j + 1) * 128])            # [128 keys, sq]
        v_tile = nl.load(v[j * 128:(j + 1) * 128, :])
        acc += nl.matmul(pT, v_tile, transpose_x=True)
    nl.store(out, value=nl.multiply(acc, inv_sum))
    return out


def make_inputs(rng):
    qT = rng.standard_normal((64, 128), dtype=np.float32)
    kT = rng.standard_normal((64, 384), dtype=np.float32)
    v = rng.standard_normal((384, 64), dtype=np.float32)
    return qT, kT, v


def reference(qT, kT, v):
    s = (qT.T.astype(np.float64) @ kT) / np.sqrt(qT.shape[0])
    p = np.exp(s - s.max(axis=1, keepdims=True))
    return (p / p.sum(axis=1, keepdims=True)) @ v


EXAMPLE = dict(name="attention_head", generation="legacy", kernel=attention_head, make_inputs=make_inputs,
               reference=reference)

if __name__ == "__main__":
    args = make_inputs(np.random.default_rng(0))
    print("max abs error:", np.abs(attention_head(*args) - reference(*args)).max())
