"""attnbook.widgets: live explorers redraw when their slider moves, and every picture carries alt text."""

import base64
import html
import re
import sys
import types

import ipywidgets
import matplotlib.pyplot as plt
import pytest
import torch
from attnbook import viz, widgets

IMG = re.compile(r'^<img src="data:image/png;base64,([A-Za-z0-9+/=]+)" alt="([^"]+)"')


def picture(box):
    """The PNG bytes and the alt text of the explorer's picture (an ipywidgets.HTML holding an <img>)."""
    match = next(IMG.match(w.value) for w in box.children if isinstance(w, ipywidgets.HTML) and IMG.match(w.value))
    return base64.b64decode(match.group(1)), html.unescape(match.group(2))


def test_temperature_explorer_redraws_on_slider_change():
    box = widgets.temperature_explorer(torch.tensor([1.0, 0.0, -1.0]), ["a", "b", "c"])
    slider = next(w for w in box.children if isinstance(w, ipywidgets.FloatLogSlider))
    first, alt = picture(box)
    assert first[:8] == b"\x89PNG\r\n\x1a\n"
    assert alt.startswith("Bar chart: softmax(scores / τ), τ = 1.") and "a 0.67" in alt  # the bars' values
    slider.value = 0.05
    png, alt = picture(box)
    assert png != first and png[:8] == b"\x89PNG\r\n\x1a\n" and "τ = 0.05" in alt


def test_heatmap_explorer_moves_between_matrices():
    mats = [torch.eye(3), torch.ones(2, 2) / 2]
    box = widgets.heatmap_explorer(mats, [list("abc"), list("xy")], [list("abc"), list("xy")], ["first", "second"])
    slider = next(w for w in box.children if isinstance(w, ipywidgets.SelectionSlider))
    first, alt = picture(box)
    assert alt == "Heatmap: first."
    slider.value = 1
    assert picture(box) == (picture(box)[0], "Heatmap: second.") and picture(box)[0] != first


def test_describe_mpl_reads_titles_axes_and_curves():
    fig = viz.curves_mpl(
        [0, 1, 2], {"linear": [1, 2, 3], "tanh": [1, 1, 1]}, title="Norms", x_title="lag k", y_title="norm", log_y=True
    )
    assert viz.describe_mpl(fig) == "Plot: Norms. norm (log scale) against lag k. Curves: linear, tanh."
    fig, (left, right) = plt.subplots(1, 2)
    fig.suptitle("Two panels")
    left.bar([0, 1], [0.25, 0.75], tick_label=["x", "y"])
    right.set_title("empty")
    assert viz.describe_mpl(fig) == "Two panels. Bar chart. x 0.25, y 0.75. Plot: empty."
    plt.close("all")


def test_picture_html_escapes_the_alt_text_and_closes_the_figure():
    fig, ax = plt.subplots()
    ax.plot([0, 1])
    out = widgets.picture_html(fig, alt='a "quoted" <b>word</b> & more')
    assert 'alt="a &quot;quoted&quot; &lt;b&gt;word&lt;/b&gt; &amp; more"' in out
    assert not plt.fignum_exists(fig.number)


def test_colab_detection_outside_colab():
    assert widgets.enable_colab_widgets() is False


@pytest.mark.parametrize(("version", "turned_on"), [("7.7.1", False), ("8.1.9", True)])
def test_colab_custom_widget_manager_only_for_ipywidgets_8(monkeypatch, version, turned_on):
    """Colab draws ipywidgets 7 (its own) itself; only ipywidgets 8 needs its custom widget manager."""
    calls = []
    colab = types.ModuleType("google.colab")
    colab.output = types.SimpleNamespace(enable_custom_widget_manager=lambda: calls.append("on"))
    monkeypatch.setitem(sys.modules, "google.colab", colab)
    monkeypatch.setattr(ipywidgets, "__version__", version)
    assert widgets.enable_colab_widgets() is turned_on
    box = widgets.temperature_explorer(torch.tensor([1.0, 0.0]))  # an explorer asks for it too
    assert calls == (["on", "on"] if turned_on else []) and isinstance(box, ipywidgets.VBox)
