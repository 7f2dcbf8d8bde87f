"""Running a learner's notebook in a Jupyter kernel, within bounds that the kernel cannot lift.

The grader speaks the Jupyter protocol to the kernel itself (``jupyter_client`` for the connection file and
the messages, ``zmq`` sockets of its own), so that nothing waits without a deadline:

- **time**: each cell may run ``cell_timeout`` seconds; then the kernel is interrupted (``SIGINT``) and,
  if the cell has not stopped a few seconds later, killed. The whole run may take ``notebook_timeout``
  seconds; then the kernel is killed at once. Killing is :func:`attnbook.grading.sandbox.stop`: SIGKILL to
  the kernel's process group, its descendants and every process carrying the run's mark, so nothing the
  learner's code started is left running.
- **a dead kernel** (``os._exit``, a crash, the memory limit, killed from outside) is noticed within a
  tenth of a second: the process is polled while waiting.
- **output**: a single message larger than ``max_output`` bytes is refused by the socket unread (ZeroMQ's
  ``MAXMSGSIZE``), and of a cell's output only the first ``max_output`` bytes are looked at; the rest is
  received and dropped, so the grader's memory does not grow with what a notebook prints.
- **memory**: the kernel and everything it starts are limited to ``max_memory`` bytes of data memory
  (:func:`attnbook.grading.sandbox.memory_limit`); a cell that runs out gets ``MemoryError``, which is
  reported as such.

Answers are taken out of the kernel by cells the grader adds (see :func:`answer_code`): each pickles one
name with cloudpickle into a folder of its own, and the grader reads the file when that cell has finished.
What the notebook prints is never read as an answer; it is only searched for ticks that it displays.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from . import sandbox

__all__ = ["Limits", "DEFAULT_LIMITS", "Cell", "Run", "run_cells", "TICK", "MAX_ANSWER_BYTES"]

TICK = "\u2713"
MAX_ANSWER_BYTES = 64 * 2**20  # an answer's pickle larger than this is not taken
_GRACE = 5.0  # seconds a cell has to stop after it is interrupted
_START = 120.0  # seconds a kernel has to start (not the learner's time)
_POLL = 0.1  # seconds between two looks at the kernel's process

# Runs the kernel under its memory limit (and as another user), then becomes it: ``python -c`` with the
# limit, the user, then the kernel's command. No module of the package is imported before the exec.
_LAUNCH = """\
import os, resource, sys
nbytes, uid, gid = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
if nbytes > 0:
    kind = resource.RLIMIT_DATA if sys.platform.startswith("linux") else resource.RLIMIT_AS
    resource.setrlimit(kind, (nbytes, nbytes))
if uid >= 0:
    os.setgroups([]); os.setgid(gid); os.setuid(uid)
os.execv(sys.argv[4], sys.argv[4:])
"""

_ANSWER = """\
def __attnbook_take_answer(name, path, limit):
    import builtins, cloudpickle, json
    namespace = builtins.globals()
    if name not in namespace:
        answer = {{"status": "missing"}}
    else:
        try:
            data = cloudpickle.dumps(namespace[name])
            if builtins.len(data) > limit:
                message = f"its pickle has {{builtins.len(data)}} bytes, over {{limit}}"
                answer = {{"status": "error", "message": message}}
            else:
                with builtins.open(path + ".pkl", "wb") as handle:
                    handle.write(data)
                answer = {{"status": "ok"}}
        except BaseException as error:
            message = builtins.type(error).__name__ + ": " + builtins.str(error)
            answer = {{"status": "error", "message": message[:400]}}
    with builtins.open(path + ".json", "w") as handle:
        json.dump(answer, handle)
__attnbook_take_answer({name!r}, {path!r}, {limit})
del __attnbook_take_answer
"""


@dataclass(frozen=True)
class Limits:
    """What a notebook may use. Times in seconds, sizes in bytes; ``max_memory`` 0 means no limit."""

    cell_timeout: float = 900.0  # per cell, and per exercise's check
    notebook_timeout: float = 1800.0  # the whole run of the notebook's cells
    max_output: int = 10 * 2**20  # what is read of one cell's output
    max_memory: int = 4 * 2**30  # data memory of the kernel (and of each check's process)


DEFAULT_LIMITS = Limits()


@dataclass(frozen=True)
class Cell:
    """A cell to run: the learner's code (``number``: its place among the notebook's code cells), or,
    when ``answer`` is set, the grader's cell that takes that name out of the kernel."""

    source: str = ""
    number: int | None = None
    answer: str = ""


