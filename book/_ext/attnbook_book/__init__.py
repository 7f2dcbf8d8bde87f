"""Build tooling of the book: not part of the library that chapters import.

- ``sphinx``: the Sphinx extension that serves MathJax, plotly.js and the widget manager from the site;
- ``plotly_renderer``: renders plotly figures in the HTML pages (myst-nb mime renderer);
- ``notebooks``: chapter notebooks: reading, the student version, staging executed notebooks for the build;
- ``pytest_plugin``: executes the chapters with nbval once, keeping their outputs and execution times.
"""
