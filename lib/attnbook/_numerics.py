"""Numeric helpers shared by the attention paths and the norms."""

from __future__ import annotations

import torch

NEG_INF = float("-inf")


def work_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype to compute in: float32 for half-precision inputs (as fused kernels do), else their own.

    Scores beyond 65504 overflow float16, and a sum of squares overflows it sooner: attention and RMSNorm
    form such intermediates in float32 and return their results in the inputs' dtype.
    """
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
