"""The run folder: self-describing and append-only.

```
<run>/run.json       what was run: profile as rendered (name, identity, argv, env), workload,
                     traffic shape, seeds, url, vLLM version, hardware, client versions
<run>/status.json    running | completed | failed | interrupted, and why it stopped
<run>/records.arrow  per-request records (written by the Locust side as they arrive)
<run>/locust.json    what the load generator saw: start/stop, warm-up end, workers
<run>/loadgen.jsonl  the load generator's own CPU use
<run>/metrics.jsonl  server /metrics samples
<run>/server.log     the server's log during this run
<run>/locust.log     the load generator's log
<run>/summary.json   the summary (written last)
```
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RUN_FILE = "run.json"
STATUS_FILE = "status.json"

STATES = ("running", "completed", "failed", "interrupted")
RETIRED_MARK = ".attempt-"  # an earlier, unfinished attempt kept beside the run that replaced it


def _write_json_atomic(path: Path, data: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n")
    os.replace(tmp, path)


@dataclass(frozen=True)
class RunDir:
    path: Path

    @property
    def name(self) -> str:
        return self.path.name

    def file(self, name: str) -> Path:
        return self.path / name

    def create(self, meta: dict[str, Any]) -> None:
        """Make the folder and record what is about to run."""
        self.path.mkdir(parents=True, exist_ok=True)
        _write_json_atomic(self.file(RUN_FILE), meta)
        self.set_status("running")

    def meta(self) -> dict[str, Any]:
        try:
            return json.loads(self.file(RUN_FILE).read_text())
        except (OSError, ValueError):
            return {}

    def status(self) -> dict[str, Any]:
        try:
            return json.loads(self.file(STATUS_FILE).read_text())
        except (OSError, ValueError):
            return {}

    @property
    def state(self) -> str:
        return self.status().get("state", "missing")

    def set_status(self, state: str, reason: str = "") -> None:
        assert state in STATES, state
        previous = self.status()
        status = {
            "state": state,
            "reason": reason,
            "started_at": previous.get("started_at", time.time()),
        }
        if state != "running":
            status["finished_at"] = time.time()
        _write_json_atomic(self.file(STATUS_FILE), status)

    def retire(self) -> Path:
        """Move an unfinished earlier attempt aside (nothing is deleted) and return its path."""
        n = 1
        while (target := self.path.with_name(f"{self.path.name}{RETIRED_MARK}{n}")).exists():
            n += 1
        self.path.rename(target)
        return target
