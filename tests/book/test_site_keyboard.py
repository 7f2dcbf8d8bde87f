"""The book from the keyboard alone, and what the page says to a screen reader.

One control of each kind is reached with Tab from the focusable element before it, operated with the keys a
reader expects, and shows a focus ring; each test checks that what the control drives changed: a plotly
slider (arrows, Page Up/Down, Home, End) and a plotly dropdown menu (arrows, Enter), an ipywidgets slider,
an exercise's folded solution, the theme's search field and colour-mode button, the links of the
introduction's chapter map. The models in the page are driven in test_site_inpage.py. The phone layout of
plotly figures is undone when the column is wide again, back to the figure's own layout.
"""

from __future__ import annotations

import json

import pytest
from site_helpers import FOCUS_RING, LAPTOP, PHONE, built_toc, figures_drawn, open_page

pytestmark = pytest.mark.site

# The element that Tab reaches just before ``el``: the last focusable element ahead of it in the page.
FOCUS_BEFORE = """el => {
  const all = [...document.querySelectorAll('a[href], button, input, select, textarea, [tabindex]')]
    .filter(e => e.tabIndex >= 0 && !e.disabled && e.getClientRects().length && !e.closest('[hidden]'));
  const before = all.filter(e => e !== el && (e.compareDocumentPosition(el) & Node.DOCUMENT_POSITION_FOLLOWING)
                                && !e.contains(el) && !el.contains(e));
  for (const start of before.reverse()) {  // the nearest one that takes the focus
    start.focus();
    if (document.activeElement === start) return start.outerHTML.slice(0, 80);
  }
  return 'the start of the page';
}"""


def tab_to(page, locator, presses: int = 3):
    """Focus the element before ``locator``'s, then press Tab (at most ``presses`` times: a box that scrolls
    sideways takes the focus first): the focus must land on it."""
    start = locator.evaluate(FOCUS_BEFORE)
    path = []
    for _ in range(presses):
        page.keyboard.press("Tab")
        if locator.evaluate("el => el === document.activeElement"):
            return
        path.append(page.evaluate("() => document.activeElement.outerHTML.slice(0, 100)"))
    target = locator.evaluate("el => el.outerHTML.slice(0, 120)")
    pytest.fail(f"Tab from {start} does not reach {target}; it goes to {path}")


def ring(page, *, min_width: float = 2):
    kind, width, colour = page.evaluate(FOCUS_RING)
    assert kind != "none" and width >= min_width, f"the focused element shows no focus ring: {kind} {width} {colour}"
    return kind, width, colour


def first_page_with(selector: str, browser, server, **options):
    """The first chapter page (in _toc.yml order) with an element matching ``selector``, opened."""
    for entry in built_toc():
        if not entry.startswith("chapters/"):
            continue
        page, errors, outside = open_page(browser, f"{server}/{entry}.html", **options)
        if page.locator(selector).count():
            return page, errors, outside
        page.close()
    pytest.fail(f"no chapter page has {selector}")


@pytest.mark.parametrize("mode", ["light", "dark"])
def test_plotly_slider_by_keyboard(server, browser, mode):
    page, errors, outside = first_page_with("div.attnbook-plotly", browser, server, mode=mode, viewport=LAPTOP)
    try:
        figures = figures_drawn(page)
        index = next((i for i in range(figures.count()) if figures.nth(i).locator("g.slider-container").count()), None)
        assert index is not None, "no plotly figure with a slider on the first page with figures"
        figure = figures.nth(index)
        slider = figure.locator("g.slider-container").first
        assert slider.get_attribute("role") == "slider" and slider.get_attribute("aria-label")
        tab_to(page, slider)
        kind, width, colour = ring(page)
        assert kind == "stroke" and width >= 3, f"the focused slider is not ringed: {kind} {width} {colour}"
        n = int(slider.get_attribute("aria-valuemax"))
        state = lambda: figure.evaluate("gd => JSON.stringify(gd.data)")  # noqa: E731
        alt = lambda: figure.evaluate("gd => document.getElementById(gd.id + '-alt').textContent")  # noqa: E731
        for key, expected in [("Home", 1), ("ArrowRight", 2), ("End", n), ("ArrowLeft", n - 1), ("PageDown", None)]:
            before, now = state(), int(slider.get_attribute("aria-valuenow"))
            page.keyboard.press(key)
            want = expected if expected is not None else max(1, now - max(1, round(n / 10)))
            page.wait_for_function(
                "([g, v]) => g.getAttribute('aria-valuenow') === v",
                arg=[figure.locator("g.slider-container").first.element_handle(), str(want)],
            )
            if want != now:
                assert state() != before, f"{key} moved the slider but did not change the figure"
            assert f"step {want} of {n}" in alt(), f"after {key} the description says {alt()!r}"
            assert page.evaluate("() => !!document.activeElement.closest('g.slider-container')"), f"{key} lost focus"
        assert errors == [] and outside == []
    finally:
        page.close()


