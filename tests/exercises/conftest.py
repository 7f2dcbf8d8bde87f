"""With ATTNBOOK_REPLAY_CHECKS=1, every checker of attnbook.exercises is also run the way the grader runs it:
recorded on the answer, then replayed from the record alone; the replayed outcome (result or hint) must be
the direct one. tests/grading/test_grading.py runs the checkers' tests in this mode."""

import importlib
import os

import pytest


def _outcome(check, answer, args, kwargs):
    from attnbook.exercises import ExerciseFailed, Result

    try:
        result = check(answer, *args, **kwargs)
    except ExerciseFailed as failed:
        return ("failed", failed.exercise, failed.hint), failed
    assert type(result) is Result
    return ("result", result.exercise, result.passed, result.message), result


def _replaying(check):
    def run(answer, *args, **kwargs):
        import io

        import torch
        from attnbook.grading import replay

        direct, value = _outcome(check, answer, args, kwargs)
        recorder = replay.Recorder()
        record = {"format": replay.FORMAT, "answer": recorder.answer_info(answer), "calls": [], "ended": ""}
        try:
            check(recorder.wrap(answer), *args, **kwargs)
        except BaseException:  # noqa: BLE001 - as in the recording process
            pass
        record["calls"] = recorder.calls
        buffer = io.BytesIO()
        torch.save(record, buffer)
        replayer = replay.Replayer(replay.load_record(buffer.getvalue()))
        replayed, _ = _outcome(check, replayer.answer(), args, kwargs)
        assert replayed == direct, f"{check.__name__}: replayed {replayed}, direct {direct}"
        assert not replayer.calls, f"{check.__name__}: {len(replayer.calls)} recorded calls were not replayed"
        if isinstance(value, BaseException):
            raise value
        return value

    run.__name__ = check.__name__
    return run


@pytest.fixture(autouse=True)
def _replay_every_check(monkeypatch):
    if os.environ.get("ATTNBOOK_REPLAY_CHECKS") != "1":
        yield
        return
    from attnbook.grading import catalog

    for module in {c.module for c in catalog.load().values() if c.module}:
        checkers = importlib.import_module(f"attnbook.exercises.{module}")
        for name in dir(checkers):
            if name.startswith("check_"):
                monkeypatch.setattr(checkers, name, _replaying(getattr(checkers, name)))
    yield