@dataclass
class Run:
    """What running the cells gave: the answers taken (cell index -> status dict, with ``"pickle"`` bytes
    when taken), the cells whose output displays a tick, and how the run ended."""

    answers: dict[int, dict] = field(default_factory=dict)
    ticks: set[int] = field(default_factory=set)
    stopped: str = ""  # empty when every cell ran; else why the run ended early
    stopped_at: int | None = None  # the index of the cell that was running then
    notes: list[str] = field(default_factory=list)  # what happened on the way (interrupts, output, memory)
    seconds: float = 0.0
    unfinished: bool = False  # the grader's side failed or was interrupted: the run says nothing of the notebook


def answer_code(name: str, path: str, limit: int = MAX_ANSWER_BYTES) -> str:
    """The cell that pickles ``name`` of the kernel's namespace into ``path + ".pkl"`` (status: ``.json``)."""
    return _ANSWER.format(name=name, path=path, limit=limit)


def _where(cell: Cell) -> str:
    return f"code cell {cell.number}" if cell.number is not None else f"the cell that takes `{cell.answer}`"


def _mib(n: float) -> str:
    return f"{n / 2**20:.3g} MB" if n < 2**30 else f"{n / 2**30:.3g} GB"


def _texts(msg_type: str, content: dict) -> list[str]:
    if msg_type == "stream":
        return [str(content.get("text", ""))]
    if msg_type in ("display_data", "execute_result", "update_display_data"):
        data = content.get("data", {})
        return [v if isinstance(v, str) else json.dumps(v) for k, v in data.items() if k.startswith("text/")]
    if msg_type == "error":
        return [str(content.get("evalue", ""))]
    return []


def _death(kernel: _Kernel, limits: Limits) -> str:
    """How the kernel's process ended."""
    status = kernel.process.returncode
    if status >= 0:
        return f"it exited with status {status}"
    how = f"killed by {signal.Signals(-status).name}" if -status in signal.valid_signals() else f"signal {-status}"
    if limits.max_memory and -status in (signal.SIGKILL, signal.SIGABRT, signal.SIGSEGV, signal.SIGBUS):
        how += f": perhaps out of memory, over the limit of {_mib(limits.max_memory)}"
    return how


def _out_of_memory(ename: str, evalue: str) -> bool:
    return ename == "MemoryError" or "can't allocate memory" in evalue or "std::bad_alloc" in evalue


