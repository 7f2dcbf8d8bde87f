"""Sphinx extension: the HTML book works with no network.

- copies MathJax 3, require.js, the Jupyter widget manager (from the npm packages that ``make setup``
  installs into node_modules/) and plotly.js (from the installed plotly package) into ``_static/vendor/``;
- points MathJax and the widget manager at those copies (see _config.yml) and adds a small script that
  lets the widget manager find its fonts locally and call MathJax 3 through the MathJax 2 API it expects;
- removes duplicated script tags (Sphinx 7.4 emits inline scripts added after the builder starts twice).
"""
from __future__ import annotations

import shutil
from pathlib import Path

from sphinx.errors import ConfigError

REPO = Path(__file__).resolve().parents[3]

# (source relative to node_modules, destination relative to _static/vendor)
NPM_ASSETS = [
    ("mathjax/es5/tex-chtml.js", "mathjax/tex-chtml.js"),
    ("mathjax/es5/output/chtml/fonts", "mathjax/output/chtml/fonts"),
    ("mathjax/es5/input/tex/extensions", "mathjax/input/tex/extensions"),
    ("mathjax/es5/ui", "mathjax/ui"),
    ("mathjax/es5/a11y", "mathjax/a11y"),
    ("mathjax/es5/adaptors", "mathjax/adaptors"),
    ("mathjax/es5/sre", "mathjax/sre"),
    ("requirejs/require.js", "require/require.js"),
    ("@jupyter-widgets/html-manager/dist", "html-manager"),
]

WIDGETS_SHIM = """\
// Local paths for the Jupyter widget manager, and the MathJax 2 call it makes, served by MathJax 3.
(function () {
  var root = document.documentElement.dataset.content_root || "./";
  if (window.require && window.require.config) {
    var local = root + "_static/vendor/html-manager";
    window.require.config({paths: {"@jupyter-widgets/html-manager/dist": local, "@jupyter-widgets": local}});
  }
  var hub = {Queue: function () {
    for (var i = 0; i < arguments.length; i++) {
      var job = arguments[i], el = Array.isArray(job) ? job[2] : undefined;
      if (window.MathJax && window.MathJax.typesetPromise) {
        window.MathJax.startup.promise.then(function () {
          return window.MathJax.typesetPromise(el ? [el] : undefined);
        });
      }
    }
  }};
  function install() { if (window.MathJax && !window.MathJax.Hub) { window.MathJax.Hub = hub; } }
  install();
  document.addEventListener("DOMContentLoaded", install);
})();
"""


def _node_modules(app) -> Path:
    return Path(app.config.attnbook_node_modules)


def check_assets(app) -> None:
    missing = [src for src, _ in NPM_ASSETS if not (_node_modules(app) / src).exists()]
    if missing:
        raise ConfigError(
            f"the book's JavaScript assets are missing from {_node_modules(app)}: {', '.join(missing)}. "
            "Run `make setup` (it runs `npm ci`) before building.")


def copy_assets(app, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    import plotly

    vendor = Path(app.outdir) / "_static" / "vendor"
    for src, dst in NPM_ASSETS:
        source, target = _node_modules(app) / src, vendor / dst
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target, dirs_exist_ok=True)
        else:
            shutil.copy2(source, target)
    plotly_js = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    (vendor / "plotly").mkdir(parents=True, exist_ok=True)
    shutil.copy2(plotly_js, vendor / "plotly" / "plotly.min.js")
    (vendor / "widgets-shim.js").write_text(WIDGETS_SHIM)


def dedupe_scripts(app, pagename, templatename, context, doctree) -> None:
    scripts = context.get("script_files")
    if not scripts:
        return
    seen, unique = set(), []
    for script in scripts:
        key = (str(script.filename or ""), tuple(sorted((k, str(v)) for k, v in script.attributes.items())))
        if key not in seen:
            seen.add(key)
            unique.append(script)
    scripts[:] = unique


def setup(app):
    app.add_config_value("attnbook_node_modules", str(REPO / "node_modules"), "html")
    app.connect("builder-inited", check_assets)
    app.connect("html-page-context", dedupe_scripts, priority=900)
    app.connect("build-finished", copy_assets)
    return {"version": "0.1", "parallel_read_safe": True, "parallel_write_safe": True}
