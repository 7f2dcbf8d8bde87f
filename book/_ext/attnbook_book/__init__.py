"""Build tooling of the book: not part of the library that chapters import.

- ``sphinx``: the Sphinx extension that serves plotly.js and the widget manager from the site, and puts the
  text of each page first (what a page needs for its figures and widgets loads when they come near the screen);
- ``mathjax``: typesets the math when the book is built (MathJax in Node, ``tex2svg.js``);
- ``icons``: the theme's icons with no script and no font to download;
- ``plotly_renderer``: renders plotly figures in the HTML pages (myst-nb mime renderer);
- ``lighthouse``: how fast the built pages open on a phone (Lighthouse's mobile audit, served with gzip);
- ``notebooks``: chapter notebooks: reading, the student version, staging executed notebooks for the build;
- ``pytest_plugin``: executes the chapters with nbval once, keeping their outputs and execution times.
"""
