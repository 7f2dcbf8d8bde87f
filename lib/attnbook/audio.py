"""Sound as tokens: generated signals, the spectrogram, and its time-frequency patches.

A waveform of a few thousand samples is too long a sequence to attend over sample by sample. The
short-time Fourier transform (STFT) cuts it into overlapping frames of ``n_fft`` samples, ``hop_length``
apart, and measures how much of each frequency each frame holds: a spectrogram, an image with frequency
on one axis and time on the other. Cut into patches, it is read by a vision transformer unchanged (the
Audio Spectrogram Transformer, Gong et al., 2021).

- :func:`spectrogram` (``torch.stft`` with a Hann window) and :func:`n_frames`;
- :func:`tone`, :func:`chirp`, :func:`noise`: the building blocks of :func:`sound_classes`, the
  chapter's data set of six kinds of generated sound.

Chapter: beyond text (15).
"""

from __future__ import annotations

import math

import torch

from . import _checks

__all__ = ["n_frames", "spectrogram", "tone", "chirp", "noise", "SOUND_CLASSES", "sound_classes"]


def n_frames(n_samples: int, hop_length: int, *, n_fft: int | None = None, center: bool = True) -> int:
    """The number of STFT frames of a signal of ``n_samples`` samples.

    With ``center=True`` (``torch.stft``'s default) the signal is padded by n_fft // 2 on each side so
    that frame t is centred on sample t * hop_length: 1 + n_samples // hop_length frames for an even n_fft
    (the default when ``n_fft`` is not given), 1 + (n_samples - 1) // hop_length for an odd one. Without
    padding, 1 + (n_samples - n_fft) // hop_length.

    Chapter: beyond text.
    """
    n_samples = _checks.positive_int("n_samples", n_samples)
    hop_length = _checks.positive_int("hop_length", hop_length)
    if n_fft is None:
        if not center:
            raise ValueError("n_fft is needed without center padding (center=False), got None")
        return 1 + n_samples // hop_length  # an even n_fft: the padding adds n_fft in all
    n_fft = _checks.positive_int("n_fft", n_fft)
    padded = n_samples + 2 * (n_fft // 2) if center else n_samples  # an odd n_fft pads n_fft - 1 in all
    if padded < n_fft:
        raise ValueError(f"n_samples={n_samples} is shorter than one frame (n_fft={n_fft})")
    return 1 + (padded - n_fft) // hop_length


def spectrogram(wave: torch.Tensor, n_fft: int = 64, hop_length: int = 32, *, log: bool = True) -> torch.Tensor:
    r"""The magnitude spectrogram |STFT| of waveforms, on a log scale log(1 + |X|) by default.

    Frame t (centred on sample t * hop_length, the signal reflected at its ends) is multiplied by a
    periodic Hann window of n_fft samples and Fourier-transformed; bin f of the result is the frequency
    f * sample_rate / n_fft, for f = 0 .. n_fft / 2. Half-precision waves are transformed in float32 (the
    FFT has no half-precision kernel on the CPU) and the result is returned in their dtype.

    Shapes:
        wave:   (..., n_samples)
        return: (..., n_fft // 2 + 1, n_frames): frequency bins (low to high), then time frames

    Chapter: beyond text.
    """
    _checks.tensor("wave", wave, min_ndim=1, floating=True)
    n_fft = _checks.positive_int("n_fft", n_fft, minimum=2)
    hop_length = _checks.positive_int("hop_length", hop_length)
    if wave.shape[-1] <= n_fft // 2:
        raise ValueError(
            f"wave must have more than n_fft // 2 = {n_fft // 2} samples (the reflection padding), "
            f"got shape {_checks.shape_str(wave.shape)}"
        )
    batch, dtype = wave.shape[:-1], wave.dtype
    if dtype in (torch.float16, torch.bfloat16):
        wave = wave.float()
    window = torch.hann_window(n_fft, dtype=wave.dtype, device=wave.device)  # (n_fft,)
    X = torch.stft(
        wave.reshape(-1, wave.shape[-1]),
        n_fft,
        hop_length,
        window=window,
        center=True,
        pad_mode="reflect",
        return_complex=True,
    )  # (N, n_fft // 2 + 1, n_frames)
    magnitude = X.abs().reshape(*batch, *X.shape[-2:])  # (..., F, n_frames)
    return (torch.log1p(magnitude) if log else magnitude).to(dtype)


def _time(n_samples: int, sample_rate: float, dtype=torch.float32) -> torch.Tensor:
    return torch.arange(n_samples, dtype=torch.float64).to(dtype) / sample_rate  # (n_samples,) seconds


def _signal_args(n_samples, sample_rate, phase, **frequencies) -> tuple[torch.Tensor, list[torch.Tensor], torch.Tensor]:
    """The times t (n,) in float64, the frequencies as float64 tensors (..., 1) that broadcast together, the phase."""
    n_samples = _checks.positive_int("n_samples", n_samples)
    sample_rate = _checks.positive_float("sample_rate", sample_rate)
    values = {name: _checks.numbers(name, f) for name, f in frequencies.items()}
    if len(values) > 1:
        _checks.broadcast(*values.items())
    p = _checks.numbers("phase", phase)[..., None]
    _checks.broadcast(*((name, f[..., None]) for name, f in values.items()), ("phase", p))
    t = torch.arange(n_samples, dtype=torch.float64) / sample_rate  # (n,) seconds
    return t, [f[..., None] for f in values.values()], p


def tone(frequency, n_samples: int, sample_rate: float, *, phase=0.0) -> torch.Tensor:
    """sin(2 pi f t + phase): a pure tone of ``frequency`` Hz (a number, or a tensor (B,) for B tones).

    Computed in float64 (the phase 2 pi f t grows large), returned in float32.

    Shapes:
        return: (n_samples,) or (B, n_samples), float32

    Chapter: beyond text.
    """
    t, (f,), p = _signal_args(n_samples, sample_rate, phase, frequency=frequency)  # (n,), (..., 1), (..., 1)
    return torch.sin(2 * math.pi * f * t + p).float()  # (..., n)


def chirp(f_start, f_end, n_samples: int, sample_rate: float, *, phase=0.0) -> torch.Tensor:
    r"""A linear chirp: the frequency moves from ``f_start`` to ``f_end`` Hz over the signal.

    The phase is the integral of the frequency, 2 pi (f_0 t + (f_1 - f_0) t^2 / (2 T)), T the duration.
    Computed in float64, returned in float32.

    Shapes:
        f_start, f_end: numbers or tensors (B,)
        return: (n_samples,) or (B, n_samples), float32

    Chapter: beyond text.
    """
    t, (f0, f1), p = _signal_args(n_samples, sample_rate, phase, f_start=f_start, f_end=f_end)  # (n,), (..., 1)
    duration = n_samples / sample_rate
    return torch.sin(2 * math.pi * (f0 * t + (f1 - f0) * t**2 / (2 * duration)) + p).float()  # (..., n)


def noise(shape, *, kind: str = "white", generator: torch.Generator | None = None) -> torch.Tensor:
    """Gaussian noise of unit variance: ``"white"`` (every frequency alike) or ``"brown"`` (mostly low ones).

    Brown noise is a random walk (the cumulative sum of white noise) with its slow drift removed.

    Shapes:
        shape: (..., n_samples), n_samples >= 2 (a standard deviation needs two samples); an int is (n_samples,)
        return: the same shape

    Chapter: beyond text.
    """
    if kind not in ("white", "brown"):
        raise ValueError(f"kind must be 'white' or 'brown', got {kind!r}")
    sizes = _checks.as_integers(
        "shape", [shape] if isinstance(shape, int) else shape, what="a shape (..., n_samples): a list or tuple of sizes"
    )
    if sizes.dim() != 1 or sizes.numel() == 0 or int(sizes.min()) < 0 or int(sizes[-1]) < 2:
        raise ValueError(f"shape must be sizes (..., n_samples) >= 0 with n_samples >= 2, got {shape!r}")
    x = torch.randn(*sizes.tolist(), generator=_checks.generator("generator", generator))
    if kind == "brown":
        x = x.cumsum(dim=-1)
        x = x - torch.linspace(0, 1, x.shape[-1]) * x[..., -1:]  # end where it started
        x = x - x.mean(dim=-1, keepdim=True)
    return x / x.std(dim=-1, keepdim=True).clamp(min=1e-12)


SOUND_CLASSES = ("tone", "rising chirp", "falling chirp", "two tones", "beeps", "white noise", "brown noise")


def sound_classes(
    n: int, *, n_samples: int = 2048, sample_rate: float = 4000.0, snr: float = 4.0, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """A labelled set of generated sounds, the same number of each kind in ``SOUND_CLASSES``.

    Tones and chirps have random frequencies between 5% and 45% of the sample rate (chirps sweep at
    least a quarter of that range), random phases, and random loudness; "beeps" is a tone switched on and
    off two to four times. Each sound is scaled to unit standard deviation, gets white background noise of
    standard deviation 1 / ``snr``, and is then made louder or softer by a random factor in [0.5, 2].

    Shapes:
        return: waves (n, n_samples) float32, labels (n,) int64 in [0, len(SOUND_CLASSES))

    Chapter: beyond text.
    """
    n = _checks.positive_int("n", n)
    n_samples = _checks.positive_int("n_samples", n_samples, minimum=2)
    sample_rate = _checks.positive_float("sample_rate", sample_rate)
    snr = _checks.positive_float("snr", snr)
    g = torch.Generator().manual_seed(_checks.positive_int("seed", seed, minimum=0))
    labels = torch.arange(n) % len(SOUND_CLASSES)
    labels = labels[torch.randperm(n, generator=g)]
    lo, hi = 0.05 * sample_rate, 0.45 * sample_rate

    def uniform(a, b, size=(n,)):
        return a + (b - a) * torch.rand(*size, generator=g)

    phase = uniform(0, 2 * math.pi)
    f = uniform(lo, hi)
    sweep = uniform(0.25 * (hi - lo), hi - lo)  # how far a chirp moves
    start = uniform(lo, hi - sweep)
    f2 = lo + (f - lo + uniform(0.2, 0.8) * (hi - lo)) % (hi - lo)  # a second tone, well apart from the first
    t = _time(n_samples, sample_rate)  # (n_samples,)
    beeps = torch.randint(2, 5, (n,), generator=g)  # on/off cycles
    gate = (torch.sin(math.pi * beeps[:, None] * t / t[-1] * 2 + uniform(0, 2 * math.pi)[:, None]) > 0).float()
    kinds = {
        "tone": tone(f, n_samples, sample_rate, phase=phase),
        "rising chirp": chirp(start, start + sweep, n_samples, sample_rate, phase=phase),
        "falling chirp": chirp(start + sweep, start, n_samples, sample_rate, phase=phase),
        "two tones": tone(f, n_samples, sample_rate, phase=phase) + tone(f2, n_samples, sample_rate),
        "beeps": tone(f, n_samples, sample_rate, phase=phase) * gate,
        "white noise": noise((n, n_samples), kind="white", generator=g),
        "brown noise": noise((n, n_samples), kind="brown", generator=g),
    }
    waves = torch.zeros(n, n_samples)
    for k, name in enumerate(SOUND_CLASSES):
        rows = labels == k
        waves[rows] = kinds[name][rows]
    waves = waves / waves.std(dim=-1, keepdim=True).clamp(min=1e-12)  # every kind equally loud
    waves = waves + noise((n, n_samples), generator=g) / snr  # background noise
    return waves * uniform(0.5, 2.0)[:, None], labels  # (n, n_samples), (n,)
