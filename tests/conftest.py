"""Hypothesis profiles for the whole suite, chosen by the environment variable ``HYPOTHESIS_PROFILE``:

- ``ci`` (the default): Hypothesis's own defaults and each test's budget as written, derandomized: the same
  examples on every run, so that a clean clone's result does not depend on the draw;
- ``explore``: each budget as written, drawn afresh at random on every run:
  ``HYPOTHESIS_PROFILE=explore make test-lib`` looks for the cases the fixed draw does not reach (run it a few
  times before a release);
- ``dev``: at most 10 examples a test, for a quick loop while changing the library:
  ``HYPOTHESIS_PROFILE=dev make test-lib``.

A test that sets its own budget writes it as ``max_examples=min(n, settings.default.max_examples)``, so
that the ``dev`` profile can lower it; the API properties (``tests/lib/api``) do the same with each spec's
number of examples.
"""

import os

from hypothesis import settings

settings.register_profile("ci", settings.get_profile("default"), derandomize=True)
settings.register_profile("explore", database=None)
settings.register_profile("dev", max_examples=10)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
