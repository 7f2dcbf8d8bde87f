"""The processes that run a learner's code for the grader, their limits, and how to stop all of them.

- **The recording server** (``python -m attnbook.grading.sandbox``) imports the checkers and never runs a
  learner's code. For each exercise it forks a process that loads the learner's answer and records the
  book's checker on it (:func:`attnbook.grading.replay.record_exercise`); the job and the answer arrive on
  its stdin and the record leaves on its stdout, as length-prefixed frames, and each forked process sends
  its record back through a pipe of its own. When the grader goes away (its end of stdin closes) the server
  stops the process it is waiting for and ends.
- :class:`CheckServer` is the grader's end of it.
- **Limits and clean-up** shared with the kernels that run the notebooks (:mod:`attnbook.grading.kernel`):
  the memory limit of a process, another user to run as, and :func:`stop` which ends a process with
  everything it started: its process group, its descendants, and every process whose environment carries
  the mark the grader gave it (:data:`MARK`), which also finds a process that left its group and its
  parent.
"""

from __future__ import annotations

import importlib
import io
import json
import os
import select
import signal
import struct
import subprocess
import sys
import tempfile
import time

__all__ = ["CheckServer", "MARK", "memory_limit", "stop", "sweep", "read_frame", "write_frame", "serve", "main"]

MARK = "ATTNBOOK_GRADING_MARK"  # the environment variable that marks every process started for grading


# --- limits and clean-up ------------------------------------------------------------------------------------


def memory_limit(nbytes: int) -> None:
    """Limit this process (and what it starts) to ``nbytes`` of data memory; 0 leaves it unlimited.

    On Linux ``RLIMIT_DATA`` counts the memory a process writes to (heap, arrays, tensors), not the address
    space it only reserves or the libraries it maps, so the limit means what it says. An allocation over
    it fails: Python raises ``MemoryError``, PyTorch ``RuntimeError: ... can't allocate memory``.
    """
    if nbytes <= 0:
        return
    import resource

    kind = resource.RLIMIT_DATA if sys.platform.startswith("linux") else resource.RLIMIT_AS
    resource.setrlimit(kind, (nbytes, nbytes))


def become(user: tuple[int, int] | None) -> None:
    """Run as ``(uid, gid)`` from here on, with no supplementary groups (a process started as root)."""
    if user is not None:
        os.setgroups([])
        os.setgid(user[1])
        os.setuid(user[0])


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def sweep(mark: str) -> int:
    """SIGKILL every process whose environment holds ``MARK=mark``; the number found."""
    import psutil

    found = 0
    entry = f"{MARK}={mark}".encode()
    for process in psutil.process_iter():
        if process.pid == os.getpid():
            continue
        try:
            with open(f"/proc/{process.pid}/environ", "rb") as handle:  # psutil's environ() parses it all
                marked = entry in handle.read().split(b"\0")
        except OSError:
            try:
                marked = process.environ().get(MARK) == mark
            except (psutil.Error, OSError):
                continue
        if marked:
            found += 1
            _kill(process.pid)
    return found


def stop(pid: int | None, mark: str | None = None) -> None:
    """SIGKILL process ``pid``, its process group, its descendants and the processes marked ``mark``.

    Nothing is asked of them: a process that ignores signals or spins in C code stops all the same.
    """
    if pid is not None:
        import psutil

        try:
            descendants = psutil.Process(pid).children(recursive=True)
        except psutil.Error:
            descendants = []
        try:
            os.killpg(pid, signal.SIGKILL)  # the process was started as the leader of its own group
        except (ProcessLookupError, PermissionError):
            pass
        _kill(pid)
        for child in descendants:
            _kill(child.pid)
    if mark:
        sweep(mark)


# --- frames -------------------------------------------------------------------------------------------------

_FRAME = struct.Struct(">Q")


def read_frame(stream, limit: int = 2**31) -> bytes | None:
    """One length-prefixed message from ``stream``; None at the end of the stream."""
    head = stream.read(_FRAME.size)
    if len(head) < _FRAME.size:
        return None
    (size,) = _FRAME.unpack(head)
    if size > limit:
        raise ValueError(f"a message of {size} bytes is over the limit of {limit}")
    data = stream.read(size)
    return data if len(data) == size else None


def write_frame(stream, data: bytes) -> None:
    stream.write(_FRAME.pack(len(data)) + data)


# --- the recording server -------------------------------------------------------------------------------------


def _isolate(keep: int) -> None:
    """In a forked child: stdin, stdout and stderr to /dev/null, every other inherited descriptor closed."""
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.closerange(3, keep)
    os.closerange(keep + 1, max(keep + 2, os.sysconf("SC_OPEN_MAX") if hasattr(os, "sysconf") else 4096))


