"""attnbook.widgets.LiveCurve: the training curve of the lab, redrawn as a picture with alt text."""

import base64
import re

from attnbook import widgets


def test_live_curve_redraws_a_png_each_update():
    curve = widgets.LiveCurve(title="loss", log_y=True, y_range=(0.5, 5))
    assert curve.picture.value == ""
    curve.update({"train": ([1, 2, 3], [4.0, 3.0, 2.5]), "val": ([3], [2.7])})
    first = re.match(r'<img src="data:image/png;base64,([^"]+)" alt="([^"]+)"', curve.picture.value)
    assert base64.b64decode(first.group(1)).startswith(b"\x89PNG")
    assert first.group(2) == "Plot: loss. loss (log scale) against step. Curves: train, val."
    curve.update({"train": (list(range(1, 101)), [4.0 - i / 50 for i in range(100)])})
    assert curve.picture.value.startswith('<img src="data:image/png;base64,') and curve.picture.value != first.group(0)
    assert curve.picture in curve.widget.children
