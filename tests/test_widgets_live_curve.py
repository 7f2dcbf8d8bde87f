"""attnbook.widgets.LiveCurve: the training curve of the lab, redrawn into an ipywidgets Image."""
from attnbook import widgets


def test_live_curve_redraws_a_png_each_update():
    curve = widgets.LiveCurve(title="loss", log_y=True, y_range=(0.5, 5))
    assert curve.image.value == b""
    curve.update({"train": ([1, 2, 3], [4.0, 3.0, 2.5]), "val": ([3], [2.7])})
    first = bytes(curve.image.value)
    assert first.startswith(b"\x89PNG")
    curve.update({"train": (list(range(1, 101)), [4.0 - i / 50 for i in range(100)])})
    assert bytes(curve.image.value).startswith(b"\x89PNG") and bytes(curve.image.value) != first
    assert curve.image in curve.widget.children