def _record_in_child(job: dict, answer: bytes, watch: int) -> tuple[dict, bytes] | None:
    """Fork a process that records one exercise; its record comes back through a pipe of its own.

    ``watch`` is the server's stdin: if it becomes readable while the child runs, the grader has gone
    away (it sends no job before the last reply): the child is stopped and None returned.
    """
    from .replay import MAX_RECORD_BYTES, record_exercise

    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: the only process that runs the learner's code
        status = 1
        try:
            os.setsid()  # its own process group, so that everything it starts can be stopped with it
            _isolate(keep=write_end)
            memory_limit(int(job.get("memory", 0)))
            become(tuple(job["user"]) if job.get("user") else None)
            import torch

            buffer = io.BytesIO()
            torch.save(record_exercise(job["module"], job["checker"], answer), buffer)
            view = memoryview(buffer.getvalue())
            while view:
                view = view[os.write(write_end, view) :]
            status = 0
        finally:
            os._exit(status)
    os.close(write_end)
    chunks, size, why = [], 0, ""
    deadline = time.monotonic() + float(job["timeout"])
    while True:
        left = deadline - time.monotonic()
        ready = select.select([read_end, watch], [], [], left)[0] if left > 0 else []
        if watch in ready:
            why = "gone"
            break
        if not ready:
            why = "timeout"
            break
        chunk = os.read(read_end, 1 << 20)
        if not chunk:
            break
        size += len(chunk)
        if size > MAX_RECORD_BYTES:
            why = "too large"
            break
        chunks.append(chunk)
    os.close(read_end)
    stop(pid)  # the child if it is still running, and whatever it started
    os.waitpid(pid, 0)
    if why == "gone":
        return None
    if not why and not chunks:
        why = "ended"
    return {"why": why}, (b"" if why else b"".join(chunks))


def serve(stdin=None, stdout=None) -> int:
    """Answer jobs until stdin ends: a JSON frame ``{"module", "checker", "timeout", "memory", "user"}`` then
    the pickled answer; the reply is a JSON frame ``{"why": ""}`` (or "timeout", "ended", "too large") then
    the record."""
    stdin = stdin or sys.stdin.buffer
    stdout = stdout or sys.stdout.buffer
    import cloudpickle  # noqa: F401 - imported once here, so that each forked child starts at once

    from . import catalog

    for module in sorted({c.module for c in catalog.load().values() if c.module}):  # pages may have no exercises
        importlib.import_module(f"attnbook.exercises.{module}")
    while True:
        header = read_frame(stdin)
        answer = read_frame(stdin) if header is not None else None
        if answer is None:
            return 0
        done = _record_in_child(json.loads(header), answer, stdin.fileno())
        if done is None:
            return 0
        reply, record = done
        write_frame(stdout, json.dumps(reply).encode())
        write_frame(stdout, record)
        stdout.flush()


def main(argv: list[str] | None = None) -> int:
    """``python -m attnbook.grading.sandbox``: the recording server, spoken to through stdin and stdout."""
    if not hasattr(os, "fork"):
        print("grading needs a system with fork() (Linux or macOS)", file=sys.stderr)
        return 2
    return serve()


class CheckServer:
    """The grader's end of the recording server: one for many notebooks, since it never runs the learner's
    code; it forks a fresh process for each exercise. ``memory`` (bytes, 0: no limit) and ``user`` (uid,
    gid) apply to those processes. The server and every process it forks carry a mark of their own in their
    environment, so that closing the server stops them all, even a check's process whose server was
    killed under it (see :func:`stop`)."""

    def __init__(self, *, memory: int = 0, user: tuple[int, int] | None = None):
        import uuid

        self.memory, self.user, self.mark = memory, user, uuid.uuid4().hex
        self._process = None
        self._folder = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _start(self):
        self._folder = tempfile.TemporaryDirectory(prefix="attnbook-check-")
        env = dict(os.environ, **{MARK: self.mark})
        self._process = subprocess.Popen(
            [sys.executable, "-m", "attnbook.grading.sandbox"],
            cwd=self._folder.name,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

    def close(self):
        if self._process is not None:
            try:
                self._process.stdin.close()  # the server stops its current child and ends
                self._process.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                pass
            stop(self._process.pid, self.mark)
            self._process.wait()
            self._process = None
        if self._folder is not None:
            self._folder.cleanup()
            self._folder = None

    def record(self, module: str, checker: str, answer: bytes, timeout: float, stop_event=None) -> tuple[bytes, str]:
        """(the record, '') or (b'', why there is none) for one exercise; ``stop_event`` (a
        ``threading.Event``) ends the wait at once with why "interrupted"."""
        from .replay import MAX_RECORD_BYTES

        if self._process is None or self._process.poll() is not None:
            self.close()
            self._start()
        process = self._process
        job = {"module": module, "checker": checker, "timeout": timeout, "memory": self.memory, "user": self.user}
        reply = record = None
        try:
            write_frame(process.stdin, json.dumps(job).encode())
            write_frame(process.stdin, answer)
            process.stdin.flush()
            deadline = time.monotonic() + timeout + 60  # the server stops the check after ``timeout``
            while time.monotonic() < deadline:
                if stop_event is not None and stop_event.is_set():
                    self.close()  # the server stops the check's process as it ends
                    return b"", "interrupted"
                if select.select([process.stdout], [], [], 0.1)[0]:
                    reply = read_frame(process.stdout)
                    record = read_frame(process.stdout, limit=MAX_RECORD_BYTES) if reply is not None else None
                    break
        except (OSError, ValueError):
            reply = record = None
        if reply is None or record is None:  # the server itself stopped: start a new one next time
            self.close()
            return b"", "ended"
        return record, json.loads(reply)["why"]


if __name__ == "__main__":
    sys.exit(main())
