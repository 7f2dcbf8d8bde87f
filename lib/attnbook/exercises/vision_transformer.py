"""Checkers for the exercises of the chapter on vision transformers."""

from __future__ import annotations

import torch

from .. import vit
from . import ExerciseFailed, Mistake, Result, check_function, check_number, method

__all__ = ["check_patchify", "check_n_tokens", "check_vit_large_parameters", "check_class_attention_map"]


def _images(g: torch.Generator, *shape) -> torch.Tensor:
    return torch.randn(*shape, generator=g, dtype=torch.float64)


def check_patchify(fn) -> Result:
    """``fn(images, patch_size)``: (B, C, H, W) -> (B, T, C*P*P), patches row by row, each flattened (c, i, j)."""
    g = torch.Generator().manual_seed(10)
    cases = [
        (_images(g, 2, 1, 4, 4), 2),
        (_images(g, 1, 3, 6, 4), 2),  # several channels, a rectangular image
        (_images(g, 2, 2, 8, 12), 4),
    ]

    def strips(images, p):
        B, C, H, W = images.shape
        return images.reshape(B, (H // p) * (W // p), C * p * p)

    def channels_last(images, p):
        B, C, H, W = images.shape
        x = images.reshape(B, C, H // p, p, W // p, p).permute(0, 2, 4, 3, 5, 1)  # (B, Hg, Wg, P, P, C)
        return x.reshape(B, (H // p) * (W // p), C * p * p)

    def column_major(images, p):
        B, C, H, W = images.shape
        x = images.reshape(B, C, H // p, p, W // p, p).permute(0, 4, 2, 1, 3, 5)  # (B, Wg, Hg, C, P, P)
        return x.reshape(B, (H // p) * (W // p), C * p * p)

    mistakes = [
        Mistake(
            "a plain reshape cuts the image into strips of consecutive pixels, not P x P squares: split H "
            "into (H/P, P) and W into (W/P, P) first, then permute so that the two grid axes come before the "
            "channel and the two within-patch axes.",
            strips,
        ),
        Mistake(
            "the patches are the right squares, but each one is flattened in the order (row, column, channel); "
            "this exercise asks for channel first, (c, i, j), the layout of a Conv2d kernel (D, C, P, P).",
            channels_last,
        ),
        Mistake(
            "the patches are listed column by column; list them row by row, as text is read (the grid's row "
            "axis before its column axis).",
            column_major,
        ),
    ]
    result = check_function(
        fn, exercise="patchify", reference=vit.patchify, cases=cases, mistakes=mistakes, atol=0, rtol=0
    )
    if result.passed and "im2col" in method.operations(fn, cases[1]):  # what F.unfold and nn.Unfold run
        raise ExerciseFailed(
            "patchify",
            "your patches are right, but F.unfold cut them for you; the exercise asks for only reshape and "
            "permute: split H into (H/P, P) and W into (W/P, P), then permute the axes into place.",
        )
    return result


def check_n_tokens(fn) -> Result:
    """``fn(height, width, patch_size)``: the number of tokens a ViT with a class token reads."""
    cases = [(224, 224, 16), (384, 384, 16), (8, 8, 2), (224, 320, 16), (32, 48, 8)]
    mistakes = [
        Mistake(
            "the class token is missing: the sequence is the patches plus one class token in front.",
            lambda h, w, p: (h // p) * (w // p),
        ),
        Mistake(
            "a patch covers P x P pixels, so the number of patches is (H / P) * (W / P), not H * W / P.",
            lambda h, w, p: h * w // p + 1,
        ),
        Mistake(
            "for a rectangular image the grid is (H / P) x (W / P): use the width for the columns.",
            lambda h, w, p: (h // p) ** 2 + 1,
        ),
    ]
    return check_function(
        fn,
        exercise="number of tokens",
        reference=lambda h, w, p: vit.n_tokens((h, w), p),
        cases=cases,
        mistakes=mistakes,
        integers=True,
    )


def _large_counts() -> dict[str, int]:
    return vit.vit_parameter_count(vit.ViTConfig.preset("large", patch_size=16))


def check_vit_large_parameters(answer) -> Result:
    """The parameters of ViT-L/16 (24 layers, D = 1024, MLP 4096, 16 heads) on 224 x 224 RGB images, 1000 classes,
    counted exactly."""
    counts = _large_counts()
    total = counts["total"]
    L, D, F, H = vit.PRESETS["large"]
    biases_and_norms = L * (4 * D + F + D + 4 * D) + 2 * D + D + 1000  # blocks, final norm, patch embedding, head
    weights_only = total - biases_and_norms
    return check_number(
        answer,
        exercise="parameters of ViT-L/16",
        expected=float(total),  # exactly: one forgotten bias is a wrong count
        mistakes=[
            (
                "307M is the number printed in Table 1 of the paper, but ViT-L/16 has fewer (307M is about the size of "
                "ViT-L/32, with its larger patch embedding): count every part of the /16 model (patch embedding, class "
                "token, positions, the blocks, the final LayerNorm, the head).",
                307e6,
            ),
            (
                "the classification head is missing: a Linear layer from D to 1000 classes, with its biases.",
                float(total - counts["head"]),
            ),
            ("the head's bias is missing: 1000 numbers, one per class.", float(total - 1000)),
            (
                "the biases and the LayerNorms are missing (each Linear has a bias of its output width; each "
                "LayerNorm has a gain and a bias of width D).",
                float(weights_only),
            ),
            (
                "the heads do not multiply the parameters: the H heads share W_q, W_k, W_v (each D x D, one block of "
                "D/H columns per head), so attention has 4 (D^2 + D) parameters per layer whatever H is.",
                float(total + L * 4 * (H - 1) * D * D),
            ),
            (
                "the class token and the position embeddings are missing: (T + 1) * D + D more, with T = 196 patches.",
                float(total - counts["class token"] - counts["position embeddings"]),
            ),
            (
                "D = 1,024 parameters are missing: the class token (a learned vector of width D), or its row of the "
                "position table (T + 1 = 197 rows, not 196), or the patch embedding's bias (D).",
                float(total - D),
            ),
            (
                "2 D = 2,048 parameters are missing: the final LayerNorm after the last block (a gain and a bias of "
                "width D), or two of the class token, its position row and the patch embedding's bias.",
                float(total - 2 * D),
            ),
            (
                "a LayerNorm has two vectors of width D, a gain and a bias: 2 D parameters, not D.",
                float(total - (2 * L + 1) * D),
            ),
            (
                "the LayerNorms of the blocks are missing: two per block, 2 D parameters each.",
                float(total - L * 4 * D),
            ),
        ],
        parts={
            "the patch embedding (16 x 16 x 3 x D + D)": counts["patch embedding"],
            "the position table (197 x D)": counts["position embeddings"],
            "the attention layers (4 (D^2 + D) per block)": counts["attention (all layers)"],
            "the MLPs (2 D F + F + D per block)": counts["MLP (all layers)"],
            "the head (1000 D + 1000)": counts["head"],
            "one block's attention (4 (D^2 + D))": 4 * (D * D + D),
            "one block's MLP (2 D F + F + D)": 2 * D * F + F + D,
            "one block": (counts["attention (all layers)"] + counts["MLP (all layers)"]) // L + 4 * D,
            "one of the attention's four projections in every block (D^2 + D each)": L * (D * D + D),
            "the MLP's first bias in every block (F each)": L * F,
            "the attention's four biases in every block (4 D each)": L * 4 * D,
            "the MLP's second bias in every block (D each)": L * D,
        },
    )


def _softmax_weights(g: torch.Generator, L_B_H_T: tuple[int, int, int]) -> torch.Tensor:
    B, H, T = L_B_H_T
    return torch.softmax(torch.randn(B, H, T, T, generator=g, dtype=torch.float64) * 2, dim=-1)


def check_class_attention_map(fn) -> Result:
    """``fn(weights, grid)``: (B, H, T, T) weights of one layer -> (B, Hg, Wg), the class token's head-averaged
    attention to each patch."""
    g = torch.Generator().manual_seed(12)
    cases = [
        (_softmax_weights(g, (2, 4, 17)), (4, 4)),
        (_softmax_weights(g, (3, 2, 7)), (2, 3)),  # a rectangular grid
        (_softmax_weights(g, (1, 3, 10)), (3, 3)),
    ]

    def reference(w, grid):
        return vit.class_attention_maps([w], grid)[0]

    def grid_of(row, grid):
        return row.reshape(row.shape[0], *grid)

    mistakes = [
        Mistake(
            "that is the attention *to* the class token (column 0); the class token's attention is its "
            "row: weights[:, :, 0, 1:].",
            lambda w, grid: grid_of(w[:, :, 1:, 0].mean(1), grid),
        ),
        Mistake(
            "only the first head is used; average the row over all heads (dimension 1).",
            lambda w, grid: grid_of(w[:, 0, 0, 1:], grid),
        ),
        Mistake(
            "the heads are summed; average them, so that the map is still a set of weights summing to at most 1.",
            lambda w, grid: grid_of(w[:, :, 0, 1:].sum(1), grid),
        ),
        Mistake(
            "entry 0 of the row is the class token's weight on itself and the last patch is missing: drop "
            "index 0 (weights[..., 0, 1:]), not the last one.",
            lambda w, grid: grid_of(w[:, :, 0, :-1].mean(1), grid),
        ),
    ]
    return check_function(
        fn,
        exercise="class-token attention map",
        reference=reference,
        cases=cases,
        mistakes=mistakes,
        error_hints=[
            (
                "invalid for input of size",
                "row 0 has T = 1 + Hg * Wg entries: drop the "
                "class token's weight on itself (index 0) before reshaping to the grid.",
            )
        ],
    )
