"""A trace replay in one step: the workload and the traffic shape that ``bench --trace`` runs.

Replaying a trace takes a workload of ``kind: trace`` (what to send) and a traffic shape with
``process: trace`` that names it (when to send it). :func:`write_trace_replay` writes both
from a trace file and its settings, so one flag does what two YAML files do; the files are the
reusable form of the same replay (``--workload W --traffic T``). They are written under
vprof's cache, in a folder named by a hash of their content: the same trace and settings give
the same paths, so a repeated command resumes its runs.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vprof.common.errors import WorkloadError
from vprof.common.paths import cache_dir

DEFAULT_MAX_IN_FLIGHT = 64
# TraceSpec field -> the command-line flag that sets it (a bad value is reported as the flag)
TRACE_FLAGS = {
    "format": "--trace-format",
    "block_size": "--block-size",
    "time_scale": "--time-scale",
    "start_s": "--start",
    "duration_s": "--duration",
    "max_requests": "--max-requests",
    "max_model_len": "--max-model-len",
}


@dataclass(frozen=True)
class TraceReplay:
    """The two files of a replay, and what the trace holds in the chosen window."""

    workload: Path
    traffic: Path
    requests: int
    span_s: float  # from the first arrival to the last, replayed (time_scale applied)

    def note(self) -> str:
        return (
            f"trace: replaying {self.requests:,} requests over {self.span_s:,.1f} s at their own "
            f"times; the same as YAML: --workload {self.workload} --traffic {self.traffic}"
        )


def trace_settings(file: str, **given: Any) -> dict[str, Any]:
    """A checked ``TraceSpec``'s settings from a trace file and the flags given (``None``: the
    default); a bad value names its flag."""
    from vprof.workloads.trace import TraceSpec

    path = Path(file).expanduser()
    if not path.is_file():
        raise WorkloadError(
            f"no such trace file: {file}",
            key="--trace",
            hint="give a trace file (Mooncake or vprof JSONL, Azure or vprof CSV)",
        )
    settings = {k: v for k, v in given.items() if v is not None}
    try:
        spec = TraceSpec(file=str(path.resolve()), **settings)
    except WorkloadError as exc:
        key = TRACE_FLAGS.get(exc.key or "", exc.key)
        raise WorkloadError(exc.message, key=key, hint=exc.hint) from None
    return spec.to_dict()


def write_trace_replay(
    file: str, *, max_in_flight: int = DEFAULT_MAX_IN_FLIGHT, **given: Any
) -> TraceReplay:
    """Write (or find, when written before) the workload and traffic YAML that replay ``file``
    with the settings ``given`` (``time_scale``, ``start_s``, ``duration_s``, ``max_requests``,
    ``block_size``, ``format``, ``max_model_len``). The trace is read and checked first."""
    from vprof.workloads.trace import TraceSpec, load_trace

    settings = trace_settings(file, **given)
    trace = load_trace(TraceSpec(**settings))  # a bad file fails here, with file and line
    offsets = trace.offsets_s()
    # the folder is this replay's own; a trace's long name, cut, leaves room for the suffixes
    stem = (
        Path(settings["file"]).stem.encode(errors="surrogateescape")[:100].decode(errors="ignore")
    )
    workload = {
        "description": f"Replay of {Path(settings['file']).name} (written by vprof bench --trace)",
        "kind": "trace",
        **settings,
    }
    content = json.dumps([workload, max_in_flight], sort_keys=True)
    folder = cache_dir() / "replays" / hashlib.sha256(content.encode()).hexdigest()[:12]
    workload_path = folder / f"{stem}.yaml"
    traffic_path = folder / f"{stem}.traffic.yaml"
    traffic = {
        "name": "trace",
        "description": f"The arrival times of {Path(settings['file']).name}",
        "kind": "open-loop",
        "process": "trace",
        "trace": str(workload_path),
        "max_in_flight": max_in_flight,
    }
    folder.mkdir(parents=True, exist_ok=True)
    for path, data in ((workload_path, workload), (traffic_path, traffic)):
        text = "# Written by `vprof bench --trace`; edit a copy to reuse it.\n" + "".join(
            f"{key}: {json.dumps(value)}\n" for key, value in data.items()
        )
        if not path.is_file() or path.read_text() != text:
            tmp = path.with_suffix(".tmp")
            tmp.write_text(text)
            tmp.replace(path)
    span = offsets[-1] - offsets[0] if offsets else 0.0
    return TraceReplay(workload_path, traffic_path, len(offsets), span)
