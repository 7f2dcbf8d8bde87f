"""Checkers of the chapter on self-attention and positional encoding: right answers pass, usual mistakes get
their hint.
"""

import math

import pytest
import torch
from attnbook import positional
from attnbook.exercises import ExerciseFailed
from attnbook.exercises import self_attention_positional_encoding as ex
from exercise_helpers import stub


def attend(Q, K, V, scale=None, dim=-1):
    scale = 1 / math.sqrt(Q.shape[-1]) if scale is None else scale
    return torch.softmax(Q @ K.transpose(-2, -1) * scale, dim=dim) @ V


def test_cross_attention_checker():
    assert ex.check_cross_attention(lambda X, Z, Wq, Wk, Wv: attend(X @ Wq, Z @ Wk, Z @ Wv))
    assert not ex.check_cross_attention(stub)
    wrong = {
        "that is self-attention": lambda X, Z, Wq, Wk, Wv: attend(X @ Wq, X @ Wk, X @ Wv),
        "the values come from X": lambda X, Z, Wq, Wk, Wv: attend(X @ Wq, Z @ Wk, X @ Wv),
        "roles are swapped": lambda X, Z, Wq, Wk, Wv: attend(Z @ Wq, X @ Wk, X @ Wv),
        "not scaled": lambda X, Z, Wq, Wk, Wv: attend(X @ Wq, Z @ Wk, Z @ Wv, scale=1.0),
        "width of the inputs": lambda X, Z, Wq, Wk, Wv: attend(X @ Wq, Z @ Wk, Z @ Wv, scale=X.shape[-1] ** -0.5),
        "wrong axis": lambda X, Z, Wq, Wk, Wv: attend(X @ Wq, Z @ Wk, Z @ Wv, dim=-2),
        "transposed": lambda X, Z, Wq, Wk, Wv: attend(X @ Wq.T, Z @ Wk.T, Z @ Wv.T),
    }
    for hint, fn in wrong.items():
        with pytest.raises(ExerciseFailed, match=hint):
            ex.check_cross_attention(fn)


def test_cross_attention_checker_explains_shape_errors():
    def untransposed_keys(X, Z, Wq, Wk, Wv):
        return torch.softmax((X @ Wq) @ (Z @ Wk), -1) @ (Z @ Wv)

    with pytest.raises(ExerciseFailed, match=r"raised RuntimeError.*[Cc]heck the shapes"):
        ex.check_cross_attention(untransposed_keys)


def right_2d(h, w, d):
    rows, cols = positional.sinusoidal(h, d // 2), positional.sinusoidal(w, d // 2)
    return torch.cat([rows[:, None].expand(h, w, -1), cols[None].expand(h, w, -1)], -1).reshape(h * w, d)


def test_sinusoidal_2d_checker():
    assert ex.check_sinusoidal_2d(right_2d)  # float32 answers are fine
    assert ex.check_sinusoidal_2d(lambda h, w, d: positional.sinusoidal_2d(h, w, d))
    assert not ex.check_sinusoidal_2d(stub)

    def halves_swapped(h, w, d):
        return right_2d(h, w, d).view(h * w, 2, d // 2).flip(1).reshape(h * w, d)

    def column_major(h, w, d):
        return right_2d(h, w, d).view(h, w, d).transpose(0, 1).reshape(h * w, d)

    def interleaved(h, w, d):
        x = right_2d(h, w, d).view(h * w, 2, d // 2)
        return x.transpose(1, 2).reshape(h * w, d)

    def rows_twice(h, w, d):
        rows = positional.sinusoidal(h, d // 2)[:, None].expand(h, w, -1)
        return torch.cat([rows, rows], -1).reshape(h * w, d)

    def truncated_full_width(h, w, d):
        rows, cols = positional.sinusoidal(h, d)[:, : d // 2], positional.sinusoidal(w, d)[:, : d // 2]
        return torch.cat([rows[:, None].expand(h, w, -1), cols[None].expand(h, w, -1)], -1).reshape(h * w, d)

    wrong = {
        "halves are swapped": halves_swapped,
        "column by column": column_major,
        "interleaved": interleaved,
        "both halves encode the row": rows_twice,
        "d_model / 2": truncated_full_width,
    }
    for hint, fn in wrong.items():
        with pytest.raises(ExerciseFailed, match=hint):
            ex.check_sinusoidal_2d(fn)
    with pytest.raises(ExerciseFailed, match=r"shape \(2, 3, 8\) where \(6, 8\) is expected"):
        ex.check_sinusoidal_2d(lambda h, w, d: right_2d(h, w, d).view(h, w, d))


def rotate(pe, k, sign=1.0, step=2.0, halves=False):
    d = pe.shape[-1]
    w = 10000.0 ** (-step * torch.arange(d // 2, dtype=pe.dtype) / d)
    c, s = torch.cos(k * w), sign * torch.sin(k * w)
    sin, cos = (pe[..., : d // 2], pe[..., d // 2 :]) if halves else (pe[..., 0::2], pe[..., 1::2])
    a, b = sin * c + cos * s, cos * c - sin * s
    return torch.cat([a, b], -1) if halves else torch.stack([a, b], -1).flatten(-2)


def test_shift_checker():
    assert ex.check_shift(rotate)
    assert not ex.check_shift(stub)

    def by_matrix(pe, k):  # the block-rotation matrix T_k of the chapter
        d = pe.shape[-1]
        T = torch.zeros(d, d, dtype=pe.dtype)
        for i, w in enumerate(positional.frequencies(d).tolist()):
            T[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = torch.tensor(
                [[math.cos(w * k), math.sin(w * k)], [-math.sin(w * k), math.cos(w * k)]]
            )
        return pe @ T.T

    assert ex.check_shift(by_matrix)
    wrong = {
        "wrong way": lambda pe, k: rotate(pe, k, sign=-1.0),
        "not the first and the second half": lambda pe, k: rotate(pe, k, halves=True),
        "exponent has 2i": lambda pe, k: rotate(pe, k, step=1.0),
    }
    for hint, fn in wrong.items():
        with pytest.raises(ExerciseFailed, match=hint):
            ex.check_shift(fn)
    with pytest.raises(ExerciseFailed, match=r"on test case 1, your function returns the rows as they are"):
        ex.check_shift(lambda pe, k: pe)
    with pytest.raises(ExerciseFailed, match=r"turns each \(sin, cos\) pair by a fixed angle, but not by k w_i"):
        ex.check_shift(lambda pe, k: rotate(pe, 2 * k))


def test_pe_self_dot_checker():
    assert ex.check_pe_self_dot(64)
    assert ex.check_pe_self_dot(torch.tensor(64.0))
    assert not ex.check_pe_self_dot(...)
    for answer, hint in [(128, "pairs contributes"), (8.0, "square of its length"), (1, "not normalised")]:
        with pytest.raises(ExerciseFailed, match=hint):
            ex.check_pe_self_dot(answer)
    with pytest.raises(ExerciseFailed, match="too large"):
        ex.check_pe_self_dot(70)
