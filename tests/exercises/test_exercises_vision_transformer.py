"""Checkers of the chapter on vision transformers: right answers pass, usual mistakes get their hint."""

import pytest
import torch
from attnbook import vit
from attnbook.exercises import ExerciseFailed
from attnbook.exercises import vision_transformer as ex
from exercise_helpers import stub


def test_patchify_checker():
    def right(images, p):
        B, C, H, W = images.shape
        x = images.reshape(B, C, H // p, p, W // p, p).permute(0, 2, 4, 1, 3, 5)
        return x.reshape(B, -1, C * p * p)

    def unfold(images, p):
        return torch.nn.functional.unfold(images, p, stride=p).transpose(1, 2)

    assert ex.check_patchify(right)
    assert ex.check_patchify(vit.patchify)
    # right values, but the exercise asks for reshape and permute: F.unfold (im2col) does the cutting
    with pytest.raises(ExerciseFailed, match="only reshape and permute"):
        ex.check_patchify(unfold)
    with pytest.raises(ExerciseFailed, match="only reshape and permute"):
        ex.check_patchify(lambda images, p: torch.nn.Unfold(p, stride=p)(images).mT)
    assert not ex.check_patchify(stub)

    def reshape_only(images, p):
        B, C, H, W = images.shape
        return images.reshape(B, (H // p) * (W // p), C * p * p)

    def channels_last(images, p):
        B, C, H, W = images.shape
        x = images.permute(0, 2, 3, 1).reshape(B, H // p, p, W // p, p, C).permute(0, 1, 3, 2, 4, 5)
        return x.reshape(B, -1, C * p * p)

    def column_major(images, p):
        return vit.patchify(images.transpose(-2, -1), p)  # the grid read down the columns... and patches transposed

    def column_major_exact(images, p):
        B, C, H, W = images.shape
        x = images.reshape(B, C, H // p, p, W // p, p).permute(0, 4, 2, 1, 3, 5)
        return x.reshape(B, -1, C * p * p)

    wrong = {
        "strips of consecutive pixels": reshape_only,
        "order \\(row, column, channel\\)": channels_last,
        "column by column": column_major_exact,
    }
    for hint, fn in wrong.items():
        with pytest.raises(ExerciseFailed, match=hint):
            ex.check_patchify(fn)
    with pytest.raises(ExerciseFailed, match="on test case 1"):  # wrong in an unforeseen way: where and how
        ex.check_patchify(column_major)


def test_n_tokens_checker():
    assert ex.check_n_tokens(lambda h, w, p: (h // p) * (w // p) + 1)
    assert not ex.check_n_tokens(stub)
    wrong = {
        "class token is missing": lambda h, w, p: (h // p) * (w // p),
        r"not H \* W / P": lambda h, w, p: h * w // p + 1,
        "rectangular": lambda h, w, p: (h // p) ** 2 + 1,
    }
    for hint, fn in wrong.items():
        with pytest.raises(ExerciseFailed, match=hint):
            ex.check_n_tokens(fn)


def test_vit_large_parameters_checker():
    D, F, L = 1024, 4096, 24
    per_layer = 4 * (D * D + D) + 2 * D * F + F + D + 4 * D
    total = L * per_layer + (3 * 16 * 16 * D + D) + D + 197 * D + 2 * D + (D * 1000 + 1000)
    assert ex.check_vit_large_parameters(total)
    assert ex.check_vit_large_parameters(float(total))
    assert not ex.check_vit_large_parameters(...)
    wrong = {
        "Table 1": 307_000_000,
        "head is missing": total - D * 1000 - 1000,
        "heads do not multiply": total + L * 4 * 15 * D * D,
        "position embeddings are missing": total - 198 * D,
        "biases and the LayerNorms": total - L * (4 * D + F + D + 4 * D) - 3 * D - 1000,
    }
    for hint, answer in wrong.items():
        with pytest.raises(ExerciseFailed, match=hint):
            ex.check_vit_large_parameters(answer)
    with pytest.raises(ExerciseFailed, match="too small"):
        ex.check_vit_large_parameters(86_000_000)


def test_vit_large_parameters_checker_wants_the_exact_count():
    """Each part a count may forget, alone or several at once, fails: the exercise says "exactly"."""
    D, F, L = 1024, 4096, 24
    per_layer = 4 * (D * D + D) + 2 * D * F + F + D + 4 * D
    total = L * per_layer + (3 * 16 * 16 * D + D) + D + 197 * D + 2 * D + (D * 1000 + 1000)
    parts = {"final LayerNorm": 2 * D, "class token": D, "its position row": D, "head bias": 1000, "patch bias": D}
    hints = {
        "final LayerNorm": "final LayerNorm",
        "class token": "the class token",
        "its position row": "197 rows",
        "head bias": "head's bias",
        "patch bias": "patch embedding's bias",
    }
    for part, size in parts.items():
        with pytest.raises(ExerciseFailed, match=hints[part]):
            ex.check_vit_large_parameters(total - size)
    with pytest.raises(ExerciseFailed, match="below the expected value"):
        ex.check_vit_large_parameters(total - sum(parts.values()))  # all five at once: 6,120 of 304 million
    for off_by in (-1, 1):
        with pytest.raises(ExerciseFailed):
            ex.check_vit_large_parameters(total + off_by)
    assert ex.check_vit_large_parameters(total + 0.25)  # a float that rounds to the count is the count
    wrong = {
        "not D": total - (2 * L + 1) * D,
        "two per block": total - L * 4 * D,
    }
    for hint, answer in wrong.items():
        with pytest.raises(ExerciseFailed, match=hint):
            ex.check_vit_large_parameters(answer)


def test_class_attention_map_checker():
    def right(weights, grid):
        return weights[:, :, 0, 1:].mean(dim=1).reshape(weights.shape[0], *grid)

    assert ex.check_class_attention_map(right)
    assert not ex.check_class_attention_map(stub)
    B = lambda w: w.shape[0]  # noqa: E731
    wrong = {
        r"attention \*to\* the class token": lambda w, g: w[:, :, 1:, 0].mean(1).reshape(B(w), *g),
        "only the first head": lambda w, g: w[:, 0, 0, 1:].reshape(B(w), *g),
        "heads are summed": lambda w, g: w[:, :, 0, 1:].sum(1).reshape(B(w), *g),
        "drop index 0": lambda w, g: w[:, :, 0, :-1].mean(1).reshape(B(w), *g),
        "drop the class token's weight on itself": lambda w, g: w[:, :, 0, :].mean(1).reshape(B(w), *g),
    }
    for hint, fn in wrong.items():
        with pytest.raises(ExerciseFailed, match=hint):
            ex.check_class_attention_map(fn)
