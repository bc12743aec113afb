"""Python children started from a process that has already imported the libraries.

A test that needs a real process (its own interpreter state, its own database connections,
a SIGKILL that leaves a transaction open) starts ``python -c CODE`` or ``python -m MODULE``.
A fresh interpreter spends about 2 s of CPU importing Django, DRF, Celery, psycopg and the
rest before it does anything; a suite run starts about a hundred. Here one server process
per pytest process imports them once (nothing that reads the settings: those come from each
child's own environment) and forks a child per request, which then runs as ``python -c`` or
``-m`` would: its own environment, working directory, argv and standard streams, ``__main__``
a fresh module, the interpreter's normal exit (atexit, threads joined, streams flushed).

The child is made a child of the pytest process itself (the server forks twice, and the
pytest process is a child subreaper while the middle process exits), so ``wait``, ``poll``,
``kill`` and a process group behave as with ``subprocess.Popen``: a SIGKILL reaches the
very process that holds the connection, and its exit is seen only once it is dead.
``popen`` and ``run`` take ``subprocess``'s arguments and fall back to it for anything else
(another interpreter, ``stdin=PIPE``, a platform without ``fork``), or with
``GT_TEST_FORKSERVER=0``.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import importlib
import io
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import types
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parent.parent

#: Imported once by the server. Only modules that read no setting at import (one that does
#: raises ImproperlyConfigured there, and is left to the child).
PRELOAD = (
    "django", "django.db.models", "django.http", "django.urls", "django.forms",
    "django.template", "django.core.serializers.json", "django.contrib.admin",
    "django.contrib.postgres.fields", "django.contrib.postgres.search", "django.test",
    "rest_framework", "rest_framework.serializers", "rest_framework.authentication",
    "rest_framework.response", "celery", "celery.app", "celery.app.base", "kombu", "psycopg",
    "jsonschema", "referencing", "requests", "pydantic", "jwcrypto.jwk", "oauthlib.oauth2",
    "oauth2_provider.validators", "regress", "dj_database_url", "uvicorn", "uvicorn.main",
    "asgiref.sync",
)
PR_SET_CHILD_SUBREAPER = 36
#: A request (its argv and environment, as JSON) is one message of a SOCK_SEQPACKET pair,
#: with its three descriptors attached; the answer, the child's pid, is another (0 when the
#: request was longer than MESSAGE: the caller starts that child with subprocess).
MESSAGE = 1 << 20


# -- the server (python tests/forkserver.py FD) ----------------------------------------------
def serve(fd: int) -> None:
    """Fork a child for each request on ``fd`` until the pytest process closes it."""
    for name in PRELOAD:
        before = set(sys.modules)
        try:
            importlib.import_module(name)
        except Exception:
            for half in set(sys.modules) - before:  # nothing half-imported stays behind
                del sys.modules[half]
    sock = socket.socket(fileno=fd)
    while True:
        message, fds, flags, _addr = socket.recv_fds(sock, MESSAGE, 3)
        if not message:  # the pytest process is gone
            return
        if flags & socket.MSG_TRUNC:  # cut to MESSAGE bytes: answer 0, subprocess starts it
            for fd in fds:
                os.close(fd)
            sock.send(b"0")
            continue
        request = json.loads(message)
        ready_r, ready_w = os.pipe()
        middle = os.fork()
        if middle == 0:  # the middle process: fork the child and go, leaving it an orphan
            os.close(ready_r)
            child = os.fork()
            if child == 0:
                os.close(ready_w)
                sock.close()
                _become(request, fds)
                return  # back to __main__, which ends: the interpreter's own exit
            os.write(ready_w, str(child).encode())
            os._exit(0)
        os.close(ready_w)
        for descriptor in fds:
            os.close(descriptor)
        with os.fdopen(ready_r) as ready:
            pid = ready.read()
        os.waitpid(middle, 0)
        sock.send(pid.encode())


def _become(request: dict[str, Any], fds: list[int]) -> None:
    """In the child: take the request's streams, environment, directory and argv, then run."""
    for target, descriptor in enumerate(fds):
        os.dup2(descriptor, target)
        os.close(descriptor)
    if request["setsid"]:
        os.setsid()
    env = request["env"]
    os.environ.clear()
    os.environ.update(env)
    os.chdir(request["cwd"])
    sys.dont_write_bytecode = bool(env.get("PYTHONDONTWRITEBYTECODE"))
    unbuffered = bool(env.get("PYTHONUNBUFFERED"))
    sys.stdin = open(0, encoding="utf-8", closefd=False)
    sys.stdout = io.TextIOWrapper(open(1, "wb", buffering=0 if unbuffered else -1, closefd=False),
                                  encoding="utf-8", write_through=unbuffered,
                                  line_buffering=not unbuffered and os.isatty(1))
    sys.stderr = io.TextIOWrapper(open(2, "wb", buffering=0, closefd=False),
                                  encoding="utf-8", errors="backslashreplace",
                                  write_through=True)
    # sys.path as the interpreter would make it for this command in this environment.
    extra = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[:] = ["" if request["mode"] == "-c" else os.getcwd(), *extra,
                   *[p for p in sys.path[1:] if p not in extra]]
    argv = request["argv"]
    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = __builtins__
    sys.modules["__main__"] = main
    if request["mode"] == "-c":
        sys.argv = ["-c", *argv[1:]]
        exec(compile(argv[0], "<string>", "exec"), main.__dict__)
    else:
        import runpy

        sys.argv = [argv[0], *argv[1:]]
        runpy.run_module(argv[0], run_name="__main__", alter_sys=True)


