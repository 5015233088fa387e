"""A vLLM server as a child process: start, wait for health, read its log, stop everything.

The child runs in its own session (so its own process group): one signal to the group reaches
vLLM's API server and the engine-core process it forks, and a Ctrl-C in vprof's terminal is
handled by vprof, which then stops the group in order.
"""

from __future__ import annotations

import errno
import os
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from vprof.common.errors import LaunchError
from vprof.server.logparse import EffectiveSettings, find_error, parse_log, tail_lines

_POLL_INTERVAL_S = 0.5


def connect_host(host: str) -> str:
    """The address a client on this machine uses to reach a server bound to ``host``."""
    return "127.0.0.1" if host in ("", "0.0.0.0", "::") else host


def port_in_use(host: str, port: int) -> bool:
    """True when something already listens on ``host:port`` (so a server there would fail)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        # SO_REUSEADDR, as servers set it: only a live listener blocks the bind, not TIME_WAIT.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                return True
            raise
    return False


def lower_priority(pid: int, niceness: int) -> None:
    """Give the process (started in a session of its own) and what it starts later a lower
    CPU priority: its nice value, and — where Linux groups a session's processes for
    scheduling (autogroup), which makes a process's own nice value count only within its
    session — its session's. Raising a nice value needs no privilege; failures are ignored."""
    try:
        os.setpriority(os.PRIO_PROCESS, pid, niceness)
    except OSError:
        pass
    try:
        Path(f"/proc/{pid}/autogroup").write_text(str(niceness))
    except OSError:
        pass


def free_port(host: str = "127.0.0.1", *, lo: int | None = None, hi: int | None = None) -> int:
    """A TCP port nothing listens on: the first free one in ``[lo, hi]``, else one the OS picks."""
    if lo is not None and hi is not None:
        for port in range(lo, hi + 1):
            if not port_in_use(host, port):
                return port
        raise LaunchError(f"no free TCP port in {lo}-{hi} on {host}")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


