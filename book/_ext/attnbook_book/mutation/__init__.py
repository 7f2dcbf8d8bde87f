"""Mutation testing of the exercise checkers: does any wrong answer pass?

For every exercise of ``attnbook/exercises/chapters.json``, the chapter's solution cell is mutated
(:mod:`.operators`), each mutant is compared with the solution by a behavioural oracle on a battery of
inputs (:mod:`.oracle`, :mod:`.inputs`, declared per exercise in :mod:`.specs`), and every mutant that
behaves differently somewhere (*killable*) must be rejected by the exercise's checker (:mod:`.run`).
The score, per exercise and per chapter, goes to ``_build/reports/mutation.json`` and ``mutation.md``
(:mod:`.report`); ``python -m attnbook_book.mutation`` runs it (``--help``).
"""
