"""The text of each page first: what the theme and the extensions put in front of it, put after it.

- ``RENDER_CSS`` (in the book's stylesheet, ``sphinx.theme_css``): each block of the text and the sidebars'
  navigation laid out only when they come near the screen;
- ``defer_scripts``: the theme's and extensions' scripts run once the page is parsed, in the same order;
- ``move_widget_state``: the widgets' saved state leaves the page's ``<head>`` for a script that
  ``static/widgets.js`` loads with the widget manager, when a widget comes near the screen.

Plotly figures (``plotly_renderer``, ``static/plotly-book.js``) and the widget manager (``static/widgets.js``)
load when they come near the screen; the math is typeset when the book is built (``mathjax``); the theme's
icons need no script (``icons``, ``templates/layout.html``).
"""

from __future__ import annotations

from pathlib import Path

WIDGETS_JS = "attnbook/widgets.js"  # relative to _static: on pages with widgets (nb_ipywidgets_js, _config.yml)

# The browser lays out and draws each block of the text (a paragraph, a formula, a code cell, a figure) and the
# sidebars' navigation only when they come near the screen (CSS content-visibility): a long chapter opens
# without first laying out all its formulas, code and outputs. Each keeps the size it last had once drawn;
# headings are always laid out (the page's contents follow them), and so are the theme's boxes of tables (its
# script measures them as the page opens, to let the keyboard scroll those wider than the screen). On screens
# only: print lays out everything. A page whose <html> has the class "attnbook-render-all" lays out everything
# at once (the accessibility audit). The page's opening (the blocks before its first section, and that section's)
# is laid out at once: it is on the first screen, where a block first drawn at the placeholder's size and then at
# its own would move the text under the reader's eyes (Chromium lays out such a block only after a first frame).
RENDER_CSS = [
    "/* Blocks of the text and the sidebars laid out when they come near the screen (screens only). */",
    "@media screen{html:not(.attnbook-render-all) .bd-article section "
    "section:not(.bd-article>section>section:first-of-type)>"
    ":not(section):not(h1):not(h2):not(h3):not(.pst-scrollable-table-container)"
    "{content-visibility:auto;contain-intrinsic-size:auto 300px}"
    "html:not(.attnbook-render-all) .bd-sidebar-primary .sidebar-primary-items__middle,"
    "html:not(.attnbook-render-all) .bd-sidebar-secondary{content-visibility:auto;contain-intrinsic-size:auto 1000px}}",
]
# The one script in the <head> that must run before the text: the inline scripts after it set its options.
BLOCKING_SCRIPTS = ("documentation_options.js",)


def defer_scripts(app, pagename, templatename, context, doctree) -> None:
    """The theme's and extensions' scripts run after the page is parsed (deferred, in the same order) instead of
    in front of the text: each one waits for the page anyway (copy buttons, toggles, tabs, the theme's
    buttons)."""
    from sphinx.builders.html._assets import _JavaScript

    scripts = context.get("script_files")
    if not scripts or pagename == "search":  # the search page runs Sphinx's search in front of its results
        return
    for i, script in enumerate(scripts):
        name, attributes = str(script.filename or ""), script.attributes
        if not name or name.endswith(BLOCKING_SCRIPTS) or {"async", "defer", "type", "body"} & set(attributes):
            continue
        scripts[i] = _JavaScript(script.filename, priority=script.priority, **attributes, defer="defer")


WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
WIDGET_STATES = "widgets"  # the pages' saved widget states, in the site's _static folder


def move_widget_state(app, pagename, templatename, context, doctree) -> None:
    """The widgets' saved state (myst-nb writes it in the page's <head>: up to 60 kB, images included) goes to a
    script of its own that ``static/widgets.js`` loads with the widget manager, when a widget comes near the
    screen: the page's text arrives sooner."""
    from sphinx.builders.html._assets import _JavaScript

    scripts = context.get("script_files")
    if not scripts:
        return
    states = [s for s in scripts if s.attributes.get("type") == WIDGET_STATE]
    if not states:
        return
    name = pagename.replace("/", "-") + ".js"
    folder = Path(app.outdir) / "_static" / WIDGET_STATES
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text("".join(f"attnbookWidgets.state({s.attributes['body']});\n" for s in states))
    root = "../" * pagename.count("/")
    for i, script in enumerate(scripts):
        if str(script.filename or "").endswith(WIDGETS_JS):
            scripts[i] = _JavaScript(
                script.filename,
                priority=script.priority,
                **script.attributes,
                **{"data-state": f"{root}_static/{WIDGET_STATES}/{name}"},
            )
    scripts[:] = [s for s in scripts if s not in states]
