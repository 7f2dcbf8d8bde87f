"""Live explorers (ipywidgets) for a running kernel: Jupyter, VS Code or Colab.

In the static HTML book their sliders are frozen at the executed state, so each explorer says so in its
caption; the plotly figures of ``attnbook.viz`` are the kernel-free interactive versions.
ipywidgets is imported only when an explorer is built.

Chapter: queries, keys and values (temperature, heatmaps); later chapters add their own explorers.
"""
from __future__ import annotations

import sys
from typing import Callable, Sequence

import numpy as np

from . import viz

__all__ = ["enable_colab_widgets", "explorer", "temperature_explorer", "heatmap_explorer"]

CAPTION = ("<small>Live explorer: move the slider in a running notebook (Colab or Jupyter). "
           "In the HTML book it shows its first state; use the interactive figure above instead.</small>")


def enable_colab_widgets() -> bool:
    """Turn on Colab's custom widget manager (needed for ipywidgets 8); return True when in Colab."""
    if "google.colab" not in sys.modules:
        return False
    from google.colab import output  # type: ignore[import-not-found]

    output.enable_custom_widget_manager()
    return True


def explorer(slider, draw: Callable[[object], object], *, title: str = ""):
    """A slider and a picture redrawn with ``draw(value)``, which returns a matplotlib figure.

    The picture is an ``ipywidgets.Image`` holding PNG bytes, so the widget's saved state (and the
    static HTML book) shows the picture too, not only a running kernel.
    """
    import io

    import ipywidgets as widgets
    import matplotlib.pyplot as plt

    enable_colab_widgets()
    image = widgets.Image(format="png")

    def redraw(value) -> None:
        fig = draw(value)
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", dpi=80)
        plt.close(fig)
        image.value = buffer.getvalue()

    slider.observe(lambda change: redraw(change["new"]), names="value")
    redraw(slider.value)
    parts = [widgets.HTML(f"<b>{title}</b>")] if title else []
    return widgets.VBox(parts + [slider, image, widgets.HTML(CAPTION)])


def temperature_explorer(scores, labels: Sequence[str] | None = None, *, t_min: float = 0.02,
                         t_max: float = 20.0, value: float = 1.0):
    """Bars of softmax(scores / T) redrawn as the temperature slider moves (log scale)."""
    import ipywidgets as widgets

    s = viz.to_numpy(scores).reshape(-1)
    slider = widgets.FloatLogSlider(value=value, base=10, min=np.log10(t_min), max=np.log10(t_max), step=0.02,
                                    description="T", continuous_update=True, readout_format=".3g")

    def draw(t: float):
        e = np.exp((s - s.max()) / t)
        return viz.bars_mpl(e / e.sum(), labels, title=f"softmax(scores / T), T = {t:.3g}")

    return explorer(slider, draw, title="Softmax with temperature")


def heatmap_explorer(weights_list, x_labels_list=None, y_labels_list=None, step_labels=None, *,
                     description: str = "step"):
    """Attention heatmaps with a slider over them (sentences, heads, layers...)."""
    import ipywidgets as widgets

    mats = [viz.to_numpy(w) for w in weights_list]
    if not mats:
        raise ValueError("weights_list is empty")
    names = [str(i) for i in range(len(mats))] if step_labels is None else [str(s) for s in step_labels]
    slider = widgets.SelectionSlider(options=[(n, i) for i, n in enumerate(names)],
                                     value=0, description=description)

    def draw(i: int):
        x = None if x_labels_list is None else x_labels_list[i]
        y = None if y_labels_list is None else y_labels_list[i]
        return viz.heatmap_mpl(mats[i], x, y, title=names[i])

    return explorer(slider, draw, title="Attention heatmaps")