class ServerProcess:
    """A server started from an argv, logging to a file, stopped with its whole process tree.

    Use as a context manager, or call ``start()`` and ``stop()`` yourself::

        with ServerProcess(argv, env={"VLLM_CPU_KVCACHE_SPACE": "1"}, log_path=log,
                           host="127.0.0.1", port=8000) as server:
            server.wait_healthy(timeout_s=300)
            print(server.url)
    """

    def __init__(
        self,
        argv: Sequence[str],
        *,
        log_path: str | os.PathLike[str],
        host: str = "127.0.0.1",
        port: int,
        env: Mapping[str, str] | None = None,
        niceness: int = 0,
    ) -> None:
        self.argv = [str(a) for a in argv]
        self.niceness = niceness
        self.log_path = Path(log_path)
        self.host = host
        self.port = int(port)
        self.env = dict(env or {})
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_offset = 0
        self._stopped = False
        self._started_at: float | None = None

    @property
    def url(self) -> str:
        """Base URL clients on this machine use, e.g. ``http://127.0.0.1:8000``."""
        return f"http://{connect_host(self.host)}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def running_s(self) -> float:
        """Seconds since the child was started (0 before)."""
        return 0.0 if self._started_at is None else time.monotonic() - self._started_at

    def start(self) -> None:
        """Start the child; refuse if the port is taken, since vLLM would die only after import."""
        if self._proc is not None:
            raise LaunchError("this server was already started")
        if port_in_use(self.host, self.port):
            raise LaunchError(
                f"port {self.port} on {self.host} is already in use",
                hint="stop what listens there or choose another with --port",
            )
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        full_env = {**os.environ, **self.env}
        with open(self.log_path, "ab") as log:
            # Read only what this run wrote, even when the log file is reused.
            self._log_offset = log.tell()
            try:
                self._proc = subprocess.Popen(
                    self.argv,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=full_env,
                    start_new_session=True,
                )
                self._started_at = time.monotonic()
                if niceness := self.niceness:
                    lower_priority(self._proc.pid, niceness)
            except OSError as exc:
                raise LaunchError(
                    f"cannot start {self.argv[0]}: {exc.strerror}",
                    hint="is vLLM installed in this Python environment?",
                ) from None

    def alive(self) -> bool:
        """True while the main server process has not exited."""
        return self._proc is not None and self._proc.poll() is None

    @property
    def returncode(self) -> int | None:
        """The main process's exit code, or None while it runs (or before it starts)."""
        return None if self._proc is None else self._proc.poll()

    def wait(self, timeout_s: float) -> int | None:
        """Wait up to ``timeout_s`` for the main process to exit; its exit code, or None."""
        if self._proc is None:
            return None
        try:
            return self._proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def death_report(self, when: str) -> str:
        """Why the server died, for people: its exit code, vLLM's own error, the last log lines."""
        text = self.log_text()
        error = find_error(text)
        tail = "\n".join(tail_lines(text, 15))
        what = f"vLLM exited with code {self.returncode} {when}"
        if error:
            what += f": {error}"
        return f"{what}\nlast lines of {self.log_path}:\n{tail}"

    def log_text(self) -> str:
        """Everything this run has written to its log so far."""
        try:
            with open(self.log_path, "rb") as log:
                log.seek(self._log_offset)
                return log.read().decode("utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, n: int = 20) -> list[str]:
        """The last ``n`` lines of this run's log worth reading (shutdown chatter left out)."""
        return tail_lines(self.log_text(), n)

    def effective_settings(self) -> EffectiveSettings:
        """What vLLM reported it derived at start-up (KV cache size, concurrency, …)."""
        return parse_log(self.log_text())

    def wait_healthy(self, timeout_s: float = 300.0) -> None:
        """Poll ``/health`` until it answers 200; fail fast if the process exits first."""
        import requests

        if self._proc is None:
            raise LaunchError("the server was never started")
        deadline = time.monotonic() + timeout_s
        health = f"{self.url}/health"
        while True:
            if self._proc.poll() is not None:
                report = self.death_report("before it became healthy")
                self.stop()  # the engine core may outlive a crashed API server
                raise LaunchError(report)
            try:
                answered = requests.get(health, timeout=2).status_code == 200
            except requests.RequestException:
                answered = False  # not listening yet
            if answered and (other := self._other_listener()):
                self.stop()
                raise LaunchError(
                    f"{self.url} is answered by {other}, not by the server started here "
                    f"(pid {self._proc.pid}): two servers were given port {self.port}, and a "
                    "run would measure the other one",
                    hint="choose another --port, or stop what listens there",
                )
            if answered:
                return
            if time.monotonic() >= deadline:
                tail = "\n".join(tail_lines(self.log_text(), 15))
                self.stop()
                raise LaunchError(
                    f"the server did not become healthy within {timeout_s:g} s "
                    f"(log {self.log_path}; last lines:\n{tail})",
                    hint="raise --timeout if the machine is busy",
                )
            # Doubles as the poll interval and returns at once if the server dies.
            self.wait(_POLL_INTERVAL_S)

    def _other_listener(self) -> str | None:
        """Who listens on this server's port when none of its own processes does; ``None``
        when one of them does or the system will not say. vLLM binds its port with
        SO_REUSEADDR long before it listens, and two sockets may share a port until one
        listens: two servers started at once on one port both start, and the first to listen
        answers for both (seen: a sweep measured another run's server, which that run then
        killed)."""
        import psutil

        told = False
        for member in self._family():
            try:
                sockets = member.net_connections(kind="tcp")
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            told = True
            if any(_listens_on(s, self.port) for s in sockets):
                return None
        if not told:
            return None
        try:  # name it when allowed to look at every process's sockets
            pids = {s.pid for s in psutil.net_connections(kind="tcp") if _listens_on(s, self.port)}
        except psutil.AccessDenied:
            pids = set()
        pids.discard(None)
        return f"pid {', '.join(map(str, sorted(pids)))}" if pids else "another process"

    def stop(self, grace_s: float = 15.0) -> None:
        """SIGTERM the process group, SIGKILL whatever survives the grace, reap everything."""
        import psutil

        proc = self._proc
        if proc is None or self._stopped:
            return
        deadline = time.monotonic() + grace_s
        family = self._family()
        _signal_group(proc.pid, signal.SIGTERM)
        for member in family:
            if _pgid(member.pid) != proc.pid:  # left the group (setsid); signal it directly
                _signal_process(member, signal.SIGTERM)
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
        psutil.wait_procs(family, timeout=max(0.1, deadline - time.monotonic()))
        # Look again: the engine core or a resource tracker may ignore SIGTERM.
        alive = [m for m in self._family() if _running(m)]
        if alive or proc.poll() is None:
            _signal_group(proc.pid, signal.SIGKILL)
            for member in alive:
                _signal_process(member, signal.SIGKILL)
            psutil.wait_procs(alive, timeout=5)
        proc.wait()
        # Once reaped, the pid may be reused: never signal this group again.
        self._stopped = True

    def _family(self) -> list:  # list[psutil.Process]
        """Every process this server started, even after the main process has exited."""
        import psutil

        pid = self._proc.pid if self._proc else None
        if pid is None:
            return []
        members: dict[int, psutil.Process] = {}
        try:
            leader = psutil.Process(pid)
            members[pid] = leader
            for child in leader.children(recursive=True):
                members[child.pid] = child
        except psutil.NoSuchProcess:
            pass
        # Orphans keep the session and group the child was started in (start_new_session).
        for candidate in psutil.process_iter():
            try:
                if pid in (os.getpgid(candidate.pid), os.getsid(candidate.pid)):
                    members.setdefault(candidate.pid, candidate)
            except (ProcessLookupError, PermissionError):
                continue
        return list(members.values())

    def __enter__(self) -> ServerProcess:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _listens_on(sock: Any, port: int) -> bool:  # sock: a psutil connection
    return sock.status == "LISTEN" and bool(sock.laddr) and sock.laddr.port == port


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


def _running(member) -> bool:  # member: psutil.Process
    import psutil

    try:
        return member.is_running() and member.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _signal_process(member, sig: signal.Signals) -> None:  # member: psutil.Process
    import psutil

    try:
        member.send_signal(sig)
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        pass
