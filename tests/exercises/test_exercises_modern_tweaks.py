"""The checkers of the modern-tweaks exercises: right answers pass, usual mistakes get their hint, stubs are
'not attempted'.
"""

import pytest
import torch
import torch.nn.functional as F
from attnbook import positional
from attnbook.exercises import ExerciseFailed
from attnbook.exercises import modern_tweaks as ex


def _stub(*args):
    raise NotImplementedError


def test_rmsnorm():
    assert ex.check_rmsnorm(lambda x, w, eps: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w).passed
    assert not ex.check_rmsnorm(_stub).passed
    wrong = {
        "LayerNorm": lambda x, w, eps: F.layer_norm(x, x.shape[-1:], eps=eps) * w,
        "inside": lambda x, w, eps: x / (x.pow(2).mean(-1, keepdim=True).sqrt() + eps) * w,
        "weight": lambda x, w, eps: x / (x.pow(2).mean(-1, keepdim=True) + eps).sqrt(),
        "divides by the width": lambda x, w, eps: x / (x.pow(2).sum(-1, keepdim=True) + eps).sqrt() * w,
    }
    for fragment, fn in wrong.items():
        with pytest.raises(ExerciseFailed, match=fragment):
            ex.check_rmsnorm(fn)


def test_swiglu():
    assert ex.check_swiglu(lambda x, a, b, c: (F.silu(x @ a) * (x @ b)) @ c).passed
    assert not ex.check_swiglu(_stub).passed
    wrong = {
        "GLU": lambda x, a, b, c: (torch.sigmoid(x @ a) * (x @ b)) @ c,
        "belongs to x W_1": lambda x, a, b, c: ((x @ a) * F.silu(x @ b)) @ c,
        "ReGLU": lambda x, a, b, c: (F.relu(x @ a) * (x @ b)) @ c,
        "multiplies them": lambda x, a, b, c: (F.silu(x @ a) + (x @ b)) @ c,
        "stored \\(in, out\\)": lambda x, a, b, c: (F.silu(x @ a.T) * (x @ b.T)) @ c.T,
    }
    for fragment, fn in wrong.items():
        with pytest.raises(ExerciseFailed, match=fragment):
            ex.check_swiglu(fn)


def _rope(x, offset, sign=1.0, ignore_offset=False):
    Dh = x.shape[-1]
    start = 0 if ignore_offset else offset
    theta = positional.angles(torch.arange(start, start + x.shape[-2]), Dh).to(x.dtype) * sign
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x1 * theta.cos() - x2 * theta.sin(), x1 * theta.sin() + x2 * theta.cos()], -1).flatten(-2)


def test_rope():
    assert ex.check_rope(_rope).passed
    assert not ex.check_rope(_stub).passed
    with pytest.raises(ExerciseFailed, match="rotate-half"):
        ex.check_rope(ex._rope_halves)
    with pytest.raises(ExerciseFailed, match="offset is ignored"):
        ex.check_rope(lambda x, offset: _rope(x, offset, ignore_offset=True))
    with pytest.raises(ExerciseFailed, match="wrong way"):
        ex.check_rope(lambda x, offset: _rope(x, offset, sign=-1.0))
    with pytest.raises(ExerciseFailed, match="test case 1"):
        ex.check_rope(lambda x, offset: x)


def test_kv_cache_bytes():
    right = 2 * 32 * 8 * 128 * 4096 * 2
    assert ex.check_kv_cache_bytes(right).passed
    assert not ex.check_kv_cache_bytes(...).passed
    for value, fragment in (
        (right / 2, "keys \\*and\\* values"),
        (right * 4, "not the 32 query heads"),
        (right / 2 * 1, "keys \\*and\\* values"),
        (right / 32, "32 layers"),
        (right / 2 / 1, "keys"),
    ):
        with pytest.raises(ExerciseFailed, match=fragment):
            ex.check_kv_cache_bytes(value)
    with pytest.raises(ExerciseFailed, match="10 times the expected"):
        ex.check_kv_cache_bytes(right * 10)
