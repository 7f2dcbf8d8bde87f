"""Checkers for the exercises of the chapter on the cost of attention, flash attention and its efficient variants."""

from __future__ import annotations

import torch

from .. import flash
from . import Mistake, Result, check_function, check_number

__all__ = [
    "check_online_softmax_update",
    "check_attention_memory",
    "check_merge_partial_attention",
    "check_attention_flops",
    "check_causal_linear_attention",
]


def _online_cases():
    g = torch.Generator().manual_seed(9)
    cases = []
    m = torch.full((3,), float("-inf"), dtype=torch.float64)
    l = torch.zeros(3, dtype=torch.float64)
    x = torch.randn(3, 4, generator=g, dtype=torch.float64)
    cases.append((m, l, x))  # the first block
    m, l = flash.online_softmax_update(m, l, x)
    cases.append((m, l, torch.randn(3, 5, generator=g, dtype=torch.float64) + 1.5))  # a later block, new maxima
    cases.append(
        (
            torch.tensor([2.0, 0.5], dtype=torch.float64),
            torch.tensor([1.3, 2.2], dtype=torch.float64),
            torch.tensor([[0.1, -1.0, 0.3], [3.0, 4.0, -2.0]], dtype=torch.float64),
        )
    )  # one row keeps its max
    cases.append(
        (
            torch.tensor([990.0], dtype=torch.float64),
            torch.tensor([1.5], dtype=torch.float64),
            torch.tensor([[1000.0, 995.0]], dtype=torch.float64),
        )
    )  # large scores
    m = torch.full((2, 3), float("-inf"), dtype=torch.float64)  # (...) of two dims: a batch of heads
    cases.append((m, torch.zeros(2, 3, dtype=torch.float64), torch.randn(2, 3, 4, generator=g, dtype=torch.float64)))
    inf = float("-inf")
    cases.append(  # a block entirely masked: the first row has seen nothing else, the second has
        (
            torch.tensor([inf, 0.5], dtype=torch.float64),
            torch.tensor([0.0, 2.0], dtype=torch.float64),
            torch.tensor([[inf, inf, inf], [inf, inf, inf]], dtype=torch.float64),
        )
    )
    return cases


def check_online_softmax_update(fn) -> Result:
    """``fn(m, l, x)`` must return the running maximum and sum after the block of scores ``x``."""

    def new_max(m, x):
        return torch.maximum(m, x.amax(dim=-1))

    def no_rescale(m, l, x):
        m_new = new_max(m, x)
        return m_new, l + torch.exp(x - m_new[..., None]).sum(-1)

    def inverted_rescale(m, l, x):
        m_new = new_max(m, x)
        return m_new, l * torch.exp(m_new - m) + torch.exp(x - m_new[..., None]).sum(-1)

    def block_not_shifted(m, l, x):
        m_new = new_max(m, x)
        return m_new, l * torch.exp(m - m_new) + torch.exp(x).sum(-1)

    def forgets_old_max(m, l, x):
        m_new = x.amax(dim=-1)
        return m_new, l * torch.exp(m - m_new) + torch.exp(x - m_new[..., None]).sum(-1)

    mistakes = [
        Mistake(
            "a row that has seen only -inf scores (a masked block) gives NaN: exp(-inf - (-inf)) is undefined. "
            "While the maximum is still -inf, subtract 0 instead (torch.where(m_new == -inf, 0.0, m_new)), "
            "so the row keeps m = -inf and l = 0.",
            lambda m, l, x: (
                new_max(m, x),
                l * torch.exp(m - new_max(m, x)) + torch.exp(x - new_max(m, x)[..., None]).sum(-1),
            ),
        ),
        Mistake(
            "the old sum l was computed relative to the old maximum m: when the maximum grows to m', "
            "multiply l by exp(m - m') before adding the new terms.",
            no_rescale,
        ),
        Mistake(
            "the rescaling factor is upside down: it is exp(m - m'), which is at most 1, since m' >= m.",
            inverted_rescale,
        ),
        Mistake("the new terms must be measured from the new maximum too: add sum_j exp(x_j - m').", block_not_shifted),
        Mistake(
            "the new maximum must include the old one: m' = max(m, max_j x_j), not just the block's maximum.",
            forgets_old_max,
        ),
    ]
    return check_function(
        fn,
        exercise="online softmax update",
        reference=flash.online_softmax_update,
        cases=_online_cases(),
        mistakes=mistakes,
        atol=1e-9,
        rtol=1e-7,
    )