class _Kernel:
    """A kernel process and the grader's sockets to it."""

    def __init__(self, workdir: Path, limits: Limits, mark: str, user: tuple[int, int] | None, threads: int | None):
        import zmq
        from jupyter_client.connect import write_connection_file
        from jupyter_client.session import Session

        self.folder = tempfile.TemporaryDirectory(prefix="attnbook-kernel-")
        folder = Path(self.folder.name)
        key = uuid.uuid4().hex.encode()
        connection, info = write_connection_file(
            str(folder / "connection.json"), transport="ipc", ip=str(folder / "kernel"), key=key
        )
        (folder / "ipython").mkdir()
        if user is not None:  # the kernel, as another user, binds its sockets here and reads the connection
            for path in (folder, folder / "ipython", Path(connection)):
                os.chown(path, *user)
        env = dict(os.environ)
        env.update(
            {
                sandbox.MARK: mark,
                "IPYTHONDIR": str(folder / "ipython"),  # fresh: no startup file of an earlier notebook runs
                "JPY_PARENT_PID": str(os.getpid()),  # the kernel ends itself if the grader dies
                "MPLBACKEND": "agg",
                "PYTHONUNBUFFERED": "1",
            }
        )
        if threads and "OMP_NUM_THREADS" not in os.environ:
            env["OMP_NUM_THREADS"] = str(threads)
        if user is not None:
            env["HOME"] = str(workdir)
        uid, gid = user if user is not None else (-1, -1)
        command = [sys.executable, "-m", "ipykernel_launcher", "-f", connection, "--HistoryManager.enabled=False"]
        with open(folder / "stderr", "wb") as stderr:  # read when the kernel does not start
            self.process = subprocess.Popen(
                [sys.executable, "-c", _LAUNCH, str(limits.max_memory), str(uid), str(gid), *command],
                cwd=workdir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                start_new_session=True,  # its own process group, stopped as one
            )
        self.mark = mark
        self.session = Session(key=key, signature_scheme="hmac-sha256")
        self.context = zmq.Context()
        self.sockets, self.monitors = {}, {}
        self.poller = zmq.Poller()
        self.max_message = limits.max_output + 2**16
        self.urls = {name: f"ipc://{info['ip']}-{info[name + '_port']}" for name in ("shell", "iopub")}
        for name in self.urls:
            self.connect(name)

    def connect(self, name: str) -> None:
        """A socket of the grader's for channel ``name`` ("shell" or "iopub"), in place of the one it had."""
        import zmq

        if name in self.sockets:
            for old in (self.sockets[name], self.monitors[name]):
                self.poller.unregister(old)
                old.close(linger=0)
        socket = self.context.socket(zmq.SUB if name == "iopub" else zmq.DEALER)
        socket.linger = 0
        socket.setsockopt(zmq.MAXMSGSIZE, self.max_message)  # a larger message: refused unread
        if name == "iopub":
            socket.setsockopt(zmq.SUBSCRIBE, b"")
        monitor = socket.get_monitor_socket(zmq.EVENT_DISCONNECTED)
        socket.connect(self.urls[name])
        self.sockets[name], self.monitors[name] = socket, monitor
        self.poller.register(socket, zmq.POLLIN)
        self.poller.register(monitor, zmq.POLLIN)

    def last_words(self) -> str:
        """The last line the kernel's process wrote to its stderr (why it did not start)."""
        try:
            with open(Path(self.folder.name) / "stderr", "rb") as handle:
                handle.seek(max(0, handle.seek(0, 2) - 2000))
                lines = handle.read().decode(errors="replace").strip().splitlines()
        except OSError:
            return ""
        return lines[-1][:300] if lines else ""

    def alive(self) -> bool:
        return self.process.poll() is None

    def dying(self, within: float = 1.0) -> bool:
        """Whether the kernel's process ends within ``within`` seconds (a socket closes as it dies)."""
        try:
            self.process.wait(within)
        except subprocess.TimeoutExpired:
            return False
        return True

    def execute(self, code: str) -> str:
        content = {"code": code, "silent": False, "store_history": True, "user_expressions": {}}
        content.update(allow_stdin=False, stop_on_error=False)
        return self.session.send(self.sockets["shell"], "execute_request", content)["header"]["msg_id"]

    def interrupt(self) -> None:
        try:
            os.kill(self.process.pid, signal.SIGINT)
        except ProcessLookupError:
            pass

    def events(self, timeout: float):
        """(channel, message or None, size) for each message within ``timeout`` s; a message's content is
        left as bytes; channel "lost-shell"/"lost-iopub" when a socket dropped its connection."""
        from zmq.utils.monitor import recv_monitor_message

        for socket, _ in self.poller.poll(max(0, int(timeout * 1000))):
            for name in self.sockets:
                if socket is self.monitors[name]:
                    recv_monitor_message(socket)
                    yield f"lost-{name}", None, 0
                elif socket is self.sockets[name]:
                    frames = socket.recv_multipart(copy=False)
                    size = sum(len(f.buffer) for f in frames)
                    try:
                        _, frames = self.session.feed_identities(frames, copy=False)
                        message = self.session.deserialize(frames, content=False, copy=False)
                    except Exception:  # noqa: BLE001 - not a message of this session: ignored
                        continue
                    yield name, message, size

    def close(self) -> None:
        sandbox.stop(self.process.pid, self.mark)
        self.process.wait()
        for socket in [*self.sockets.values(), *self.monitors.values()]:
            socket.close(linger=0)
        self.context.term()
        self.folder.cleanup()


