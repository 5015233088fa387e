"""Watch the load generator's health samples as they land, and say once, live, that it is
falling behind (the summary says it again on top, with the numbers over the whole run)."""

from __future__ import annotations

import json
from pathlib import Path

from vprof.analysis.keys import CLIENT_FIX, STARVED_FIX
from vprof.analysis.samples import LAG_P99_LIMIT_MS, worker_health
from vprof.records.rundir import LOADGEN_ANSWERED, LOADGEN_FAILED, RunDir, read_json

# Consecutive late samples (2 s each) before a warning: one busy moment is normal.
LATE_SAMPLES = 3


class ClientWatch:
    """Reads new lines of a run's ``loadgen.jsonl``; :meth:`check` returns a warning the first
    time a Locust process's event-loop lag p99 stays above the limit for ``LATE_SAMPLES``
    samples after the warm-up (building prompts and tokenizers at the start is not lag)."""

    def __init__(self, run: RunDir) -> None:
        self.run = run
        self.path: Path = run.loadgen_jsonl
        self._offset = 0
        self._late: dict[str, list[dict]] = {}  # a worker's run of late samples
        self._measured_from: float | None = None
        self._counts: dict[str, tuple[int, int]] = {}  # a process's answered, failed
        self.warned = False

    def _warmup_until(self) -> float | None:
        if self._measured_from is None:
            value = read_json(self.run.locust_json, strict=False).get("warmup_until")
            self._measured_from = float(value) if isinstance(value, (int, float)) else None
        return self._measured_from

    def _new_samples(self) -> list[dict]:
        try:
            with self.path.open("rb") as f:
                f.seek(self._offset)
                data = f.read()
        except OSError:
            return []
        complete = data[: data.rfind(b"\n") + 1]  # a line still being written waits
        self._offset += len(complete)
        samples = []
        for line in complete.splitlines():
            try:
                sample = json.loads(line)
            except ValueError:
                continue
            if isinstance(sample, dict):
                samples.append(sample)
        return samples

    def counts(self) -> tuple[int, int] | None:
        """Requests answered and failed so far, over every Locust process (None before the
        first sample that counts them); read by :meth:`check`."""
        if not self._counts:
            return None
        per_process = self._counts.values()
        return sum(a for a, _ in per_process), sum(f for _, f in per_process)

    def check(self) -> str | None:
        """Read the new samples: their request counts, and a warning the first time the load
        generator falls behind after the warm-up (None otherwise)."""
        samples = self._new_samples()
        for sample in samples:
            answered, failed = sample.get(LOADGEN_ANSWERED), sample.get(LOADGEN_FAILED)
            if isinstance(answered, int) and isinstance(failed, int):
                self._counts[str(sample.get("worker", ""))] = (answered, failed)
        if self.warned or self._warmup_until() is None:
            return None  # nothing to judge before the test has started
        for sample in samples:
            if float(sample.get("t", 0.0)) < (self._measured_from or 0.0):
                continue
            lag = sample.get("loop_lag_p99_ms")
            worker = str(sample.get("worker", ""))
            if not isinstance(lag, (int, float)):
                continue
            late = self._late.setdefault(worker, [])
            if lag <= LAG_P99_LIMIT_MS:
                late.clear()
                continue
            late.append(sample)
            if len(late) >= LATE_SAMPLES:
                self.warned = True
                return (
                    f"the load generator is falling behind (event-loop lag p99 {lag:.0f} ms > "
                    f"{LAG_P99_LIMIT_MS:g} ms in {worker}): its latencies include its own delay; "
                    + _advice(late)
                )
        return None


def _advice(late: list[dict]) -> str:
    """What to do about late samples: the same cause and advice the summary's verdict gives."""
    if worker_health(late)["starved"]:
        return (
            "other processes on this machine held its core (it waited for one longer than it "
            f"ran): {STARVED_FIX}"
        )
    return CLIENT_FIX
