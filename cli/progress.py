"""What long commands say as they go, on stderr: a live display on a terminal (rich's), the
same news as plain lines in a log or a pipe (a run's progress every 10 s)."""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from vprof.runs.spec import Tick

PLAIN_EVERY_S = 10.0  # a run's progress line in a log, at most this often


class ProgressView:
    """Lines and :class:`~vprof.runs.spec.Tick`\\ s in; a display out. On a terminal each
    measuring run gets a bar (its place in the matrix, elapsed of its length, requests
    answered and failed, the server's side) and, when the matrix is known, a line for the
    whole command with an estimate of its end; other lines print above the bars."""

    def __init__(self, live: bool | None = None, console: Any = None) -> None:
        self.live = sys.stderr.isatty() if live is None else live
        self._console = console  # rich's Console to draw on (default: stderr's)
        self._progress: Any = None  # rich's Progress, started at the first Tick
        self._tasks: dict[str, Any] = {}  # a run's task
        self._overall: Any = None
        self._finished_s = 0.0  # measured seconds of the runs already over
        self._current: Tick | None = None
        self._command_started = time.monotonic()
        self._last_plain = -PLAIN_EVERY_S

    def say(self, message: str | Tick) -> None:
        if isinstance(message, str):
            self._line(message)
        elif self.live:
            self._draw(message)
        elif not message.final and time.monotonic() - self._last_plain >= PLAIN_EVERY_S:
            self._last_plain = time.monotonic()
            click.echo(str(message), err=True)

    def close(self) -> None:
        """End the live display (its last state stays on the screen)."""
        if self._progress is not None:
            self._progress.stop()
            self._progress, self._overall, self._current = None, None, None
            self._tasks.clear()

    def _line(self, message: str) -> None:
        if self._progress is not None:
            self._progress.console.print(message.strip("\n"), markup=False, highlight=False)
        else:
            click.echo(message, err=True)

    def _start(self) -> Any:
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn

        progress = Progress(
            TextColumn("{task.fields[place]}"),
            TextColumn("{task.description}"),
            BarColumn(bar_width=20),
            TextColumn("{task.fields[counts]}"),
            TextColumn("{task.fields[detail]}", style="dim"),
            console=self._console or Console(stderr=True),
            refresh_per_second=2,
        )
        progress.start()
        return progress

    def _draw(self, tick: Tick) -> None:
        if self._progress is None:
            self._progress = self._start()
        progress = self._progress
        last = self._current
        if last is not None and last.run != tick.run:  # that run is over: its bar full
            self._finished_s += last.elapsed_s
            progress.update(self._tasks[last.run], completed=last.total_s or last.elapsed_s)
        self._current = tick
        self._draw_overall(tick)  # first: the command's line stays on top
        task = self._tasks.get(tick.run)
        total = tick.total_s or None
        if task is None:
            task = self._tasks[tick.run] = progress.add_task(
                tick.run[:48], total=total, place="", counts="", detail=""
            )
        counts = f"{tick.elapsed_s:.0f}{tick.of} s{tick.counts}"
        progress.update(
            task, completed=tick.elapsed_s, place=tick.where, counts=counts, detail=tick.detail
        )

    def _draw_overall(self, tick: Tick) -> None:
        if not tick.place or not tick.total_s:
            return
        progress, (number, of) = self._progress, tick.place
        if self._overall is None:
            self._overall = progress.add_task("", total=None, place="", counts="", detail="")
        left = remaining_s(
            time.monotonic() - self._command_started,
            self._finished_s,
            tick.elapsed_s,
            tick.total_s,
            number,
            of,
        )
        progress.update(
            self._overall,
            description=f"the command: run {number} of {of}",
            counts=f"about {_duration(left)} to go",
        )


def remaining_s(
    wall_s: float, finished_s: float, elapsed_s: float, total_s: float, number: int, of: int
) -> float:
    """An estimate of a command's time to go: what is left of the run ``number`` (of ``of``)
    that has measured ``elapsed_s`` of its ``total_s``, and as long again for each run to
    come as each run so far took with what surrounds its measuring (a server's start, its
    warm-up, the last answers): the command's wall time beyond the measured seconds of the
    runs over (``finished_s``) and this one, shared among the ``number`` runs begun."""
    setup_s = max(0.0, wall_s - finished_s - elapsed_s) / max(number, 1)
    return max(0.0, total_s - elapsed_s) + (of - number) * (total_s + setup_s)


def _duration(seconds: float) -> str:
    minutes, s = divmod(int(round(seconds)), 60)
    return f"{minutes} min {s:02d} s" if minutes else f"{s} s"
