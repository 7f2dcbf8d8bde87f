"""Live explorers (ipywidgets) for a running kernel: Jupyter, VS Code or Colab.

In the static HTML book their sliders are frozen at the executed state, so each explorer says so in its
caption; the plotly figures of ``attnbook.viz`` are the kernel-free interactive versions.
ipywidgets is imported only when an explorer is built.

Chapter: queries, keys and values (temperature, heatmaps); later chapters add their own explorers.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

import numpy as np

from . import viz

__all__ = ["enable_colab_widgets", "picture_html", "explorer", "temperature_explorer", "heatmap_explorer"]

CAPTION = (
    "<small>Live explorer: move the slider in a running notebook (Colab or Jupyter). "
    "In the HTML book it shows its first state; use the interactive figure above instead.</small>"
)


def enable_colab_widgets() -> bool:
    """In Colab with ipywidgets 8, turn on Colab's custom widget manager; return True when it was turned on.

    Colab's front end draws the widgets of its own ipywidgets (7) as they are; only ipywidgets 8 needs
    Colab's custom manager, so with ipywidgets 7 (and outside Colab) this does nothing.
    """
    if "google.colab" not in sys.modules:
        return False
    import ipywidgets

    if int(ipywidgets.__version__.split(".")[0]) < 8:
        return False
    from google.colab import output  # type: ignore[import-not-found]

    output.enable_custom_widget_manager()
    return True


def picture_html(fig, alt: str | None = None) -> str:
    """A matplotlib figure as an HTML ``<img>`` (PNG inline) with alt text; closes the figure.

    The alt text is ``alt``, or else what ``viz.describe_mpl`` reads from the figure (titles, axes, curves).
    """
    import base64
    import html
    import io

    import matplotlib.pyplot as plt

    alt = viz.describe_mpl(fig) if alt is None else alt
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=80)
    plt.close(fig)
    data = base64.b64encode(buffer.getvalue()).decode("ascii")
    return f'<img src="data:image/png;base64,{data}" alt="{html.escape(alt, quote=True)}" style="max-width:100%">'


def explorer(slider, draw: Callable[[object], object], *, title: str = ""):
    """A slider and a picture redrawn with ``draw(value)``, which returns a matplotlib figure.

    The picture is an ``<img>`` in an ``ipywidgets.HTML`` (with alt text from ``viz.describe_mpl``), so the
    widget's saved state (and the static HTML book) shows the picture too, not only a running kernel.
    """
    import ipywidgets as widgets

    enable_colab_widgets()
    picture = widgets.HTML()

    def redraw(value) -> None:
        picture.value = picture_html(draw(value))

    slider.observe(lambda change: redraw(change["new"]), names="value")
    redraw(slider.value)
    parts = [widgets.HTML(f"<b>{title}</b>")] if title else []
    return widgets.VBox(parts + [slider, picture, widgets.HTML(CAPTION)])


def temperature_explorer(
    scores, labels: Sequence[str] | None = None, *, t_min: float = 0.02, t_max: float = 20.0, value: float = 1.0
):
    """Bars of softmax(scores / τ) redrawn as the temperature slider moves (log scale)."""
    import ipywidgets as widgets

    s = viz.to_numpy(scores).reshape(-1)
    slider = widgets.FloatLogSlider(
        value=value,
        base=10,
        min=np.log10(t_min),
        max=np.log10(t_max),
        step=0.02,
        description="τ",
        continuous_update=True,
        readout_format=".3g",
    )

    def draw(t: float):
        e = np.exp((s - s.max()) / t)
        return viz.bars_mpl(e / e.sum(), labels, title=f"softmax(scores / τ), τ = {t:.3g}")

    return explorer(slider, draw, title="Softmax with temperature")


def heatmap_explorer(
    weights_list, x_labels_list=None, y_labels_list=None, step_labels=None, *, description: str = "step"
):
    """Attention heatmaps with a slider over them (sentences, heads, layers...)."""
    import ipywidgets as widgets

    mats = [viz.to_numpy(w) for w in weights_list]
    if not mats:
        raise ValueError("weights_list is empty")
    names = [str(i) for i in range(len(mats))] if step_labels is None else [str(s) for s in step_labels]
    slider = widgets.SelectionSlider(options=[(n, i) for i, n in enumerate(names)], value=0, description=description)

    def draw(i: int):
        x = None if x_labels_list is None else x_labels_list[i]
        y = None if y_labels_list is None else y_labels_list[i]
        return viz.heatmap_mpl(mats[i], x, y, title=names[i])

    return explorer(slider, draw, title="Attention heatmaps")


# --- Several sliders, and the positional-encoding explorer ---------------------------------------------
# Chapter: self-attention and positional encoding.

__all__ += ["multi_explorer", "positional_encoding_explorer"]


def multi_explorer(sliders: dict, draw: Callable[..., object], *, title: str = ""):
    """Several sliders and a picture redrawn with ``draw(**values)`` whenever one of them moves.

    ``sliders`` maps each keyword of ``draw`` to an ipywidgets control; ``draw`` returns a matplotlib figure.
    """
    import ipywidgets as widgets

    enable_colab_widgets()
    picture = widgets.HTML()

    def redraw(_change=None) -> None:
        picture.value = picture_html(draw(**{name: control.value for name, control in sliders.items()}))

    for control in sliders.values():
        control.observe(redraw, names="value")
    redraw()
    parts = [widgets.HTML(f"<b>{title}</b>")] if title else []
    return widgets.VBox(parts + list(sliders.values()) + [picture, widgets.HTML(CAPTION)])


def positional_encoding_explorer(
    *, n_positions: int = 100, d_model: int = 64, dim: int = 4, d_models: Sequence[int] = (16, 32, 64, 128, 256, 512)
):
    """One dimension of the sinusoidal positional encoding, with sliders for the dimension and d_model."""
    import ipywidgets as widgets

    d_slider = widgets.SelectionSlider(options=[int(d) for d in d_models], value=d_model, description="d_model")
    dim_slider = widgets.IntSlider(value=dim, min=0, max=max(d_models) - 1, description="dimension")

    def draw(dim: int, d_model: int):
        return viz.positional_waveform_mpl(d_model, dim, n_positions=n_positions)

    return multi_explorer(
        {"dim": dim_slider, "d_model": d_slider}, draw, title="Sinusoidal positional encoding: one dimension"
    )


# --- Translate what the reader types, and show where the model looked ----------------------------------
# Chapter: sequence-to-sequence and Bahdanau attention.

__all__ += ["translation_explorer"]


def translation_explorer(
    translate: Callable[[str], tuple],
    value: str = "",
    *,
    description: str = "input",
    x_title: str = "source",
    y_title: str = "output",
):
    """A text box: type a sentence, press Enter, and see the output and its attention heatmap.

    ``translate(text)`` returns (source tokens, output tokens, weights of shape (steps, len(source))): the
    output tokens label the rows (one per decoding step; a last step that wrote the end token gets the
    label "<eos>") and the source tokens the columns.
    """
    import ipywidgets as widgets
    import matplotlib.pyplot as plt

    box = widgets.Text(
        value=value, description=description, continuous_update=False, layout=widgets.Layout(width="32em")
    )

    def draw(text: str):
        source, output, weights = translate(text)
        if weights is None or len(source) == 0 or len(output) == 0:
            fig, ax = plt.subplots(figsize=(4, 1.2))
            ax.axis("off")
            ax.text(0.5, 0.5, "(empty input)" if len(source) == 0 else "(empty output)", ha="center", va="center")
            return fig
        rows = list(output) + ["<eos>"] * (weights.shape[0] - len(output))
        fig = viz.heatmap_mpl(weights, source, rows, title=" ".join(output))
        ax = fig.axes[0]
        ax.set_xlabel(x_title)
        ax.set_ylabel(y_title)
        fig.tight_layout()
        return fig

    return explorer(box, draw, title="Type a sentence and press Enter")


# --- A loss curve redrawn while a model trains ------------------------------------------------------
# Chapter: the lab (a character-level GPT).

__all__ += ["LiveCurve"]


class LiveCurve:
    """A matplotlib plot of named curves in an ``ipywidgets.HTML`` picture, redrawn by :meth:`update`.

    Display ``curve.widget`` in a cell before training, call ``curve.update({name: (xs, ys)})`` now and
    then during training; the widget's saved state keeps the last picture, so the static HTML book shows
    the finished curve.
    """

    def __init__(
        self, *, title: str = "", x_title: str = "step", y_title: str = "loss", log_y: bool = False, y_range=None
    ):
        import ipywidgets as widgets

        enable_colab_widgets()
        self.title, self.x_title, self.y_title, self.log_y, self.y_range = title, x_title, y_title, log_y, y_range
        self.picture = widgets.HTML()
        self.widget = widgets.VBox(
            [
                self.picture,
                widgets.HTML(
                    "<small>Redrawn while the model trains; the interactive figure below the training cell shows "
                    "the same curves.</small>"
                ),
            ]
        )

    def update(self, curves: dict) -> None:
        """Redraw with ``curves = {name: (xs, ys)}``."""
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6.5, 3.2))
        for name, (xs, ys) in curves.items():
            ax.plot(
                np.asarray(xs, dtype=float),
                np.asarray(ys, dtype=float),
                label=name,
                marker="o" if len(xs) < 30 else None,
                markersize=3,
            )
        if self.log_y:
            ax.set_yscale("log")
        if self.y_range is not None:
            ax.set_ylim(*self.y_range)
        ax.set_xlabel(self.x_title)
        ax.set_ylabel(self.y_title)
        ax.set_title(self.title)
        ax.legend(loc="best", fontsize=8)
        ax.grid(alpha=0.3)
        fig.tight_layout()
        self.picture.value = picture_html(fig)

    def _ipython_display_(self):
        from IPython.display import display

        display(self.widget)