def check_attention_memory(answer, *, batch: int = 8, heads: int = 12, length: int = 4096) -> Result:
    """GiB held by one layer's attention weights (batch, heads, length, length) in float32."""
    gib = 2.0**30

    def size(b, h, n, bytes_per):
        return b * h * n * n * bytes_per / gib

    expected = size(batch, heads, length, 4)
    return check_number(
        answer,
        exercise="memory of the attention weights",
        expected=expected,
        rel_tol=0.02,
        mistakes=[
            ("that is the size in GB (10^9 bytes); the question asks for GiB (2^30 bytes).", expected * gib / 1e9),
            ("every head has its own weight matrix: multiply by the number of heads.", size(batch, 1, length, 4)),
            ("every sequence in the batch has its own weights: multiply by the batch size.", size(1, heads, length, 4)),
            ("a float32 number takes 4 bytes, not 2 (that would be float16).", size(batch, heads, length, 2)),
            ("a float32 number takes 4 bytes, not 32: 32 is its size in bits.", size(batch, heads, length, 32)),
            (
                "a float32 number takes 4 bytes: the count of numbers must be multiplied by 4.",
                size(batch, heads, length, 1),
            ),
            (
                "the weight matrix is length x length per head, not length x head width.",
                batch * heads * length * 64 * 4 / gib,
            ),
        ],
    )


def _merge_reference(o1, lse1, o2, lse2):
    lse = torch.logaddexp(lse1, lse2)  # (..., Tq)
    return (torch.exp(lse1 - lse).unsqueeze(-1) * o1 + torch.exp(lse2 - lse).unsqueeze(-1) * o2), lse


def _merge_cases():
    g = torch.Generator().manual_seed(11)
    cases = []
    for batch, t_q, t_k1, t_k2, d, spread in [
        ((), 3, 4, 6, 5, 1.0),
        ((2,), 4, 7, 3, 8, 1.0),
        ((2, 2), 2, 5, 5, 4, 40.0),
    ]:
        q = torch.randn(*batch, t_q, d, generator=g, dtype=torch.float64) * spread
        k1 = torch.randn(*batch, t_k1, d, generator=g, dtype=torch.float64)
        k2 = torch.randn(*batch, t_k2, d, generator=g, dtype=torch.float64)
        v1 = torch.randn(*batch, t_k1, d, generator=g, dtype=torch.float64)
        v2 = torch.randn(*batch, t_k2, d, generator=g, dtype=torch.float64)
        o1, lse1 = flash.flash_attention_forward(q, k1, v1)
        o2, lse2 = flash.flash_attention_forward(q, k2, v2)
        cases.append((o1, lse1, o2, lse2))
    return cases


def check_merge_partial_attention(fn) -> Result:
    """``fn(o1, lse1, o2, lse2)`` must return the attention output over both key sets, and its log-sum-exp."""

    def average(o1, lse1, o2, lse2):
        return (o1 + o2) / 2, torch.logaddexp(lse1, lse2)

    def not_normalised(o1, lse1, o2, lse2):
        lse = torch.logaddexp(lse1, lse2)
        return torch.exp(lse1).unsqueeze(-1) * o1 + torch.exp(lse2).unsqueeze(-1) * o2, lse

    def lse_added(o1, lse1, o2, lse2):
        out, _ = _merge_reference(o1, lse1, o2, lse2)
        return out, lse1 + lse2

    def lse_max(o1, lse1, o2, lse2):
        out, _ = _merge_reference(o1, lse1, o2, lse2)
        return out, torch.maximum(lse1, lse2)

    mistakes = [
        Mistake(
            "the two halves are not equally important: weight each by its share of the total softmax "
            "denominator, exp(lse_part - lse_total).",
            average,
        ),
        Mistake(
            "exp(lse_part) is the part's softmax denominator; divide by the total, exp(lse_total), so the "
            "weights sum to 1 (and compute them as exp(lse_part - lse_total) to avoid overflow).",
            not_normalised,
        ),
        Mistake(
            "the denominators add, so the log-sum-exps combine as log(exp(lse1) + exp(lse2)) "
            "(torch.logaddexp), not lse1 + lse2.",
            lse_added,
        ),
        Mistake(
            "the combined log-sum-exp is log(exp(lse1) + exp(lse2)), which is larger than the maximum of "
            "the two: use torch.logaddexp.",
            lse_max,
        ),
    ]
    return check_function(
        fn,
        exercise="merge two partial attention results",
        reference=_merge_reference,
        cases=_merge_cases(),
        mistakes=mistakes,
        atol=1e-9,
        rtol=1e-7,
        error_hints=[
            (
                "must match the size",
                "o1 has shape (..., Tq, Dv) and lse1 (..., Tq): "
                "add a last dimension to the weights with .unsqueeze(-1).",
            )
        ],
        gradients=True,
    )