MENU = {
    "data": [{"type": "scatter", "y": [1, 2, 3], "name": "values"}],
    "layout": {
        "title": {"text": "A dropdown menu"},
        "updatemenus": [
            {
                "active": 0,
                "buttons": [
                    {"label": "rising", "method": "restyle", "args": [{"y": [[1, 2, 3]]}]},
                    {"label": "falling", "method": "restyle", "args": [{"y": [[3, 2, 1]]}]},
                    {"label": "flat", "method": "restyle", "args": [{"y": [[2, 2, 2]]}]},
                ],
            }
        ],
    },
}


def test_plotly_dropdown_by_keyboard(server, browser):
    """No chapter has a plotly menu yet: one is drawn into a chapter page by the book's own drawing call."""
    page, errors, outside = first_page_with("div.attnbook-plotly", browser, server, viewport=LAPTOP)
    try:
        figures_drawn(page)
        page.evaluate(
            """f => { const gd = document.createElement('div'); gd.id = 'menu-test'; gd.className = 'attnbook-plotly';
                      gd.style.height = '400px'; const alt = document.createElement('p'); alt.id = 'menu-test-alt';
                      const first = document.querySelector('div.attnbook-plotly');
                      first.parentNode.insertBefore(alt, first.nextSibling); first.parentNode.insertBefore(gd, alt);
                      return attnbookPlotly.newPlot('menu-test', f.data, f.layout, {responsive: true}); }""",
            MENU,
        )
        figure = page.locator("#menu-test")
        page.wait_for_function("() => document.getElementById('menu-test').dataset.attnbookMode")
        header = figure.locator("g.updatemenu-header-group")
        tab_to(page, header)
        ring(page)
        y = lambda: figure.evaluate("gd => Array.from(gd._fullData[0].y)")  # noqa: E731
        page.keyboard.press("ArrowDown")
        page.wait_for_function("() => document.getElementById('menu-test').layout.updatemenus[0].active === 1")
        assert y() == [3, 2, 1]
        assert "falling" in figure.locator("g.updatemenu-header-group").get_attribute("aria-label")
        page.keyboard.press("End")
        page.wait_for_function("() => document.getElementById('menu-test').layout.updatemenus[0].active === 2")
        assert y() == [2, 2, 2]
        page.keyboard.press("Enter")  # opens the list, with the focus on the chosen entry
        page.wait_for_function(
            "() => document.querySelectorAll('#menu-test g.updatemenu-dropdown-button').length === 3"
        )
        page.wait_for_function("() => document.activeElement.getAttribute('aria-label') === 'flat'")
        assert page.evaluate("() => document.activeElement.getAttribute('role')") == "button"
        ring(page)
        first = figure.locator("g.updatemenu-dropdown-button").first
        assert first.get_attribute("tabindex") == "0" and first.get_attribute("aria-label") == "rising"
        first.focus()
        page.keyboard.press("Enter")
        page.wait_for_function("() => document.getElementById('menu-test').layout.updatemenus[0].active === 0")
        assert y() == [1, 2, 3]
        assert errors == [] and outside == []
    finally:
        page.close()


def test_widget_slider_by_keyboard(server, browser):
    page, errors, outside = first_page_with(
        'script[type="application/vnd.jupyter.widget-view+json"]', browser, server, viewport=LAPTOP
    )
    try:
        # the widget manager loads when a widget comes near the screen, as a reader scrolls to it
        view = page.locator('script[type="application/vnd.jupyter.widget-view+json"]').first
        view.evaluate("v => v.parentElement.scrollIntoView({block: 'center'})")
        page.locator(".noUi-handle").first.wait_for(state="attached", timeout=15_000)
        handle = page.locator(".noUi-handle").first
        handle.scroll_into_view_if_needed()
        page.wait_for_function(
            "h => h.hasAttribute('aria-labelledby') || h.hasAttribute('aria-label')", arg=handle.element_handle()
        )
        name = handle.evaluate(
            "h => h.getAttribute('aria-label') || "
            "document.getElementById(h.getAttribute('aria-labelledby')).textContent"
        )
        assert name.strip(), "the slider's handle has no accessible name"
        tab_to(page, handle)
        ring(page)
        before = handle.get_attribute("aria-valuetext")
        at_end = handle.get_attribute("aria-valuenow") == handle.get_attribute("aria-valuemax")
        page.keyboard.press("ArrowLeft" if at_end else "ArrowRight")
        moved = "([h, v]) => h.getAttribute('aria-valuetext') !== v"
        page.wait_for_function(moved, arg=[handle.element_handle(), before])
        assert errors == [] and outside == []
    finally:
        page.close()


def test_folded_solution_by_keyboard(server, browser):
    page, errors, outside = first_page_with("div.solution.dropdown", browser, server, viewport=LAPTOP)
    try:
        solution = page.locator("div.solution.dropdown").first
        button = solution.locator("button.toggle-button").first
        button.wait_for(state="attached")
        body = solution.locator("section, .cell").first
        assert not body.is_visible(), "the solution is not folded"
        tab_to(page, button)
        ring(page)
        page.keyboard.press("Enter")
        body.wait_for(state="visible", timeout=5_000)
        assert errors == [] and outside == []
    finally:
        page.close()


