"""Exact timing: when each streamed chunk really left, per request, for measuring a client.

With a send log (``vprof emulate --send-log DIR``) every process of the emulator keeps, for
each streamed answer it completed, the request's ``X-Request-Id``, when the request arrived
and when each chunk's write returned (the bytes were in the kernel's socket buffer), and
writes them to ``DIR/sends-<pid>.jsonl`` when it stops, in wall-clock time (``time.time()``
minus ``time.monotonic()``, taken once, converts its loop's clock). A client on the same host
can then hold its own stamps against these on one clock, so the emulator's lateness (reading a
request late, a timer that fired late, a busy loop) does not count as the client's
(``vprof calibrate``).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from vprof.common.errors import VprofError


@dataclass(frozen=True)
class Sent:
    """One streamed answer as it left: ``writes_ms[k]`` is chunk k's write, in ms after the
    request arrived (so ``writes_ms[0]`` is its true time to first token)."""

    request_id: str
    received_at: float  # wall-clock seconds
    writes_ms: tuple[float, ...]

    @property
    def ttft_ms(self) -> float:
        return self.writes_ms[0]

    @property
    def gaps_ms(self) -> list[float]:
        return [b - a for a, b in zip(self.writes_ms, self.writes_ms[1:], strict=False)]


class SendLog:
    """One emulator process's record of its answers (appended on its event loop)."""

    def __init__(self, folder: str | os.PathLike[str]) -> None:
        self.folder = Path(folder)
        # loop.time() is time.monotonic(): this turns it into wall-clock seconds
        self._wall_minus_mono = time.time() - time.monotonic()
        self._rows: list[tuple[str, float, list[float]]] = []

    def add(self, request_id: str, received_at: float, writes: list[float]) -> None:
        """An answer streamed whole: arrival and write times in ``loop.time()`` seconds."""
        self._rows.append((request_id, received_at, writes))

    def write(self) -> Path:
        """Write what was kept to ``sends-<pid>.jsonl`` in the folder; returns the file."""
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / f"sends-{os.getpid()}.jsonl"
        offset = self._wall_minus_mono
        with path.open("w", encoding="utf-8") as out:
            for request_id, received, writes in self._rows:
                row = {
                    "id": request_id,
                    "received_at": received + offset,
                    "writes_ms": [round((w - received) * 1000.0, 4) for w in writes],
                }
                out.write(json.dumps(row, separators=(",", ":")) + "\n")
        return path


def read_send_logs(folder: str | os.PathLike[str]) -> dict[str, Sent]:
    """Every answer the emulator's processes logged in ``folder``, by request id (answers
    without an id are left out)."""
    sent: dict[str, Sent] = {}
    for path in sorted(Path(folder).glob("sends-*.jsonl")):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            try:
                row = json.loads(line)
                request_id = str(row["id"])
                writes = tuple(float(w) for w in row["writes_ms"])
                received = float(row["received_at"])
            except (ValueError, KeyError, TypeError) as exc:
                raise VprofError(
                    f"not an emulator send log line: {exc}", path=str(path), line=number
                ) from None
            if request_id and writes:
                sent[request_id] = Sent(request_id, received, writes)
    return sent