# -- the pytest process's side ---------------------------------------------------------------
class _Server:
    """This pytest process's fork server, started on first use."""

    lock = threading.Lock()
    sock: socket.socket | None = None
    process: subprocess.Popen[bytes] | None = None
    failed = False

    @classmethod
    def connection(cls) -> socket.socket | None:
        if cls.sock is not None or cls.failed:
            return cls.sock
        try:
            cls.subreaper(False)  # where prctl is missing, this fails before a server starts
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
            env["PYTHONPATH"] = str(ROOT)
            cls.process = subprocess.Popen(
                [sys.executable, __file__, str(theirs.fileno())], pass_fds=[theirs.fileno()],
                cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
            theirs.close()
            cls.sock = ours
        except (OSError, AttributeError):
            cls.failed = True
        return cls.sock

    @staticmethod
    def subreaper(on: bool) -> None:
        """Whether this process adopts its descendants' orphans (Linux's prctl)."""
        if _libc().prctl(PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")

    @classmethod
    def spawn(cls, request: dict[str, Any], fds: list[int]) -> int | None:
        with cls.lock:
            sock = cls.connection()
            if sock is None:
                return None
            # A subreaper only while the child is orphaned (the server answers after its
            # middle process is gone): no other orphan of the suite is adopted and left a zombie.
            cls.subreaper(True)
            try:
                socket.send_fds(sock, [json.dumps(request).encode()], fds)
                answer = sock.recv(64)
            except OSError as error:  # a request larger than the socket carries in one message
                if error.errno != errno.EMSGSIZE:
                    raise
                return None
            finally:
                cls.subreaper(False)
            if not answer:  # the server died: subprocess from here on
                cls.failed, cls.sock = True, None
                return None
            return int(answer) or None  # 0: the request was too large for the server


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


class Child:
    """What a test uses of ``subprocess.Popen``, for a child the fork server made."""

    def __init__(self, args: list[str], pid: int, stdout: IO[Any] | None,
                 stderr: IO[Any] | None) -> None:
        self.args, self.pid, self.stdout, self.stderr = args, pid, stdout, stderr
        self.stdin = None
        self.returncode: int | None = None
        self._read: dict[str, Any] = {}
        self._readers: list[threading.Thread] = []

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            if timeout is not None:
                fd = os.pidfd_open(self.pid)
                try:
                    if not select.select([fd], [], [], timeout)[0]:
                        raise subprocess.TimeoutExpired(self.args, timeout)
                finally:
                    os.close(fd)
            _, status = os.waitpid(self.pid, 0)
            self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, signum)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def communicate(self, input: Any = None, timeout: float | None = None) -> tuple[Any, Any]:
        if not self._readers:
            for name in ("stdout", "stderr"):
                stream = getattr(self, name)
                if stream is not None:
                    reader = threading.Thread(target=lambda s=stream, n=name:
                                              self._read.__setitem__(n, s.read()), daemon=True)
                    reader.start()
                    self._readers.append(reader)
        deadline = None if timeout is None else time.monotonic() + timeout
        for reader in self._readers:
            reader.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
            if reader.is_alive():
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
        self.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
        out, err = self._read.get("stdout"), self._read.get("stderr")
        for stream in (self.stdout, self.stderr):
            if stream is not None:
                stream.close()
        return out, err

    def __enter__(self) -> Child:
        return self

    def __exit__(self, *exc: object) -> None:
        for stream in (self.stdout, self.stderr):
            if stream is not None:
                stream.close()
        self.wait()


def _descriptor(target: Any, default: int, stdout_fd: int | None = None) -> tuple[int, int | None]:
    """(the fd the child gets, our read end if a pipe was made) for one stream argument."""
    if target is None:
        return os.dup(default), None
    if target == subprocess.PIPE:
        read, write = os.pipe()
        return write, read
    if target == subprocess.DEVNULL:
        return os.open(os.devnull, os.O_RDWR), None
    if target == subprocess.STDOUT:
        assert stdout_fd is not None
        return os.dup(stdout_fd), None
    return os.dup(target if isinstance(target, int) else target.fileno()), None


def popen(args: list[str], *, env: dict[str, str] | None = None, cwd: Any = None,
          stdin: Any = None, stdout: Any = None, stderr: Any = None, text: bool = False,
          start_new_session: bool = False, **rest: Any) -> Any:
    """``subprocess.Popen(args, ...)``, through the fork server where it can be."""

    def started_by_subprocess() -> subprocess.Popen[Any]:
        return subprocess.Popen(args, env=env, cwd=cwd, stdin=stdin, stdout=stdout,
                                stderr=stderr, text=text, start_new_session=start_new_session,
                                **rest)

    usable = (os.environ.get("GT_TEST_FORKSERVER", "1") != "0" and not rest
              and len(args) >= 3 and args[0] == sys.executable and args[1] in ("-c", "-m")
              and stdin in (None, subprocess.DEVNULL) and hasattr(os, "pidfd_open"))
    if not usable:
        return started_by_subprocess()
    opened: list[int] = []
    try:
        child_in, _ = _descriptor(stdin, 0)
        opened.append(child_in)
        child_out, our_out = _descriptor(stdout, 1)
        opened.append(child_out)
        child_err, our_err = _descriptor(stderr, 2, stdout_fd=child_out)
        opened.append(child_err)
        request = {"mode": args[1], "argv": args[2:], "env": dict(os.environ if env is None
                                                                  else env),
                   "cwd": str(cwd or os.getcwd()), "setsid": start_new_session}
        pid = _Server.spawn(request, [child_in, child_out, child_err])
    finally:
        for descriptor in opened:
            os.close(descriptor)
    if pid is None:
        for ours in (our_out, our_err):
            if ours is not None:
                os.close(ours)
        return started_by_subprocess()

    def wrap(fd: int | None) -> IO[Any] | None:
        if fd is None:
            return None
        return open(fd, encoding="utf-8") if text else open(fd, "rb")

    return Child(args, pid, wrap(our_out), wrap(our_err))


def run(args: list[str], *, capture_output: bool = False, timeout: float | None = None,
        check: bool = False, **kwargs: Any) -> subprocess.CompletedProcess[Any]:
    """``subprocess.run(args, ...)``, through the fork server where it can be."""
    if capture_output:
        kwargs.update(stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    process = popen(args, **kwargs)
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise
    done = subprocess.CompletedProcess(args, process.returncode, out, err)
    if check:
        done.check_returncode()
    return done


if __name__ == "__main__":
    serve(int(sys.argv[1]))
