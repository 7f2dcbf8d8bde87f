"""Checkers of the chapter on multi-head attention: right answers pass, usual mistakes get their hint."""

import math

import pytest
import torch
from attnbook.attention import MultiHeadAttention
from attnbook.exercises import ExerciseFailed
from attnbook.exercises import multi_head_attention as ex
from exercise_helpers import stub


def split(x, H):
    B, T, D = x.shape
    return x.view(B, T, H, D // H).transpose(1, 2)


def test_split_heads_checker():
    assert ex.check_split_heads(split)
    assert ex.check_split_heads(lambda x, H: x.unflatten(-1, (H, -1)).permute(0, 2, 1, 3))
    assert not ex.check_split_heads(stub)
    wrong = {
        "mixes up tokens and heads": lambda x, H: x.reshape(x.shape[0], H, x.shape[1], -1),
        "every H-th column": lambda x, H: x.view(*x.shape[:2], -1, H).permute(0, 3, 1, 2),
        "heads must come before the tokens": lambda x, H: x.view(*x.shape[:2], H, -1),
    }
    for hint, fn in wrong.items():
        with pytest.raises(ExerciseFailed, match=hint):
            ex.check_split_heads(fn)


def mha(x, Wq, Wk, Wv, Wo, H, scale_width=None, dim=-1, merge=True, out=True):
    B, T, D = x.shape
    q, k, v = (split(x @ W, H) for W in (Wq, Wk, Wv))
    w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(scale_width or D // H), dim=dim)
    y = w @ v
    y = y.transpose(1, 2).reshape(B, T, D) if merge else y.reshape(B, T, D)
    return y @ Wo if out else y


def test_multi_head_attention_checker():
    assert ex.check_multi_head_attention(mha)
    assert not ex.check_multi_head_attention(stub)

    def library(x, Wq, Wk, Wv, Wo, H):  # the library's layer with the same matrices agrees
        layer = MultiHeadAttention(x.shape[-1], H, bias=False).to(x.dtype)
        with torch.no_grad():
            for lin, W in ((layer.W_q, Wq), (layer.W_k, Wk), (layer.W_v, Wv), (layer.W_o, Wo)):
                lin.weight.copy_(W.T)
        return layer(x)

    assert ex.check_multi_head_attention(library)
    wrong = {
        "sqrt\\(Dh\\)": lambda x, *W: mha(x, *W, scale_width=x.shape[-1]),
        "without moving the head axis back": lambda x, *W: mha(x, *W, merge=False),
        "over the queries": lambda x, *W: mha(x, *W, dim=-2),
        "W_o is missing": lambda x, *W: mha(x, *W, out=False),
    }
    for hint, fn in wrong.items():
        with pytest.raises(ExerciseFailed, match=hint):
            ex.check_multi_head_attention(fn)


def test_parameter_count_checker():
    assert ex.check_parameter_count(4 * 512**2 + 4 * 512)
    assert ex.check_parameter_count(sum(p.numel() for p in MultiHeadAttention(512, 8).parameters()))
    assert not ex.check_parameter_count(...)
    for answer, hint in [
        (8 * (4 * 512**2 + 4 * 512), "no factor 8"),
        (4 * 512**2, "biases are missing"),
        (3 * 512**2 + 3 * 512, "W_o counts too"),
        (4 * 8 * 64**2 + 4 * 512, "D x Dh"),
    ]:
        with pytest.raises(ExerciseFailed, match=hint):
            ex.check_parameter_count(answer)


def test_weights_memory_checker():
    assert ex.check_weights_memory(512)
    assert ex.check_weights_memory(8 * 4096**2 * 4 / 2**20)
    assert not ex.check_weights_memory(...)
    for answer, hint in [
        (64, "multiply by H"),
        (128, "4 bytes each"),
        (2**29, "in MiB"),
        (1024, "not 8"),
        (8 * 4096**2 * 4 / 1e6, "not 10\\^6"),
    ]:
        with pytest.raises(ExerciseFailed, match=hint):
            ex.check_weights_memory(answer)
