"""Positional encodings: telling a permutation-equivariant attention layer where each token sits.

Self-attention treats its input as a set, so order must be put into the vectors themselves. This module
holds the encodings that are *added* to the token embeddings:

- :func:`sinusoidal` and :class:`SinusoidalPositionalEncoding`: the fixed sine/cosine encoding of
  Vaswani et al. (2017), PE(pos, 2i) = sin(pos * w_i), PE(pos, 2i+1) = cos(pos * w_i) with
  w_i = base^(-2i / d_model) for i = 0, ..., d_model/2 - 1;
- :class:`LearnedPositionalEmbedding`: one trained vector per position (GPT, BERT, ViT);
- :func:`sinusoidal_2d` and :class:`SinusoidalPositionalEncoding2D`: row and column encodings for a grid
  of image patches, each in half of the width.

The angles pos * w_i (:func:`frequencies`, :func:`angles`) are shared on purpose: rotary embeddings
(RoPE, chapter on modern tweaks) rotate each pair (2i, 2i+1) of the queries and keys by exactly these
angles instead of adding a vector, so they can reuse them. Every module here takes an ``offset`` (the
position of the first token), which generation with a cache needs.

``POSITIONALS`` names the position tables a model of ``attnbook.models`` adds to its token embeddings
(``TransformerConfig(positional=...)``): learned, sinusoidal, none, or RoPE (nothing added: the attention
rotates queries and keys).

Chapter: self-attention and positional encoding (2D encodings are used again in the vision transformer).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from . import _checks
from ._checks import checked_by

__all__ = [
    "frequencies",
    "angles",
    "sinusoidal",
    "sinusoidal_2d",
    "SinusoidalPositionalEncoding",
    "LearnedPositionalEmbedding",
    "SinusoidalPositionalEncoding2D",
    "apply_rope",
    "POSITIONALS",
]


@checked_by("_check_frequencies")
def frequencies(d_model: int, *, base: float = 10000.0, device=None) -> torch.Tensor:
    """The angular frequencies w_i = base^(-2i / d_model) for i = 0, ..., d_model/2 - 1 (float64).

    Wavelengths 2 pi / w_i run geometrically from 2 pi (i = 0) to almost 2 pi * base.

    Shapes:
        return: (d_model / 2,)

    Chapter: self-attention and positional encoding.
    """
    i = torch.arange(d_model // 2, dtype=torch.float64, device=device)  # (D/2,)
    return float(base) ** (-2.0 * i / d_model)  # (D/2,)


@checked_by("_check_angles")
def angles(positions, d_model: int, *, base: float = 10000.0) -> torch.Tensor:
    """The angles pos * w_i of every position and frequency (float64).

    Shapes:
        positions: (...,) integer or real positions (a tensor, a list, or an int n for 0, ..., n-1)
        return:    (..., d_model / 2)

    Chapter: self-attention and positional encoding (rotary embeddings reuse these angles).
    """
    positions = torch.arange(positions) if isinstance(positions, int) else torch.as_tensor(positions)  # (...,)
    w = frequencies(d_model, base=base, device=positions.device)  # (D/2,)
    return positions.to(torch.float64).unsqueeze(-1) * w  # (..., D/2)


@checked_by("_check_sinusoidal")
def sinusoidal(
    n_positions: int,
    d_model: int,
    *,
    base: float = 10000.0,
    offset: int = 0,
    dtype: torch.dtype = torch.float32,
    device=None,
) -> torch.Tensor:
    r"""The sinusoidal encodings of positions offset, ..., offset + n_positions - 1.

    PE[pos, 2i] = sin(pos * w_i) and PE[pos, 2i+1] = cos(pos * w_i), with w_i = base^(-2i/d_model) and
    i = 0, ..., d_model/2 - 1: even dimensions hold sines, odd dimensions cosines, one frequency per pair.
    Computed in float64, then converted to ``dtype``.

    Shapes:
        return: (n_positions, d_model)

    Chapter: self-attention and positional encoding.
    """
    theta = angles(torch.arange(offset, offset + n_positions), d_model, base=base)  # (T, D/2)
    pe = torch.stack([theta.sin(), theta.cos()], dim=-1)  # (T, D/2, 2): (sin, cos) per frequency
    return pe.flatten(-2).to(dtype).to(device)  # (T, D): sin, cos, sin, cos, ...


@checked_by("_check_grid")
def sinusoidal_2d(
    height: int, width: int, d_model: int, *, base: float = 10000.0, dtype: torch.dtype = torch.float32, device=None
) -> torch.Tensor:
    """Sinusoidal encodings of a height x width grid: the row's encoding, then the column's.

    The first d_model/2 dimensions are ``sinusoidal(height, d_model/2)`` of the row index, the last
    d_model/2 those of the column index. Grid cells are listed row by row (row-major), the order in
    which ``x.flatten(2).transpose(1, 2)`` lists the patches of a (B, D, height, width) feature map.

    Shapes:
        return: (height * width, d_model)

    Chapter: self-attention and positional encoding; used by the vision transformer.
    """
    rows = sinusoidal(height, d_model // 2, base=base, dtype=torch.float64)  # (Hg, D/2)
    cols = sinusoidal(width, d_model // 2, base=base, dtype=torch.float64)  # (Wg, D/2)
    grid = torch.cat(
        [rows[:, None, :].expand(height, width, -1), cols[None, :, :].expand(height, width, -1)], dim=-1
    )  # (Hg, Wg, D)
    return grid.reshape(height * width, d_model).to(dtype).to(device)  # (Hg * Wg, D)


class SinusoidalPositionalEncoding(nn.Module):
    """Adds the fixed sinusoidal encoding of each position to a sequence of vectors (then dropout).

    The table for the first ``max_len`` positions is a non-persistent buffer; longer sequences get
    their encodings computed on the fly, since a formula extends to any position.

    Shapes:
        x:      (..., T, D), typically (B, T, D)
        return: (..., T, D), x[..., t, :] + PE[offset + t]

    Chapter: self-attention and positional encoding.
    """

    def __init__(self, d_model: int, max_len: int = 1024, *, base: float = 10000.0, dropout: float = 0.0):
        super().__init__()
        self.d_model, self.max_len, self.base, dropout = _check_table(d_model, max_len, base, dropout)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("pe", sinusoidal(max_len, d_model, base=base), persistent=False)  # (max_len, D)

    @checked_by("_check_encoding")
    def encoding(self, n_positions: int, offset: int = 0) -> torch.Tensor:
        """PE for positions offset, ..., offset + n_positions - 1, shape (n_positions, D)."""
        if offset + n_positions <= self.max_len:
            return self.pe[offset : offset + n_positions]  # (T, D)
        return sinusoidal(
            n_positions, self.d_model, base=self.base, offset=offset, dtype=self.pe.dtype, device=self.pe.device
        )  # (T, D)

    @checked_by("_check_input")
    def forward(self, x: torch.Tensor, *, offset: int = 0) -> torch.Tensor:
        return self.dropout(x + self.encoding(x.shape[-2], offset).to(x.dtype))  # (..., T, D)

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, max_len={self.max_len}, base={self.base:g}"


class LearnedPositionalEmbedding(nn.Module):
    """Adds a trained vector per position (a lookup table of ``max_len`` rows) to a sequence of vectors.

    The parameter ``weight`` is initialised from N(0, init_std^2). Unlike the sinusoidal encoding, there
    is nothing to say about positions beyond ``max_len``: asking for one is an error.

    Shapes:
        x:      (..., T, D), typically (B, T, D)
        return: (..., T, D), x[..., t, :] + weight[offset + t]

    Chapter: self-attention and positional encoding.
    """

    def __init__(self, d_model: int, max_len: int, *, dropout: float = 0.0, init_std: float = 0.02):
        super().__init__()
        self.d_model, self.max_len, init_std, dropout = _check_learned(d_model, max_len, init_std, dropout)
        self.weight = nn.Parameter(torch.randn(max_len, d_model) * init_std)
        self.dropout = nn.Dropout(dropout)

    @checked_by("_check_learned_range")
    def encoding(self, n_positions: int, offset: int = 0) -> torch.Tensor:
        """The learned vectors of positions offset, ..., offset + n_positions - 1, shape (n_positions, D)."""
        return self.weight[offset : offset + n_positions]  # (T, D)

    @checked_by("_check_input")
    def forward(self, x: torch.Tensor, *, offset: int = 0) -> torch.Tensor:
        return self.dropout(x + self.encoding(x.shape[-2], offset))  # (..., T, D)

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, max_len={self.max_len}"


class SinusoidalPositionalEncoding2D(nn.Module):
    """Adds the 2D sinusoidal encoding of each cell of a height x width grid to its vector (row-major).

    Add it to the patch tokens before prepending a class token (which then has no position), or
    use the buffer ``pe`` directly.

    Shapes:
        x:      (..., height * width, D), typically (B, N, D) with N patches
        return: (..., height * width, D)

    Chapter: self-attention and positional encoding; used by the vision transformer.
    """

    def __init__(self, d_model: int, height: int, width: int, *, base: float = 10000.0):
        super().__init__()
        self.d_model, self.height, self.width = d_model, height, width
        self.register_buffer("pe", sinusoidal_2d(height, width, d_model, base=base), persistent=False)  # (N, D)

    @checked_by("_check_input")
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.pe.to(x.dtype)  # (..., N, D)

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, height={self.height}, width={self.width}"


@checked_by("_check_rope")
def apply_rope(x: torch.Tensor, *, offset: int = 0, base: float = 10000.0) -> torch.Tensor:
    r"""Rotary position embedding (RoPE): rotate each pair (2i, 2i+1) of x at position p by the angle p * w_i.

    With theta = p * w_i (the angles of :func:`angles`, w_i = base^(-2i / Dh)):
    out[2i] = x[2i] cos(theta) - x[2i+1] sin(theta) and out[2i+1] = x[2i] sin(theta) + x[2i+1] cos(theta).
    Applied to queries and keys, it makes q_m . k_n depend on the positions only through m - n, and it
    keeps every vector's norm. Positions are offset, ..., offset + T - 1 along dimension -2.

    Shapes:
        x:      (..., T, Dh), typically (B, H, T, Dh) queries or keys; Dh even
        return: (..., T, Dh)

    Chapter: modern tweaks (RoPE).
    """
    T = x.shape[-2]
    theta = angles(torch.arange(offset, offset + T, device=x.device), x.shape[-1], base=base)  # (T, Dh/2)
    cos, sin = theta.cos().to(x.dtype), theta.sin().to(x.dtype)  # (T, Dh/2) each
    x1, x2 = x[..., 0::2], x[..., 1::2]  # (..., T, Dh/2): the two coordinates of each pair
    out = torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)  # (..., T, Dh/2, 2)
    return out.flatten(-2)  # (..., T, Dh)


# --- The position tables of the models (attnbook.models) --------------------------------------------------
# name -> factory(block_size, d_model) returning a module whose forward(T, offset) gives (T, D) to add to the
# token embeddings of positions offset, ..., offset + T - 1.


class LearnedPositions(nn.Module):
    """A learned vector per position, added to the token embeddings (GPT-2, the lab).

    Shapes:
        return of forward(T): (T, D)
    """

    def __init__(self, block_size: int, d_model: int):
        super().__init__()
        self.table = LearnedPositionalEmbedding(d_model, block_size)  # its weight: (block_size, D)

    def forward(self, T: int, offset: int = 0) -> torch.Tensor:
        return self.table.encoding(T, offset)  # (T, D)


class SinusoidalPositions(nn.Module):
    r"""The fixed encoding of the 2017 paper, :func:`sinusoidal`: PE[p, 2i] = sin(p / 10000^{2i/D}),
    PE[p, 2i+1] = cos(same).

    Kept as a non-persistent buffer: not a parameter, not in the state dict.

    Shapes:
        return of forward(T): (T, D)
    """

    def __init__(self, block_size: int, d_model: int):
        super().__init__()
        self.register_buffer("table", sinusoidal(block_size, d_model), persistent=False)  # (T, D)

    def forward(self, T: int, offset: int = 0) -> torch.Tensor:
        return self.table[offset : offset + T]  # (T, D)


class NoPositions(nn.Module):
    """No positional information at all (for experiments; a causal mask still leaks some)."""

    def __init__(self, block_size: int, d_model: int):
        super().__init__()
        self.d_model = d_model

    def forward(self, T: int, offset: int = 0) -> torch.Tensor:
        return torch.zeros(T, self.d_model)  # (T, D), broadcast-added


POSITIONALS: dict[str, Callable[[int, int], nn.Module]] = {
    "learned": LearnedPositions,
    "sinusoidal": SinusoidalPositions,
    "none": NoPositions,
    "rope": NoPositions,  # nothing is added: the attention layers rotate queries and keys (modern tweaks)
}


# --- input checks -----------------------------------------------------------------------------------------
# A function or forward names its checks with @checked_by: they run at the boundary only (a model checks for
# the tables it adds, an attention layer for RoPE); a constructor calls its own.


def _check_even(name: str, d: int, multiple: int = 2) -> int:
    _checks.positive_int(name, d)
    if d % multiple:
        raise ValueError(
            f"{name} must be divisible by {multiple} (the encoding uses sine/cosine pairs"
            f"{' for rows and for columns' if multiple == 4 else ''}), got {name}={d}"
        )
    return d


def _check_offset(offset) -> None:
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise ValueError(f"offset must be a non-negative integer (the position of the first token), got {offset!r}")


def _check_frequencies(d_model, base, **_) -> None:
    _check_even("d_model", d_model)
    _checks.positive_float("base", base)


def _check_angles(positions, d_model, base, **_) -> None:
    """Positions: an int n (for 0, ..., n - 1), or a tensor or list of integer or real positions."""
    if isinstance(positions, bool) or not isinstance(positions, int):
        try:
            positions = torch.as_tensor(positions)
        except (TypeError, ValueError, RuntimeError):
            raise TypeError(
                f"positions must be a tensor or list of integer or real positions, got {positions!r}"
            ) from None
        if positions.dtype == torch.bool or positions.is_complex():
            raise TypeError(f"positions must be integers or real numbers, got dtype {positions.dtype}")
    else:
        _checks.positive_int("positions", positions)
    _check_frequencies(d_model, base)


def _check_sinusoidal(n_positions, d_model, base, offset, **_) -> None:
    _checks.positive_int("n_positions", n_positions)
    _check_offset(offset)
    _check_frequencies(d_model, base)


def _check_grid(height, width, d_model, base, **_) -> None:
    _checks.positive_int("height", height)
    _checks.positive_int("width", width)
    _check_even("d_model", d_model, multiple=4)
    _checks.positive_float("base", base)


def _check_table(d_model, max_len, base, dropout) -> tuple[int, int, float, float]:
    """The checks of :class:`SinusoidalPositionalEncoding`; return d_model, max_len, the base and the dropout."""
    return (
        _check_even("d_model", d_model),
        _checks.positive_int("max_len", max_len),
        _checks.positive_float("base", base),
        _checks.positive_float("dropout", dropout, allow_zero=True),
    )


def _check_learned(d_model, max_len, init_std, dropout) -> tuple[int, int, float, float]:
    """The checks of :class:`LearnedPositionalEmbedding`; return d_model, max_len, init_std and the dropout."""
    return (
        _checks.positive_int("d_model", d_model),
        _checks.positive_int("max_len", max_len),
        _checks.positive_float("init_std", init_std),
        _checks.positive_float("dropout", dropout, allow_zero=True),
    )


def _check_encoding(self, n_positions, offset, **_) -> None:
    _checks.positive_int("n_positions", n_positions, minimum=0)
    _check_offset(offset)


def _check_learned_range(self, n_positions, offset, **_) -> None:
    _check_encoding(self, n_positions, offset)
    if offset + n_positions > self.max_len:
        raise ValueError(
            f"a learned positional embedding has vectors for positions 0 to {self.max_len - 1} only "
            f"(max_len={self.max_len}); got {n_positions} positions starting at offset {offset}"
        )


def _check_input(self, x, offset=0, **_) -> None:
    """x (..., T, d_model) for a module that adds positions (height * width tokens for the 2D one)."""
    _checks.tensor("x", x, min_ndim=2, floating=True)
    if x.shape[-1] != self.d_model:
        raise ValueError(
            f"x must have width d_model={self.d_model} in its last dimension, got shape {_checks.shape_str(x.shape)}"
        )
    if isinstance(self, SinusoidalPositionalEncoding2D) and x.shape[-2] != self.height * self.width:
        raise ValueError(
            f"x must have height * width = {self.height} * {self.width} = {self.height * self.width} tokens in "
            f"dimension -2, got shape {_checks.shape_str(x.shape)}"
        )
    _checks.like("x", x, self)  # the learned table's dtype and device (the sinusoidal ones have no parameters)
    _check_offset(offset)
    if isinstance(self, LearnedPositionalEmbedding):
        _check_learned_range(self, x.shape[-2], offset)


def _check_rope(x, offset, base, **_) -> None:
    _checks.tensor("x", x, min_ndim=2, floating=True)
    _check_even("x.shape[-1]", x.shape[-1])
    _check_offset(offset)
    _checks.positive_float("base", base)
