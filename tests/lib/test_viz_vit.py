"""attnbook.viz figures of the vision transformer chapter: patch grids, attention overlays, grid similarities."""

import numpy as np
import plotly.graph_objects as go
import pytest
import torch
from attnbook import viz


def test_patch_grid_figure_draws_every_border_and_numbers_the_patches_row_by_row():
    image = np.random.default_rng(0).integers(0, 255, (32, 48, 3), dtype=np.uint8)
    fig = viz.patch_grid_figure(image, 16)
    assert isinstance(fig.data[0], go.Image)
    assert len(fig.layout.shapes) == (32 // 16 + 1) + (48 // 16 + 1)
    labels = fig.data[1]
    assert list(labels.text) == [str(i) for i in range(6)]
    assert labels.x[1] > labels.x[0] and labels.y[3] > labels.y[0]  # token 1 is right of 0, token 3 below it
    grey = viz.patch_grid_figure(torch.rand(8, 8), 2, numbers=False)
    assert isinstance(grey.data[0], go.Heatmap) and len(grey.data) == 1
    with pytest.raises(ValueError, match=r"image size 30 x 48 is not divisible by patch_size=16"):
        viz.patch_grid_figure(image[:30], 16)
    with pytest.raises(ValueError, match=r"image must be \(H, W, 3\) RGB or \(H, W\) grey"):
        viz.patch_grid_figure(np.zeros((8, 8, 4)), 2)


def test_image_attention_slider_holds_every_image_and_map():
    images = torch.rand(3, 1, 8, 8)
    maps = {"layer 1": torch.rand(3, 4, 4), "rollout": torch.rand(3, 2, 2)}
    fig = viz.image_attention_slider(
        images, maps, step_labels=["a", "b", "c"], prefix="image ", titles=["t0", "t1", "t2"]
    )
    assert len(fig.data) == 1 + 2 * len(maps)
    steps = fig.layout.sliders[0].steps
    assert [s.label for s in steps] == ["a", "b", "c"]
    for i, step in enumerate(steps):
        z = step.args[0]["z"]
        assert len(z) == len(fig.data)
        np.testing.assert_allclose(np.array(z[0]), images[i, 0].numpy(), rtol=1e-6)
        # each map is drawn over its patches: patch (r, c) covers pixels (2r.., 2c..) for a 4 x 4 grid
        np.testing.assert_allclose(np.array(z[1])[::2, ::2], maps["layer 1"][i].numpy(), rtol=1e-6)
        np.testing.assert_allclose(np.array(z[1])[1::2, 1::2], maps["layer 1"][i].numpy(), rtol=1e-6)
        np.testing.assert_allclose(np.array(z[3])[::4, ::4], maps["rollout"][i].numpy(), rtol=1e-6)
        np.testing.assert_allclose(np.array(z[2]), images[i, 0].numpy(), rtol=1e-6)  # the outline's image
        assert step.args[1]["title.text"] == f"t{i}"
    # one colour scale for every panel and image
    top = max(float(m.max()) for m in maps.values())
    assert fig.data[1].zmax == pytest.approx(top) and fig.data[3].zmax == pytest.approx(top)
    assert isinstance(fig.data[2], go.Contour)
    with pytest.raises(ValueError, match=r"maps\['x'\] must be \(n=3, Hg, Wg\)"):
        viz.image_attention_slider(images, {"x": torch.rand(3, 3, 3)})
    with pytest.raises(ValueError, match="expected 3 step_labels, got 1"):
        viz.image_attention_slider(images, maps, step_labels=["a"])


def test_grid_similarity_figure_puts_each_row_in_its_tile():
    grid = (2, 3)
    sim = torch.arange(36, dtype=torch.float32).reshape(6, 6)
    fig = viz.grid_similarity_figure(sim, grid, gap=1)
    canvas = np.array(fig.data[0].z, dtype=float)
    assert canvas.shape == (2 * 3 - 1, 3 * 4 - 1)
    # tile of cell 4 (row 1, column 1) starts at canvas row 3, column 4 and holds row 4 as a 2 x 3 grid
    np.testing.assert_allclose(canvas[3:5, 4:7], sim[4].reshape(2, 3).numpy())
    assert np.isnan(canvas[2]).all()  # the gap between tile rows
    with pytest.raises(ValueError, match=r"similarity must be \(N, N\) with N = 2 \* 3 = 6"):
        viz.grid_similarity_figure(torch.rand(5, 5), grid)
