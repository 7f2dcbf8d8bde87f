r"""Flash attention from scratch: the online softmax, tiled exact attention, and the IO-cost model.

- :func:`online_softmax_update` and :func:`online_softmax`: a softmax computed in one streaming pass
  that keeps a running maximum m and a running sum l of exp(x - m) (Milakov and Gimelshein, 2018).
- :func:`flash_attention`: exact attention computed block by block, never holding the Tq x Tk matrix
  of scores; the forward pass keeps per-row m and l and saves the log-sum-exp L = m + log l, the
  backward pass recomputes each block of weights from L (FlashAttention-2; Dao, 2023).
  :func:`flash_attention_forward` and :func:`flash_attention_backward` are the two passes as plain
  functions; :class:`FlashAttentionFunction` joins them into a ``torch.autograd.Function``.
- :class:`FastMemory`, :func:`standard_attention_io` and :func:`flash_attention_io`: a simulated fast
  memory of M bytes that counts the reads and writes of slow memory each algorithm makes, to compare
  with Theorem 2 of the FlashAttention paper (Dao et al., 2022).

This is a teaching implementation in PyTorch: its loops run in Python, so on a GPU it is far slower than
a fused kernel (``F.scaled_dot_product_attention``), but its memory grows like the real one's.

Chapter: the cost of attention and flash attention (chapter 09).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from . import _checks
from ._checks import checked_by
from ._numerics import NEG_INF, work_dtype
from .attention import causal_mask, check_qkv

__all__ = [
    "online_softmax_update",
    "online_softmax",
    "flash_attention",
    "flash_attention_forward",
    "flash_attention_backward",
    "FlashAttentionFunction",
    "FastMemory",
    "IOCount",
    "standard_attention_io",
    "flash_attention_block_sizes",
    "flash_attention_io",
]

# --- the online softmax -------------------------------------------------------------------------------


@checked_by("_check_online_softmax_update")
def online_softmax_update(m: torch.Tensor, l: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    r"""One step of the online softmax: fold a new block of scores ``x`` into the running (m, l).

    m' = max(m, max_j x_j),  l' = l * exp(m - m') + sum_j exp(x_j - m').

    Start from m = -inf, l = 0. After the last block, softmax(x)_j = exp(x_j - m) / l.
    Rows that have seen only -inf keep m = -inf and l = 0 (never NaN).

    Shapes:
        m, l:   (...,)   the running maximum and the running sum of exp(x - m)
        x:      (..., n) the next n scores of each row (n >= 1)
        return: m', l' of shape (...,)

    Chapter: the cost of attention and flash attention (the online softmax).
    """
    m_new = torch.maximum(m, x.amax(dim=-1))  # (...,)
    m_safe = torch.where(m_new == NEG_INF, 0.0, m_new)  # (...,) a row with nothing yet: subtract 0, not -inf
    l_new = l * torch.exp(m - m_safe) + torch.exp(x - m_safe.unsqueeze(-1)).sum(dim=-1)  # (...,)
    return m_new, l_new


@checked_by("_check_online_softmax")
def online_softmax(x: torch.Tensor, block_size: int = 1) -> torch.Tensor:
    """Softmax over the last dimension, computed by reading ``x`` in blocks of ``block_size`` with
    :func:`online_softmax_update`, then normalising (one pass for the statistics, one for the output).

    Shapes:
        x:      (..., N)
        return: (..., N), equal to ``torch.softmax(x, dim=-1)``

    Chapter: the cost of attention and flash attention (the online softmax).
    """
    m = torch.full(x.shape[:-1], NEG_INF, dtype=x.dtype, device=x.device)  # (...,)
    l = torch.zeros(x.shape[:-1], dtype=x.dtype, device=x.device)  # (...,)
    for start in range(0, x.shape[-1], block_size):
        m, l = online_softmax_update(m, l, x[..., start : start + block_size])
    return torch.exp(x - m.unsqueeze(-1)) / l.unsqueeze(-1)  # (..., N)


# --- tiled attention ----------------------------------------------------------------------------------


@checked_by("_check_flash_inputs")
def flash_attention_forward(q, k, v, *, causal=False, offset=None, scale=None, block_q=256, block_k=256):
    r"""The forward pass of tiled attention: the output and the log-sum-exp of each query's scores.

    For each block of ``block_q`` queries, the keys and values are read in blocks of ``block_k``; each
    block of scores S updates the running row maximum m, the running sum l of exp(S - m) and the
    unnormalised output O, rescaling what was accumulated so far by exp(m_old - m_new). At the end
    O / l is the exact attention output and L = m + log l is saved for the backward pass. Blocks that a
    causal mask hides entirely are skipped. Query rows that may attend to no key get a zero output and
    L = -inf.

    Shapes:
        q: (..., Tq, Dk), k: (..., Tk, Dk), v: (..., Tk, Dv)
        return: out (..., Tq, Dv), lse (..., Tq)

    Chapter: the cost of attention and flash attention (tiled attention).
    """
    offset = 0 if offset is None else offset  # top-left aligned, as attention.causal_mask and is_causal=True
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    *batch, t_q, d_k = q.shape
    t_k, d_v = k.shape[-2], v.shape[-1]
    work = work_dtype(q.dtype)
    q3 = q.reshape(-1, t_q, d_k).to(work)  # (B, Tq, Dk): every batch dimension in one
    k3 = k.reshape(-1, t_k, d_k).to(work)  # (B, Tk, Dk)
    v3 = v.reshape(-1, t_k, d_v).to(work)  # (B, Tk, Dv)
    n = q3.shape[0]
    out = torch.zeros(n, t_q, d_v, dtype=work, device=q.device)  # (B, Tq, Dv)
    lse = torch.full((n, t_q), NEG_INF, dtype=work, device=q.device)  # (B, Tq)
    for i0 in range(0, t_q, block_q):
        i1 = min(i0 + block_q, t_q)
        q_i = q3[:, i0:i1] * scale  # (B, bq, Dk)
        m = torch.full((n, i1 - i0), NEG_INF, dtype=work, device=q.device)  # (B, bq) running maximum
        l = torch.zeros(n, i1 - i0, dtype=work, device=q.device)  # (B, bq) running sum of exp(s - m)
        acc = torch.zeros(n, i1 - i0, d_v, dtype=work, device=q.device)  # (B, bq, Dv) unnormalised output
        keys_end = min(t_k, i1 + offset) if causal else t_k  # the last query of the block sees keys < i1 + offset
        for j0 in range(0, max(keys_end, 0), block_k):
            j1 = min(j0 + block_k, t_k)
            s = q_i @ k3[:, j0:j1].transpose(1, 2)  # (B, bq, bk)
            if causal and j1 - 1 > i0 + offset:  # the block crosses the diagonal: mask part of it
                s = s.masked_fill(~causal_mask(i1 - i0, j1 - j0, offset=offset + i0 - j0, device=q.device), NEG_INF)
            m_new = torch.maximum(m, s.amax(dim=-1))  # (B, bq)
            m_safe = torch.where(m_new == NEG_INF, 0.0, m_new)  # (B, bq) rows with no allowed key so far
            p = torch.exp(s - m_safe.unsqueeze(-1))  # (B, bq, bk)
            alpha = torch.exp(m - m_safe)  # (B, bq) rescales what was accumulated under the old maximum
            l = l * alpha + p.sum(dim=-1)  # (B, bq)
            acc = torch.baddbmm(acc * alpha.unsqueeze(-1), p, v3[:, j0:j1])  # (B, bq, Dv)
            m = m_new
        seen = l > 0  # (B, bq) rows with at least one allowed key
        out[:, i0:i1] = acc / torch.where(seen, l, 1.0).unsqueeze(-1)  # (B, bq, Dv)
        lse[:, i0:i1] = torch.where(seen, m + torch.log(torch.where(seen, l, 1.0)), NEG_INF)  # (B, bq)
    return out.reshape(*batch, t_q, d_v).to(q.dtype), lse.reshape(*batch, t_q)  # (..., Tq, Dv), (..., Tq)


@checked_by("_check_flash_backward")
def flash_attention_backward(
    grad_out, q, k, v, out, lse, *, causal=False, offset=None, scale=None, block_q=256, block_k=256
):
    r"""The backward pass of tiled attention (FlashAttention-2): gradients for q, k and v.

    With Delta_i = sum_c dO_ic O_ic (D_i in the FlashAttention papers), each block of weights is recomputed
    from the saved log-sum-exp, P = exp(S - L), and then

        dV_j += P^T dO_i,   dP = dO_i V_j^T,   dS = P * (dP - Delta_i),
        dQ_i += scale * dS K_j,   dK_j += scale * dS^T Q_i.

    The outer loop runs over key blocks (each dK_j, dV_j is finished in one go), the inner over query
    blocks; no Tq x Tk matrix is ever held.

    Shapes:
        grad_out, out: (..., Tq, Dv);  q: (..., Tq, Dk);  k: (..., Tk, Dk);  v: (..., Tk, Dv);  lse: (..., Tq)
        return: dq, dk, dv with the shapes of q, k, v

    Chapter: the cost of attention and flash attention (the backward pass).
    """
    offset = 0 if offset is None else offset
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    *batch, t_q, d_k = q.shape
    t_k, d_v = k.shape[-2], v.shape[-1]
    work = work_dtype(q.dtype)
    q3 = q.reshape(-1, t_q, d_k).to(work)  # (B, Tq, Dk)
    k3 = k.reshape(-1, t_k, d_k).to(work)  # (B, Tk, Dk)
    v3 = v.reshape(-1, t_k, d_v).to(work)  # (B, Tk, Dv)
    do3 = grad_out.reshape(-1, t_q, d_v).to(work)  # (B, Tq, Dv)
    o3 = out.reshape(-1, t_q, d_v).to(work)  # (B, Tq, Dv)
    lse3 = lse.reshape(-1, t_q).to(work)  # (B, Tq)
    lse3 = torch.where(lse3 == NEG_INF, float("inf"), lse3)  # rows with no allowed key: P = exp(S - inf) = 0
    delta = (do3 * o3).sum(dim=-1)  # (B, Tq)  Delta_i = rowsum(dO * O)
    dq = torch.zeros_like(q3)  # (B, Tq, Dk)
    dk = torch.zeros_like(k3)  # (B, Tk, Dk)
    dv = torch.zeros_like(v3)  # (B, Tk, Dv)
    for j0 in range(0, t_k, block_k):
        j1 = min(j0 + block_k, t_k)
        k_j, v_j = k3[:, j0:j1], v3[:, j0:j1]  # (B, bk, Dk), (B, bk, Dv)
        dk_j = torch.zeros_like(k_j)  # (B, bk, Dk)
        dv_j = torch.zeros_like(v_j)  # (B, bk, Dv)
        first_query = max(0, j0 - offset) if causal else 0  # earlier queries see none of these keys
        for i0 in range(first_query - first_query % block_q, t_q, block_q):
            i1 = min(i0 + block_q, t_q)
            q_i = q3[:, i0:i1]  # (B, bq, Dk)
            s = (q_i @ k_j.transpose(1, 2)) * scale  # (B, bq, bk)
            if causal and j1 - 1 > i0 + offset:
                s = s.masked_fill(~causal_mask(i1 - i0, j1 - j0, offset=offset + i0 - j0, device=q.device), NEG_INF)
            p = torch.exp(s - lse3[:, i0:i1].unsqueeze(-1))  # (B, bq, bk) the weights, recomputed
            do_i = do3[:, i0:i1]  # (B, bq, Dv)
            dv_j += p.transpose(1, 2) @ do_i  # (B, bk, Dv)
            dp = do_i @ v_j.transpose(1, 2)  # (B, bq, bk)
            ds = p * (dp - delta[:, i0:i1].unsqueeze(-1))  # (B, bq, bk)
            dq[:, i0:i1] += (ds @ k_j) * scale  # (B, bq, Dk)
            dk_j += (ds.transpose(1, 2) @ q_i) * scale  # (B, bk, Dk)
        dk[:, j0:j1] = dk_j
        dv[:, j0:j1] = dv_j
    return dq.reshape(q.shape).to(q.dtype), dk.reshape(k.shape).to(k.dtype), dv.reshape(v.shape).to(v.dtype)


class FlashAttentionFunction(torch.autograd.Function):
    """Tiled attention as an autograd function: saves q, k, v, the output and the log-sum-exp (no weights).

    Call it through :func:`flash_attention`.

    Chapter: the cost of attention and flash attention (the backward pass).
    """

    @staticmethod
    def forward(ctx, q, k, v, causal, offset, scale, block_q, block_k):
        out, lse = flash_attention_forward(
            q, k, v, causal=causal, offset=offset, scale=scale, block_q=block_q, block_k=block_k
        )
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.options = dict(causal=causal, offset=offset, scale=scale, block_q=block_q, block_k=block_k)
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out):
        q, k, v, out, lse = ctx.saved_tensors
        with _checks.trusted():  # the forward pass checked the inputs
            dq, dk, dv = flash_attention_backward(grad_out, q, k, v, out, lse, **ctx.options)
        return dq, dk, dv, None, None, None, None, None


@checked_by("_check_flash_inputs")
def flash_attention(q, k, v, *, causal=False, offset=None, scale=None, block_q=256, block_k=256) -> torch.Tensor:
    r"""Exact attention softmax(q k^T * scale) v, computed in tiles without the Tq x Tk matrix.

    Equal to ``attention.scaled_dot_product_attention(q, k, v, mask)`` (with ``mask =
    attention.causal_mask(Tq, Tk, offset=offset)`` when ``causal``), with extra memory that grows like
    Tq * Dv + block_q * block_k instead of Tq * Tk, and differentiable (FlashAttention-2 backward).

    Args:
        causal: query i may attend to key j only when j <= i + offset.
        offset: 0 by default (top-left aligned, as ``is_causal=True`` of PyTorch); ``Tk - Tq`` when the
            queries are the last Tq positions of the keys' sequence (as when decoding with a cache).
        scale: multiplies the scores; 1 / sqrt(Dk) by default.
        block_q, block_k: the number of queries and keys per tile (any sizes >= 1; the last tile may be
            smaller). GPU kernels use 64 to 128 so that a tile fits in on-chip memory; on a CPU, where
            every tile costs a few Python-level operations, larger tiles run faster.

    Shapes:
        q: (..., Tq, Dk), k: (..., Tk, Dk), v: (..., Tk, Dv), the same batch dimensions (...)
        return: (..., Tq, Dv)

    Chapter: the cost of attention and flash attention.
    """
    return FlashAttentionFunction.apply(q, k, v, causal, offset, scale, block_q, block_k)  # (..., Tq, Dv)


# --- the IO model -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class IOCount:
    """Traffic between slow memory (HBM) and a fast memory (SRAM) of ``capacity`` bytes, in bytes."""

    reads: int
    writes: int
    peak_fast: int
    capacity: int

    @property
    def total(self) -> int:
        return self.reads + self.writes


class FastMemory:
    """A fast memory of ``capacity`` bytes next to a slow memory: counts the bytes moved between them.

    ``load(n)`` reads n elements from slow memory into fast memory, ``store(n)`` writes n elements from
    fast memory to slow memory, ``hold(n)`` makes room for n elements computed in fast memory (no
    traffic), ``drop(n)`` frees n elements of fast memory. Holding more than ``capacity`` bytes at once
    raises ``MemoryError``, so an algorithm that runs through this class really fits in the fast memory.

    A loop over many equal tiles need not run tile by tile: ``load(n, times=t)`` and ``store(n, times=t)``
    count the traffic of t equal transfers that reuse the same n elements of fast memory one after another.

    Chapter: the cost of attention and flash attention (the IO model).
    """

    def __init__(self, capacity: int, *, bytes_per_element: int = 4):
        self.capacity, self.bytes_per_element = _check_memory(capacity, bytes_per_element)
        self.reads = self.writes = self.used = self.peak = 0

    def hold(self, n: int) -> None:
        self.used += n * self.bytes_per_element
        if self.used > self.capacity:
            raise MemoryError(f"the fast memory of {self.capacity} bytes would have to hold {self.used} bytes")
        self.peak = max(self.peak, self.used)

    def load(self, n: int, *, times: int = 1) -> None:
        self.hold(n)
        self.reads += n * times * self.bytes_per_element

    def store(self, n: int, *, times: int = 1) -> None:
        self.writes += n * times * self.bytes_per_element

    def drop(self, n: int) -> None:
        self.used -= n * self.bytes_per_element

    def count(self) -> IOCount:
        return IOCount(self.reads, self.writes, self.peak, self.capacity)


def _tiles(n: int, size: int) -> list[tuple[int, int]]:
    """The tiles of ``size`` that cover ``n`` items, as (tile size, how many tiles of that size)."""
    full, rest = divmod(n, size)
    return [(size, full)] * (full > 0) + [(rest, 1)] * (rest > 0)


@checked_by("_check_memory")
def standard_attention_io(n: int, d: int, capacity: int, *, bytes_per_element: int = 4) -> IOCount:
    r"""Slow-memory traffic of standard attention (Algorithm 0 of the FlashAttention paper) with a fast
    memory of ``capacity`` bytes, for n queries and n keys of width d.

    1. S = Q K^T in square tiles of b x b: a block of b rows of Q stays in fast memory while the blocks
       of K stream by; every tile of S is written to slow memory.
    2. P = softmax(S) one row at a time: a row is read once if it fits in fast memory, else twice (an
       online pass for its maximum and sum, then a pass that normalises); P is written.
    3. O = P V in the same tiles: a block of O stays while the tiles of P and V stream by; O is written.

    The tile size b is the largest with 2 b d + b^2 elements in fast memory.

    Chapter: the cost of attention and flash attention (the IO model).
    """
    elements = capacity // bytes_per_element
    b = min(n, int(math.sqrt(d * d + elements) - d))  # the largest b with b^2 + 2 b d <= elements
    while b > 0 and b * b + 2 * b * d > elements:  # (correct the floating-point square root either way)
        b -= 1
    while b < n and (b + 1) ** 2 + 2 * (b + 1) * d <= elements:
        b += 1
    _check_fits("standard attention", b, capacity, d, (2 * d + 1) * bytes_per_element)
    mem = FastMemory(capacity, bytes_per_element=bytes_per_element)
    for rows, row_tiles in _tiles(n, b):  # 1. S = Q K^T
        mem.load(rows * d, times=row_tiles)  # Q_i
        for cols, col_tiles in _tiles(n, b):
            mem.load(cols * d, times=row_tiles * col_tiles)  # K_j
            mem.hold(rows * cols)  # S_ij, computed in fast memory
            mem.store(rows * cols, times=row_tiles * col_tiles)
            mem.drop(rows * cols + cols * d)
        mem.drop(rows * d)
    if n + 2 <= elements:  # 2. P = softmax(S), one row at a time: the row fits
        mem.load(n, times=n)
        mem.store(n, times=n)
        mem.drop(n)
    else:  # the row does not fit: a pass for the running max and sum (m, l), a pass to normalise
        mem.hold(2)  # m, l
        for chunk, chunks in _tiles(n, elements - 2):
            mem.load(chunk, times=2 * n * chunks)
            mem.store(chunk, times=n * chunks)
            mem.drop(chunk)
        mem.drop(2)
    for rows, row_tiles in _tiles(n, b):  # 3. O = P V
        mem.hold(rows * d)  # O_i accumulates in fast memory
        for cols, col_tiles in _tiles(n, b):
            mem.load(rows * cols, times=row_tiles * col_tiles)  # P_ij
            mem.load(cols * d, times=row_tiles * col_tiles)  # V_j
            mem.drop(rows * cols + cols * d)
        mem.store(rows * d, times=row_tiles)
        mem.drop(rows * d)
    return mem.count()


@checked_by("_check_memory")
def flash_attention_block_sizes(d: int, capacity: int, *, bytes_per_element: int = 4) -> tuple[int, int]:
    """The tile sizes (B_r queries, B_c keys) that :func:`flash_attention_io` uses.

    The paper's Algorithm 1 keeps a key block outside and streams the query blocks, with
    B_c = ceil(M / 4d) keys and B_r = min(ceil(M / 4d), d) queries, and counts fast memory only up to
    a constant factor. Here the loops are the other way round (queries outside, as in FlashAttention-2),
    so the roles swap, and the sizes are chosen to fit exactly: B_c = min(M / 8d, d) keys, so that K_j and
    V_j take at most a quarter of the fast memory and a tile of scores is at most B_r x d, and as many
    queries B_r as fit with their output, statistics and a tile of scores:
    B_r (2d + 2 + B_c) + 2 B_c d <= M elements.

    Chapter: the cost of attention and flash attention (the IO model).
    """
    elements = capacity // bytes_per_element
    b_c = max(1, min(d, elements // (8 * d)))
    b_r = (elements - 2 * b_c * d) // (2 * d + 2 + b_c)
    _check_fits("flash attention", b_r, capacity, d, (4 * d + 3) * bytes_per_element)
    return b_r, b_c


@checked_by("_check_memory")
def flash_attention_io(n: int, d: int, capacity: int, *, bytes_per_element: int = 4) -> IOCount:
    r"""Slow-memory traffic of tiled (flash) attention with a fast memory of ``capacity`` bytes.

    The loop order of FlashAttention-2 (and of :func:`flash_attention_forward`): for each block of B_r
    queries, load Q_i once and keep O_i, m_i and l_i in fast memory while every block of B_c keys and
    values streams by; then write O_i and the log-sum-exp L_i. Q is read once, K and V once per query
    block, O and L written once: about 2 n^2 d / B_r + 2 n d elements, which is Theta(n^2 d^2 / M)
    because B_r is proportional to M / d (Theorem 2 of the FlashAttention paper).

    Chapter: the cost of attention and flash attention (the IO model).
    """
    b_r, b_c = flash_attention_block_sizes(d, capacity, bytes_per_element=bytes_per_element)
    mem = FastMemory(capacity, bytes_per_element=bytes_per_element)
    for rows, row_tiles in _tiles(n, b_r):
        mem.load(rows * d, times=row_tiles)  # Q_i
        mem.hold(rows * d + 2 * rows)  # O_i, m_i, l_i live in fast memory
        for cols, col_tiles in _tiles(n, b_c):
            mem.load(2 * cols * d, times=row_tiles * col_tiles)  # K_j and V_j
            mem.hold(rows * cols)  # S_ij, then P_ij in its place
            mem.drop(rows * cols + 2 * cols * d)
        mem.store(rows * d + rows, times=row_tiles)  # O_i and L_i
        mem.drop(2 * rows * d + 2 * rows)
    return mem.count()


# --- input checks -----------------------------------------------------------------------------------------
# A function names its checks with @checked_by: they run at the boundary only (flash_attention checks for its two
# passes, online_softmax for its blocks); FastMemory calls its own.


def _check_online_softmax_update(m, l, x) -> None:
    _checks.tensor("x", x, min_ndim=1, floating=True)
    if x.shape[-1] == 0:
        raise ValueError(f"x must hold at least one score per row (n >= 1), got shape {_checks.shape_str(x.shape)}")
    for name, stat in (("m", m), ("l", l)):
        _checks.tensor(name, stat, floating=True)
        if stat.dtype != x.dtype:
            raise TypeError(f"{name} and x must have the same dtype, got {name} {stat.dtype} and x {x.dtype}")
        if stat.shape != x.shape[:-1]:
            raise ValueError(
                f"{name} must have one number per row of x, shape {_checks.shape_str(x.shape[:-1])}, "
                f"got {_checks.shape_str(stat.shape)}"
            )


def _check_online_softmax(x, block_size) -> None:
    _checks.tensor("x", x, min_ndim=1, floating=True)
    _checks.positive_int("block_size", block_size)
    if x.shape[-1] == 0:
        raise ValueError(
            f"x must have at least one entry in its last dimension, got shape {_checks.shape_str(x.shape)}"
        )


def _check_flash_inputs(q, k, v, causal, offset, scale, block_q, block_k) -> None:
    check_qkv(q, k, v, same_batch=True)
    _checks.positive_int("block_q", block_q)
    _checks.positive_int("block_k", block_k)
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be True or False, got {causal!r}")
    if offset is not None:
        if not causal:
            raise ValueError("offset only applies to causal attention: pass causal=True, or drop the offset")
        if isinstance(offset, bool) or not isinstance(offset, int):
            raise TypeError(f"offset must be an integer, got {offset!r}")
    if scale is not None:
        _checks.positive_float("scale", scale)


def _check_flash_backward(grad_out, q, k, v, out, lse, causal, offset, scale, block_q, block_k) -> None:
    """The checks of :func:`flash_attention_backward`: those of the forward pass, and the shapes of its results."""
    _check_flash_inputs(q, k, v, causal, offset, scale, block_q, block_k)
    *batch, t_q, _ = q.shape
    shapes = {"grad_out": (*batch, t_q, v.shape[-1]), "out": (*batch, t_q, v.shape[-1]), "lse": (*batch, t_q)}
    for (name, shape), x in zip(shapes.items(), (grad_out, out, lse)):
        _checks.tensor(name, x, floating=True)
        if tuple(x.shape) != shape:
            raise ValueError(
                f"{name} must have shape {_checks.shape_str(shape)} (from q and v), got {_checks.shape_str(x.shape)}"
            )


def _check_memory(capacity, bytes_per_element, **sizes) -> tuple[int, ...]:
    """Integers >= 1: the ``sizes`` given (n, d), the capacity and the bytes per element; return them in that order."""
    named = {**sizes, "capacity": capacity, "bytes_per_element": bytes_per_element}
    return tuple(_checks.positive_int(name, value) for name, value in named.items())


def _check_fits(algorithm: str, tile: int, capacity: int, d: int, needs: int) -> None:
    """A tile of at least one row must fit in the fast memory."""
    if tile < 1:
        raise ValueError(
            f"capacity={capacity} bytes is too small for {algorithm} with d={d}: it needs at least {needs} bytes"
        )
