"""Numbers into the prose: a computed value becomes ``{glue:text}`name``` in the HTML book.

Page plumbing, not teaching: the cells that call it are hidden in the HTML book.
"""

from __future__ import annotations

__all__ = ["glue"]


def glue(name: str, value) -> None:
    """Make a computed value available to the prose of the HTML book as ``{glue:text}`name```.

    It displays nothing in Jupyter or Colab (the same output format as ``myst_nb.glue(..., display=False)``,
    without needing myst-nb in the kernel). Numbers in the text thus always come from the executed cell.
    """
    from IPython.core.formatters import format_display_data
    from IPython.display import display

    if hasattr(value, "item") and getattr(value, "ndim", 1) == 0:
        value = value.item()
    bundle, metadata = format_display_data(value)
    prefix = "application/papermill.record/"
    metadata = {**metadata, "scrapbook": {"name": name, "mime_prefix": prefix}}
    display({prefix + mime: data for mime, data in bundle.items()}, raw=True, metadata=metadata)