@pytest.mark.parametrize("mode", ["light", "dark"])
def test_theme_controls_and_chapter_map_by_keyboard(server, browser, mode):
    page, errors, outside = open_page(browser, f"{server}/{built_toc()[0]}.html", mode=mode, viewport=LAPTOP)
    try:
        search = page.locator("button.search-button__button:visible").first
        tab_to(page, search)
        ring(page)
        page.keyboard.press("Enter")
        page.wait_for_function("() => document.querySelector('#pst-search-dialog').open")
        page.keyboard.press("Escape")
        page.wait_for_function("() => !document.querySelector('#pst-search-dialog').open")
        toggle = page.locator("button.theme-switch-button:visible").first
        tab_to(page, toggle)
        ring(page)
        before = page.evaluate("() => document.documentElement.dataset.mode")
        page.keyboard.press("Enter")
        page.wait_for_function("m => document.documentElement.dataset.mode !== m", arg=before)
        links = page.locator(".attnbook-chapter-map a")
        if links.count():
            first = links.first
            first.scroll_into_view_if_needed()
            tab_to(page, first)
            kind, width, _ = ring(page)
            assert kind == "stroke" and width >= 3
            with page.expect_navigation():
                page.keyboard.press("Enter")
            assert "/chapters/" in page.url
        assert errors == [] and outside == []
    finally:
        page.close()


# The layout the book changes on a phone: what must be back as it was on a wide screen.
# (Values set back to "unset" leave empty objects behind, which plotly reads as unset: they are pruned.)
LAYOUT = """gd => {
  const prune = v => {
    if (Array.isArray(v)) return v.map(prune);
    if (v && typeof v === 'object') {
      const out = {};
      for (const [k, x] of Object.entries(v)) { const p = prune(x); if (p !== null) out[k] = p; }
      return Object.keys(out).length ? out : null;
    }
    return v === undefined ? null : v;
  };
  return JSON.stringify(['margin', 'legend', 'title', 'font', 'annotations', 'width', 'height']
    .concat(Object.keys(gd.layout).filter(k => /^[xy]axis[0-9]*$/.test(k)).sort())
    .map(k => [k, prune(gd.layout[k])])
    .concat([['colorbars', gd.data.map(t => prune(t.colorbar))], ['div', gd.style.height]]));
}"""


def without_autoranges(layout: list) -> list:
    """The layout without the ranges plotly fits to the data (they depend a little on the size last drawn)."""
    out = []
    for key, value in layout:
        if key.endswith("axis") and isinstance(value, dict) and value.get("autorange") is True:
            value = {k: v for k, v in value.items() if k != "range"}
        out.append([key, value])
    return out


def test_phone_layout_is_undone_on_a_wide_screen(server, browser):
    """Drawn on a phone, then the screen turns wide: every figure gets its own layout back, exactly as a
    figure drawn on a laptop has it (legends, margins, ticks, titles and annotations unwrapped)."""
    pages = [e for e in built_toc() if e.startswith("chapters/")][::-1]  # the later chapters have every kind
    checked = 0
    for entry in pages:
        wide, errors, _ = open_page(browser, f"{server}/{entry}.html", viewport=LAPTOP)
        n = figures_drawn(wide).count()
        if not n:
            wide.close()
            continue
        expected = [json.loads(wide.locator("div.attnbook-plotly").nth(i).evaluate(LAYOUT)) for i in range(n)]
        wide.close()
        page, errors, _ = open_page(browser, f"{server}/{entry}.html", viewport=PHONE)
        try:
            figures = figures_drawn(page)
            assert figures.nth(0).evaluate("gd => gd.dataset.attnbookMode") == "phone-light"
            page.set_viewport_size(LAPTOP)
            for i in range(n):
                figure = figures.nth(i)
                page.wait_for_function(
                    "gd => gd.dataset.attnbookMode === 'desktop-light' && !gd._attnbookBusy",
                    arg=figure.element_handle(),
                    timeout=15_000,
                )
                got = json.loads(figure.evaluate(LAYOUT))
                assert without_autoranges(got) == without_autoranges(expected[i]), (
                    f"{entry}: figure {i} keeps phone changes"
                )
                for (key, axis), (_, want) in zip(got, expected[i]):  # ranges plotly fits: as on a laptop, within 5%
                    if key.endswith("axis") and want and want.get("autorange") is True and "range" in want:
                        span = abs(want["range"][1] - want["range"][0])
                        assert all(abs(a - b) <= 0.05 * span for a, b in zip(axis["range"], want["range"])), (
                            f"{entry}: figure {i}'s {key} spans {axis['range']}, on a laptop {want['range']}"
                        )
            assert errors == []
            checked += n
        finally:
            page.close()
        if checked >= 20:  # enough figures of enough kinds (legends, log axes, subplots, colour bars)
            break
    assert checked, "no plotly figure in the book"
