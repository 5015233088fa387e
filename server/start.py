"""Profile → healthy server: the one sequence ``vprof launch``, ``vprof bench`` and the sweeps use.

:func:`plan_server` does everything that needs no process: it checks that vLLM is installed,
validates the profile once, adapts it to this host (saying what it changed) and renders the
command. A bench plans every profile before it starts any server, so a bad profile fails at
once. :func:`start_server` starts the planned command, waits for ``/health`` and reports how
long that took; if anything goes wrong (or Ctrl-C) while it waits, the server is stopped
before the error leaves. Its two halves, :func:`spawn_server` and :func:`await_server`, let
servers that share no device load at the same time.
"""

from __future__ import annotations

import shlex
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from vprof.common.errors import LaunchError
from vprof.server.host import HostEngine, adapt_for_host, detect_engine
from vprof.server.logparse import EffectiveSettings
from vprof.server.process import ServerProcess

if TYPE_CHECKING:
    from vprof.registry import Profile

Say = Callable[[str], None]


@dataclass(frozen=True)
class ServerPlan:
    """A profile made ready for this host: validated, adapted and rendered; nothing started."""

    requested: Profile  # as the user asked for it
    profile: Profile  # as it will run here
    engine: HostEngine
    argv: tuple[str, ...]
    changes: tuple[str, ...] = ()  # one human line per change the host needed
    notes: tuple[str, ...] = ()  # the validator's notes (e.g. where the guide is outdated)

    @property
    def env(self) -> dict[str, str]:
        return dict(self.profile.env)

    def command_line(self) -> str:
        """The command as one shell line, environment first (for people to read and copy)."""
        env_text = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(self.env.items()))
        return (env_text + " " if env_text else "") + shlex.join(self.argv)

    def report(self) -> Iterator[str]:
        """What a user should read before the server starts: notes, then the host's changes."""
        for note in self.notes:
            yield f"note: {note}"
        if self.changes:
            yield f"adapted for this host ({self.engine.describe()}):"
            for change in self.changes:
                yield f"  {change}"


@dataclass(frozen=True)
class StartedServer:
    """A healthy server started from a :class:`ServerPlan`."""

    plan: ServerPlan
    process: ServerProcess
    healthy_after_s: float
    settings: EffectiveSettings = field(default_factory=EffectiveSettings)

    @property
    def url(self) -> str:
        return self.process.url

    def record(self) -> dict[str, object]:
        """What a run folder keeps about this server: vLLM's derived settings and start-up."""
        return {**dict(self.settings), "healthy_after_s": round(self.healthy_after_s, 3)}


def plan_server(
    profile: Profile, *, model_overridden: bool, engine: HostEngine | None = None
) -> ServerPlan:
    """Check, adapt and render ``profile`` for this host (``model_overridden``: the user chose
    the model, so a CPU-only host keeps it instead of using the tiny model)."""
    from vprof.registry import render, validate

    engine = engine if engine is not None else detect_engine()
    if engine.distribution is None:
        raise LaunchError(
            "vLLM is not installed in this Python environment",
            hint="install vprof[cpu] on a machine without a GPU, vprof[gpu] with one",
        )
    notes = validate(profile)
    adapted, changes = adapt_for_host(profile, model_overridden=model_overridden, engine=engine)
    if changes:
        validate(adapted)  # the host's changes must still be a profile vLLM accepts
    argv = tuple(render(adapted, python=sys.executable))
    return ServerPlan(profile, adapted, engine, argv, tuple(changes), tuple(notes))


def start_server(
    plan: ServerPlan,
    *,
    log_path: Path,
    timeout_s: float,
    say: Say = lambda _: None,
    environ: Mapping[str, str] | None = None,
) -> StartedServer:
    """Start the planned server and wait until ``/health`` answers; stop it on any failure.

    Raises :class:`LaunchError` with vLLM's own error and the log's last lines when the server
    dies or does not become healthy within ``timeout_s``.
    """
    process = spawn_server(plan, log_path=log_path, environ=environ)
    return await_server(plan, process, timeout_s=timeout_s, say=say)


def spawn_server(
    plan: ServerPlan, *, log_path: Path, environ: Mapping[str, str] | None = None
) -> ServerProcess:
    """Start the planned command and return at once (:func:`await_server` waits for it), so
    several servers can load at the same time where they do not share a device."""
    profile = plan.profile
    process = ServerProcess(
        plan.argv,
        env={**plan.env, **(environ or {})},
        log_path=log_path,
        host=profile.host,
        port=profile.port,
    )
    process.start()
    return process


def await_server(
    plan: ServerPlan, process: ServerProcess, *, timeout_s: float, say: Say = lambda _: None
) -> StartedServer:
    """Wait until a spawned server's ``/health`` answers; stop it on any failure (Ctrl-C too).
    How long it took counts from the spawn."""
    say(f"waiting up to {timeout_s:g} s for {process.url}/health (pid {process.pid})")
    try:
        process.wait_healthy(timeout_s=max(0.0, timeout_s - process.running_s()))
    except BaseException:
        stop_quietly(process)
        raise
    return StartedServer(plan, process, process.running_s(), process.effective_settings())


def stop_quietly(process: ServerProcess) -> None:
    """Stop a server with Ctrl-C and SIGTERM ignored meanwhile, so a second Ctrl-C cannot leave
    its engine processes behind (signal handlers can only change in the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        process.stop()
        return
    sigs = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in sigs}
    try:
        process.stop()
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
