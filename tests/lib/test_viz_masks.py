"""attnbook.viz.mask_panels and accuracy_by_size: one panel per mask, the mean and the spread over seeds."""

import pytest
import torch
from attnbook import attention, viz


def test_mask_panels_draws_one_panel_per_mask():
    masks = {
        "encoder": torch.ones(3, 3, dtype=torch.bool),
        "decoder": attention.causal_mask(3),
        "cross": torch.ones(2, 3, dtype=torch.bool),
    }
    fig = viz.mask_panels(masks, {"cross": (["a", "b", "c"], ["x", "y"])}, title="masks")
    assert len(fig.data) == 3 and [a.text for a in fig.layout.annotations] == list(masks)  # no ": " to break
    assert fig.data[1].z.tolist() == attention.causal_mask(3).float().tolist()
    assert list(fig.data[2].x) == ["a", "b", "c"] and list(fig.data[2].y) == ["x", "y"]
    with pytest.raises(ValueError, match="must be a matrix"):
        viz.mask_panels({"bad": torch.ones(3, dtype=torch.bool)})


def test_accuracy_by_size_shows_the_mean_and_the_range():
    fig = viz.accuracy_by_size({"pretrained": {200: [0.7, 0.8], 50: [0.6, 0.62, 0.64]}}, chance=0.5)
    trace = fig.data[0]
    assert list(trace.x) == [50, 200]
    assert trace.y == pytest.approx((0.62, 0.75))
    assert trace.error_y.array == pytest.approx((0.02, 0.05)) and trace.error_y.arrayminus == pytest.approx(
        (0.02, 0.05)
    )
    assert fig.layout.xaxis.type == "log" and list(fig.layout.xaxis.tickvals) == [50, 200]
