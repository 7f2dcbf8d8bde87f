"""Hypothesis profiles for the whole suite, chosen by the environment variable ``HYPOTHESIS_PROFILE``:

- ``ci`` (the default): Hypothesis's own defaults, and each test's budget as written;
- ``dev``: at most 10 examples a test, for a quick loop while changing the library:
  ``HYPOTHESIS_PROFILE=dev make test-lib``.

A test that sets its own budget writes it as ``max_examples=min(n, settings.default.max_examples)``, so
that the ``dev`` profile can lower it; the API properties (``tests/lib/api``) do the same with each spec's
number of examples.
"""

import os

from hypothesis import settings

settings.register_profile("ci", settings.get_profile("default"))
settings.register_profile("dev", max_examples=10)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
