"""The instructor's grader: learners' notebooks graded with the book's checkers, one or a whole class.

``python -m attnbook.grading`` is the command (:mod:`.cli`). Learners never need this package: the
checkers they call from their notebooks are :mod:`attnbook.exercises`.

- :mod:`.catalog`: every chapter's exercises, read from the chapters (the list installed with the package);
- :mod:`.grade`: one notebook: which chapter, the learner's program, the verdict of each exercise;
- :mod:`.kernel`: running a notebook's cells in a Jupyter kernel within time, output and memory limits;
- :mod:`.sandbox`: the recording server that forks a process per check, limits, stopping processes;
- :mod:`.replay`: the record of a check (data only) and replaying it through the checker;
- :mod:`.classroom`: a class in parallel, results kept in a folder by content hash, the CSV;
- :mod:`.feedback`: a page per learner, and Gradescope's results format;
- :mod:`.gradescope`: the Gradescope autograder bundle and what it runs.

It needs the ``grade`` extra and a system with ``fork()``. The package is not on PyPI: install it from the book's
repository at its release (or ``pip install -e ".[grade]"`` in a clone)::

    pip install "attnbook[grade] @ git+https://github.com/attention-step-by-step/attention-step-by-step@vX.Y.Z"
"""
