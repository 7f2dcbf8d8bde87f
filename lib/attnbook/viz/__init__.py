"""Figures. Every function returns a figure and shows nothing by itself.

Plotly figures carry every state of their sliders inside the figure (precomputed steps), so the sliders
keep working in the static HTML book with no kernel. Matplotlib figures are what the live
``attnbook.widgets`` explorers redraw. One module per kind of figure:

- ``core``: arrays, labels, sliders, the matplotlib basics;
- ``attention``: attention weights as heatmaps, softmax temperature, signed heatmaps, masks side by side;
- ``curves``: curves with a slider, learning curves, accuracy against data size;
- ``positions``: the positional-encoding waveforms;
- ``images``: patches and where a vision transformer looks;
- ``beyond``: graphs and spectrograms;
- ``heads``: what heads do: a phase change in training, a number per head, a head's circuit over the
  vocabulary, where attributions point.

Colours come from ``attnbook.style``, the book's visual language: ``color("weight")`` for attention weights,
``color("position")`` for positions and so on, the same colours as in the diagrams.
"""

from ..style import color
from .attention import (
    attention_heatmap,
    attention_heatmap_slider,
    mask_panels,
    signed_heatmap,
    softmax_temperature_figure,
)
from .beyond import graph_figure, spectrogram_grid
from .core import add_slider, bars_mpl, describe_mpl, heatmap_mpl, to_numpy
from .curves import accuracy_by_size, curves_mpl, curves_slider
from .heads import attribution_figure, circuit_slider, head_grid, phase_change_figure
from .images import grid_similarity_figure, image_attention_slider, patch_grid_figure
from .positions import positional_waveform_figure, positional_waveform_mpl

__all__ = [
    "color",
    "to_numpy",
    "add_slider",
    "heatmap_mpl",
    "bars_mpl",
    "describe_mpl",
    "attention_heatmap",
    "attention_heatmap_slider",
    "softmax_temperature_figure",
    "signed_heatmap",
    "mask_panels",
    "curves_slider",
    "curves_mpl",
    "accuracy_by_size",
    "positional_waveform_figure",
    "positional_waveform_mpl",
    "patch_grid_figure",
    "image_attention_slider",
    "grid_similarity_figure",
    "graph_figure",
    "spectrogram_grid",
    "phase_change_figure",
    "head_grid",
    "circuit_slider",
    "attribution_figure",
]