def _content(message) -> dict:
    raw = message["content"]
    raw = raw.bytes if hasattr(raw, "bytes") else raw
    try:
        content = json.loads(raw) if isinstance(raw, (bytes, bytearray, memoryview, str)) else raw
    except ValueError:
        return {}
    return content if isinstance(content, dict) else {}


def _read_file(path: Path, limit: int) -> bytes:
    """The bytes of the regular file at ``path`` (not a link, a pipe or a device); ValueError when over ``limit``."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > limit:
            raise ValueError(f"{path.name} is not a regular file of at most {limit} bytes")
        with os.fdopen(os.dup(fd), "rb") as handle:
            data = handle.read(limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise ValueError(f"{path.name} is over {limit} bytes")
    return data


def _read_answer(path: Path) -> dict:
    """The status a cell of :func:`answer_code` wrote at ``path`` (.json), with the pickle's bytes if ok;
    {} when there is none. The learner's code could have put anything there: only regular files of
    bounded size are read."""
    try:
        answer = json.loads(_read_file(path.with_suffix(".json"), 2**16))
        if not isinstance(answer, dict) or answer.get("status") not in ("ok", "missing", "error"):
            return {"status": "error", "message": "its status file is not the grader's"}
        if answer["status"] == "ok":
            answer["pickle"] = _read_file(path.with_suffix(".pkl"), MAX_ANSWER_BYTES)
        return answer
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as error:  # a link, a pipe, a device, too large, not JSON
        return {"status": "error", "message": f"its file could not be read ({type(error).__name__}: {error})"[:300]}


def run_cells(
    cells: list[Cell],
    workdir: Path,
    limits: Limits = DEFAULT_LIMITS,
    *,
    stop_event: threading.Event | None = None,
    user: tuple[int, int] | None = None,
    threads: int | None = None,
) -> Run:
    """Run ``cells`` in order in a fresh kernel whose working folder is ``workdir``, within ``limits``.

    ``stop_event`` ends the run early (the grader was interrupted); ``user`` runs the kernel as (uid, gid);
    ``threads`` sets the kernel's ``OMP_NUM_THREADS`` unless the grader's environment sets it.
    """
    run = Run()
    mark = uuid.uuid4().hex
    answers = Path(tempfile.mkdtemp(prefix="answers-", dir=workdir))
    if user is not None:
        os.chown(workdir, *user)
        os.chown(answers, *user)
    start = time.monotonic()
    kernel = _Kernel(workdir, limits, mark, user, threads)
    try:
        _run(kernel, cells, answers, limits, run, stop_event)
    finally:
        kernel.close()
        run.seconds = time.monotonic() - start
    return run


def _run(kernel: _Kernel, cells, answers: Path, limits: Limits, run: Run, stop_event) -> None:
    cell_of: dict[str, int] = {}  # msg_id -> index of the cell
    output = [0] * len(cells)  # bytes of output received per cell

    idle: set[int] = set()  # the cells whose output is complete (the kernel went idle after them)

    def take(message, size: int) -> None:  # an iopub message: count it, look for a tick
        index = cell_of.get(message.get("parent_header", {}).get("msg_id", ""))
        if index is None:
            return
        if message["header"]["msg_type"] == "status" and _content(message).get("execution_state") == "idle":
            idle.add(index)
        before = output[index]
        output[index] += size
        if output[index] > limits.max_output:
            if before <= limits.max_output:
                run.notes.append(
                    f"{_where(cells[index])} printed more than {_mib(limits.max_output)}; the rest of its "
                    "output was not read"
                )
            return
        msg_type = message["header"]["msg_type"]
        if cells[index].answer or msg_type not in ("stream", "display_data", "execute_result", "error"):
            return
        if any(TICK in text for text in _texts(msg_type, _content(message))):
            run.ticks.add(index)

    def lost(channel: str, index: int | None) -> bool:
        """A socket dropped its connection: a message over the limit (True for the replies' socket, which
        the run cannot do without), or the kernel's end (then the next look at the process notices it)."""
        if kernel.dying():
            return False
        if channel == "lost-shell":
            return True
        kernel.connect("iopub")  # output from here on is read again
        where = f" while {_where(cells[index])} ran" if index is not None else ""
        run.notes.append(f"a message of more than {_mib(limits.max_output)} was refused{where}; it was not read")
        return False

    # the kernel is ready when its output channel reaches the grader (a welcome, or the status of a request)
    ready_by, asked, welcomed = time.monotonic() + _START, 0.0, False
    while not welcomed:
        if stop_event is not None and stop_event.is_set():
            run.stopped, run.unfinished = "grading was interrupted", True
            return
        if not kernel.alive() or time.monotonic() > ready_by:
            run.unfinished = True
            run.stopped = (
                f"the kernel did not start within {_START:.0f} s"
                if kernel.alive()
                else f"the kernel did not start ({_death(kernel, limits)}: {kernel.last_words() or 'no message'})"
            )
            return
        if time.monotonic() - asked > 1.0:
            kernel.session.send(kernel.sockets["shell"], "kernel_info_request", {})
            asked = time.monotonic()
        for channel, _, _ in kernel.events(_POLL):
            welcomed |= channel == "iopub"
    begin = time.monotonic()
    notebook_deadline = begin + limits.notebook_timeout

    for index, cell in enumerate(cells):
        path = answers / f"answer-{index}"
        code = answer_code(cell.answer, str(path)) if cell.answer else cell.source
        msg_id = kernel.execute(code)
        cell_of[msg_id] = index
        cell_deadline = time.monotonic() + limits.cell_timeout
        interrupted = False
        reply = None
        while reply is None:
            now = time.monotonic()
            elapsed = f"after {now - begin:.0f} s"
            if stop_event is not None and stop_event.is_set():
                run.stopped, run.stopped_at, run.unfinished = "grading was interrupted", index, True
                return
            if not kernel.alive():
                run.stopped, run.stopped_at = (
                    f"the kernel died at {_where(cell)} {elapsed} ({_death(kernel, limits)})",
                    index,
                )
                return
            if now > notebook_deadline:
                run.stopped = (
                    f"the notebook stopped at {_where(cell)} {elapsed}: it reached the limit of "
                    f"{limits.notebook_timeout:.0f} s for the whole notebook"
                )
                run.stopped_at = index
                return
            if now > cell_deadline:
                if interrupted:
                    run.stopped = (
                        f"the notebook stopped at {_where(cell)} {elapsed}: the cell ran longer than the "
                        f"{limits.cell_timeout:.0f} s allowed for a cell and did not stop when interrupted"
                    )
                    run.stopped_at = index
                    return
                kernel.interrupt()
                interrupted, cell_deadline = True, now + _GRACE
            for channel, message, size in kernel.events(min(_POLL, max(0.0, notebook_deadline - now))):
                if channel.startswith("lost-"):
                    if lost(channel, index):  # the kernel's replies can no longer reach the grader
                        run.stopped = (
                            f"the notebook stopped at {_where(cell)} {elapsed}: the kernel sent a reply larger "
                            f"than {_mib(limits.max_output)}"
                        )
                        run.stopped_at = index
                        return
                elif channel == "iopub":
                    take(message, size)
                elif message["header"]["msg_type"] == "execute_reply":
                    if message["parent_header"].get("msg_id") == msg_id:
                        reply = _content(message)
        if interrupted:
            run.notes.append(
                f"{_where(cell)} ran longer than the {limits.cell_timeout:.0f} s allowed for a cell and was interrupted"
            )
        if reply.get("status") == "error" and _out_of_memory(str(reply.get("ename")), str(reply.get("evalue"))):
            run.notes.append(f"{_where(cell)} ran out of memory (the limit is {_mib(limits.max_memory)})")
        if cell.answer:
            run.answers[index] = _read_answer(path)
    # the output of the last cell may still be on its way: a short wait for it
    until = time.monotonic() + 0.5
    while time.monotonic() < until and len(cells) - 1 not in idle:
        for channel, message, size in kernel.events(0.05):
            if channel == "iopub":
                take(message, size)
            elif channel == "lost-iopub":
                lost(channel, None)