def check_attention_flops(answer, *, length: int = 2048, width: int = 64) -> Result:
    """FLOPs of the two matrix products of one head's attention, Q K^T and P V (2 per multiply-add)."""
    n, d = length, width
    return check_number(
        answer,
        exercise="FLOPs of attention",
        expected=4 * n * n * d,
        rel_tol=0.02,
        mistakes=[
            (
                "Q K^T and P V each take T^2 d multiply-adds, that is 2 T^2 d FLOPs (a multiply and an add each); "
                "count both products, and 2 FLOPs per multiply-add.",
                2 * n * n * d,
            ),
            (
                "that is the multiply-adds of one product; there are two products, and each multiply-add is 2 FLOPs.",
                n * n * d,
            ),
            (
                "T d^2 is the cost of a projection such as X W_q; the attention products cost T^2 d multiply-adds "
                "each.",
                4 * n * d * d,
            ),
        ],
    )


def _phi(x):
    return torch.nn.functional.elu(x) + 1  # the feature map of linear attention


def _causal_linear_reference(q, k, v):
    """o_t = phi(q_t) . sum_{j<=t} phi(k_j) v_j^T / phi(q_t) . sum_{j<=t} phi(k_j), as a masked T x T product."""
    weights = (_phi(q) @ _phi(k).T).tril()  # (T, T): only j <= t
    return weights @ v / weights.sum(dim=-1, keepdim=True)  # (T, dv)


def _causal_linear_cases():
    g = torch.Generator().manual_seed(13)
    cases = []
    for t, d_k, d_v, spread in ((1, 3, 2, 1.0), (6, 4, 3, 1.0), (9, 2, 5, 2.0), (16, 8, 8, 0.5)):
        q, k = (torch.randn(t, d_k, generator=g, dtype=torch.float64) * spread for _ in range(2))
        cases.append((q, k, torch.randn(t, d_v, generator=g, dtype=torch.float64)))
    return cases


def check_causal_linear_attention(fn) -> Result:
    """``fn(q, k, v)`` must return causal linear attention with phi(x) = elu(x) + 1, (T, d) x3 -> (T, dv)."""

    def not_causal(q, k, v):
        weights = _phi(q) @ _phi(k).T  # (T, T)
        return weights @ v / weights.sum(dim=-1, keepdim=True)

    def excludes_itself(q, k, v):
        weights = (_phi(q) @ _phi(k).T).tril(-1)
        return torch.nan_to_num(weights @ v / weights.sum(dim=-1, keepdim=True))

    def not_normalised(q, k, v):
        return (_phi(q) @ _phi(k).T).tril() @ v

    def no_feature_map(q, k, v):
        weights = (q @ k.T).tril()
        return weights @ v / weights.sum(dim=-1, keepdim=True)

    def softmax(q, k, v, scale=1.0):
        scores = (q @ k.T * scale).masked_fill(torch.ones(len(q), len(k), dtype=torch.bool).triu(1), float("-inf"))
        return torch.softmax(scores, dim=-1) @ v

    mistakes = [
        Mistake(
            "output t may read only the keys j <= t: use running sums along the sequence (torch.cumsum), "
            "not sums over all T keys.",
            not_causal,
        ),
        Mistake("the running sums include j = t itself: a query reads its own key and value too.", excludes_itself),
        Mistake(
            "divide by phi(q_t) . sum_{j<=t} phi(k_j), the sum of the weights, so that they add up to 1.",
            not_normalised,
        ),
        Mistake(
            "apply the feature map phi(x) = elu(x) + 1 to the queries and the keys: it keeps every weight positive.",
            no_feature_map,
        ),
        Mistake(
            "that is causal softmax attention; linear attention puts phi(q_t) . phi(k_j) in place of exp(q_t . k_j).",
            softmax,
        ),
        Mistake(
            "that is causal softmax attention; linear attention puts phi(q_t) . phi(k_j) in place of "
            "exp(q_t . k_j / sqrt(d)).",
            lambda q, k, v: softmax(q, k, v, scale=q.shape[-1] ** -0.5),
        ),
    ]
    return check_function(
        fn,
        exercise="causal linear attention",
        reference=_causal_linear_reference,
        cases=_causal_linear_cases(),
        mistakes=mistakes,
        atol=1e-9,
        rtol=1e-7,
        gradients=True,
    )
