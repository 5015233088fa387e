"""No load without vprof: a Locust process that vprof started stops when vprof is gone.

vprof names itself in ``PARENT_PID_ENV``. The master (or local runner) asks Linux for SIGHUP
when its parent dies (``PR_SET_PDEATHSIG``) and, as a fallback on any system, looks every
``CHECK_INTERVAL_S`` whether its parent is still vprof; either way it stops its test at once
(answers in flight are cut off), keeps the records it has and exits, and its output, whose
reader is gone, goes on into ``locust.out``; a test stopped so never starts again, and an
orphan still there ``ORPHAN_EXIT_S`` later exits anyway (at once if its test had not begun).
A worker forked by ``--processes`` dies with its master the same way (SIGKILL: nothing it
holds could reach the run folder). Plain ``locust`` runs, and workers started on their own,
are left alone. (Linux sends the signal when the *thread* that started the process ends:
vprof starts Locust from its main thread.)
"""

import locust  # noqa: F401  (first: gevent patching)
from locust.runners import STATE_RUNNING, STATE_SPAWNING, WorkerRunner

import logging
import os
import signal
import sys
from pathlib import Path
from typing import Any

import gevent

from vprof.common.interrupt import die_with_parent
from vprof.locustfiles.collect import stop_for_fault
from vprof.locustfiles.options import opt
from vprof.locustfiles.optiontable import FAULT_EXIT_CODE, PARENT_PID_ENV

CHECK_INTERVAL_S = 0.5
# An orphan that has not exited this long after it began to stop exits anyway (one whose
# test had not started has nothing to save: it goes after QUIT_GRACE_S, its workers told).
ORPHAN_EXIT_S = 4.0
QUIT_GRACE_S = 1.0

log = logging.getLogger("vprof")
# The process that imported the locustfile: the master-to-be, which --processes forks from.
_LAUNCHER_PID = os.getpid()


def install(environment: Any) -> None:
    """Tie this Locust process's life to vprof's (call from ``init``)."""
    vprof_pid = os.environ.get(PARENT_PID_ENV, "")
    if isinstance(environment.runner, WorkerRunner):
        if os.getpid() != _LAUNCHER_PID and os.getppid() == _LAUNCHER_PID:
            _worker_dies_with_master(_LAUNCHER_PID)
        return
    if not vprof_pid.isdigit():
        return
    parent = int(vprof_pid)

    def gone() -> None:
        _orphaned(environment, parent)

    gevent.signal_handler(signal.SIGHUP, lambda: gevent.spawn(gone) if _gone(parent) else None)
    die_with_parent(signal.SIGHUP)

    def watch() -> None:
        while not _gone(parent):
            gevent.sleep(CHECK_INTERVAL_S)
        gone()

    gevent.spawn(watch)


def _gone(parent: int) -> bool:
    return os.getppid() != parent


def _worker_dies_with_master(master: int) -> None:
    die_with_parent(signal.SIGKILL)

    def watch() -> None:
        while os.getppid() == master:
            gevent.sleep(CHECK_INTERVAL_S)
        os._exit(1)  # what it holds could not reach the master anyway

    gevent.spawn(watch)


def _orphaned(environment: Any, parent: int) -> None:
    if getattr(environment, "_vprof_orphaned", False):
        return
    environment._vprof_orphaned = True
    _output_to_run_folder(environment)
    testing = environment.runner.state in (STATE_SPAWNING, STATE_RUNNING)
    stop_for_fault(environment, f"vprof (pid {parent}), which ran this test, is gone")
    gevent.spawn_later(ORPHAN_EXIT_S if testing else QUIT_GRACE_S, os._exit, FAULT_EXIT_CODE)


def _output_to_run_folder(environment: Any) -> None:
    """Point stdout and stderr, a pipe whose reader is gone, at ``locust.out`` (else at
    nothing): Locust's last words must not fail on a broken pipe before it saves records."""
    from vprof.records.rundir import RunDir

    run_dir = str(opt(environment, "run_dir", "") or "")
    target = str(RunDir(Path(run_dir)).locust_out) if run_dir else os.devnull
    try:
        fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    except OSError:
        fd = os.open(os.devnull, os.O_WRONLY)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    for stream in (sys.stdout, sys.stderr):  # what they held goes to the new place
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
