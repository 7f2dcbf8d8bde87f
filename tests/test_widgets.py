"""attnbook.widgets: live explorers redraw when their slider moves."""
import ipywidgets
import torch

from attnbook import widgets


def test_temperature_explorer_redraws_on_slider_change():
    box = widgets.temperature_explorer(torch.tensor([1.0, 0.0, -1.0]), ["a", "b", "c"])
    slider = next(w for w in box.children if isinstance(w, ipywidgets.FloatLogSlider))
    image = next(w for w in box.children if isinstance(w, ipywidgets.Image))
    first = image.value
    assert first[:8] == b"\x89PNG\r\n\x1a\n"
    slider.value = 0.05
    assert image.value != first and image.value[:8] == b"\x89PNG\r\n\x1a\n"


def test_heatmap_explorer_moves_between_matrices():
    mats = [torch.eye(3), torch.ones(2, 2) / 2]
    box = widgets.heatmap_explorer(mats, [list("abc"), list("xy")], [list("abc"), list("xy")], ["first", "second"])
    slider = next(w for w in box.children if isinstance(w, ipywidgets.SelectionSlider))
    image = next(w for w in box.children if isinstance(w, ipywidgets.Image))
    first = image.value
    slider.value = 1
    assert image.value != first


def test_colab_detection_outside_colab():
    assert widgets.enable_colab_widgets() is False
