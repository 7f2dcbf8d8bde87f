"""attnbook.audio: the spectrogram against a direct DFT of windowed frames, frame counts, the generated sounds."""

import numpy as np
import pytest
import torch
from attnbook import audio


def reference_spectrogram(wave: np.ndarray, n_fft: int, hop: int) -> np.ndarray:
    """|DFT| of Hann-windowed frames of the reflection-padded signal, written out with numpy."""
    padded = np.pad(wave, n_fft // 2, mode="reflect")
    window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n_fft) / n_fft)  # periodic Hann
    frames = [padded[t * hop : t * hop + n_fft] * window for t in range(1 + len(wave) // hop)]
    return np.abs(np.fft.rfft(np.stack(frames), axis=-1)).T  # (n_fft // 2 + 1, n_frames)


@pytest.mark.parametrize("n_samples,n_fft,hop", [(2016, 64, 32), (500, 32, 8), (301, 16, 10)])
def test_spectrogram_equals_windowed_dft(n_samples, n_fft, hop):
    wave = torch.randn(n_samples, generator=torch.Generator().manual_seed(n_samples), dtype=torch.float64)
    S = audio.spectrogram(wave, n_fft, hop, log=False)
    np.testing.assert_allclose(S.numpy(), reference_spectrogram(wave.numpy(), n_fft, hop), atol=1e-9)
    assert S.shape == (n_fft // 2 + 1, audio.n_frames(n_samples, hop))
    torch.testing.assert_close(audio.spectrogram(wave, n_fft, hop), torch.log1p(S))
    # a batch gives each wave's own spectrogram
    batch = torch.stack([wave, -2 * wave])
    torch.testing.assert_close(audio.spectrogram(batch, n_fft, hop, log=False)[1], 2 * S)


def test_n_frames():
    assert audio.n_frames(2016, 32) == 64
    assert audio.n_frames(2016, 32, n_fft=64, center=False) == 62
    x = torch.randn(1000)
    assert torch.stft(x, 50, 7, window=torch.hann_window(50), center=False, return_complex=True).shape[
        -1
    ] == audio.n_frames(1000, 7, n_fft=50, center=False)
    y = torch.randn(1001)  # 143 hops of 7: centred, an odd n_fft pads n_fft - 1 samples in all, an even one n_fft
    for n_fft in (49, 50):
        assert torch.stft(y, n_fft, 7, window=torch.hann_window(n_fft), return_complex=True).shape[
            -1
        ] == audio.n_frames(1001, 7, n_fft=n_fft)


def test_a_tone_peaks_at_its_frequency_and_chirps_move():
    rate, n_fft = 4000.0, 64
    bin_hz = rate / n_fft
    S = audio.spectrogram(audio.tone(1000.0, 2016, rate), n_fft, 32, log=False)
    assert (S[:, 1:-1].argmax(dim=0) == round(1000 / bin_hz)).all()  # every frame inside: the bin of 1000 Hz
    up = audio.spectrogram(audio.chirp(300.0, 1700.0, 2016, rate), n_fft, 32).argmax(dim=0)
    down = audio.spectrogram(audio.chirp(1700.0, 300.0, 2016, rate), n_fft, 32).argmax(dim=0)
    assert up[-3] > up[2] + 15 and down[-3] < down[2] - 15
    # the instantaneous frequency of the chirp is the derivative of its phase: f0 + (f1 - f0) t / T
    assert abs(int(up[32]) * bin_hz - 1000) <= bin_hz


def test_noise_kinds():
    g = torch.Generator().manual_seed(0)
    white, brown = audio.noise((4, 4000), generator=g), audio.noise((4, 4000), kind="brown", generator=g)
    torch.testing.assert_close(white.std(-1), torch.ones(4))

    def low(x):
        return audio.spectrogram(x, 64, 32, log=False)[..., :4, :].sum() / audio.spectrogram(x, 64, 32, log=False).sum()  # noqa: E731

    assert low(brown) > 0.5 > 0.2 > low(white)  # brown noise is mostly low frequencies


def test_sound_classes():
    waves, labels = audio.sound_classes(70, n_samples=2016, seed=1)
    assert waves.shape == (70, 2016) and waves.dtype == torch.float32
    assert torch.equal(torch.bincount(labels), torch.full((len(audio.SOUND_CLASSES),), 10))
    again, _ = audio.sound_classes(70, n_samples=2016, seed=1)
    assert torch.equal(waves, again)
    S = audio.spectrogram(waves, 64, 32)
    peak = S[:, 1:].argmax(dim=1) + 1  # (70, frames): the loudest bin of each frame (without the DC bin)
    rising, falling = (
        labels == audio.SOUND_CLASSES.index("rising chirp"),
        labels == audio.SOUND_CLASSES.index("falling chirp"),
    )
    assert (peak[rising, -4] > peak[rising, 3]).all() and (peak[falling, -4] < peak[falling, 3]).all()


def test_bad_input_errors():
    with pytest.raises(ValueError, match=r"wave must have more than n_fft // 2 = 32 samples"):
        audio.spectrogram(torch.randn(20))
    with pytest.raises(TypeError, match=r"wave must be a floating-point tensor"):
        audio.spectrogram(torch.ones(100, dtype=torch.long))
    with pytest.raises(ValueError, match=r"kind must be 'white' or 'brown'"):
        audio.noise((10,), kind="pink")
    with pytest.raises(ValueError, match=r"n_fft is needed without center padding"):
        audio.n_frames(100, 10, center=False)


def test_half_precision_waves_and_large_phases():
    wave = torch.randn(2, 300)
    for dtype in (torch.float16, torch.bfloat16):
        out = audio.spectrogram(wave.to(dtype))
        assert out.dtype == dtype
        torch.testing.assert_close(out.float(), audio.spectrogram(wave.to(dtype).float()), atol=0.05, rtol=0.02)
    t = np.arange(4000) / 4000.0  # at 1900 Hz the phase reaches 2 pi 1900: in float32 it would be off by ~1e-3
    np.testing.assert_allclose(audio.tone(1900.0, 4000, 4000.0).numpy(), np.sin(2 * np.pi * 1900.0 * t), atol=1e-6)
