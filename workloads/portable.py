"""A workload as plain data that another host can rebuild exactly, files' contents included.

Locust workers on other hosts build the same requests as the master only from the same
workload; a workload file there may be missing or different. The master sends
:func:`to_portable` (plain dicts, lists and scalars, safe for msgpack and JSON) and each worker
rebuilds it with :func:`from_portable`: every class is one of this module's table (nothing else
is ever constructed), and each is validated again as it is built. A lengths file's values and
a prompt dataset's prompts travel inside; a trace is read from its file by every process, so a
trace workload is refused here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from vprof.common.errors import WorkloadError
from vprof.workloads.spec import (
    AgentSpec,
    ConversationSpec,
    Distribution,
    PrefixSpec,
    PromptDataset,
    ThinkTime,
    Workload,
)

_CLASS_KEY = "~"
_CLASSES: dict[str, type] = {
    cls.__name__: cls
    for cls in (
        Workload,
        Distribution,
        PrefixSpec,
        ThinkTime,
        ConversationSpec,
        AgentSpec,
        PromptDataset,
    )
}


def to_portable(workload: Workload) -> dict[str, Any]:
    """``workload`` as plain data (see the module's docstring); a trace workload is refused."""
    if workload.trace is not None:
        raise WorkloadError(
            f"workload {workload.name!r} replays a trace, which every load host reads from its "
            "own file: it cannot be sent to Locust workers on other hosts",
            key="--workload",
            hint="replay it from one host (--processes N), or give a synthetic workload",
        )
    return _encode(workload)


def from_portable(data: Mapping[str, Any]) -> Workload:
    """The workload :func:`to_portable` described, validated as it is rebuilt."""
    workload = _decode(data)
    if not isinstance(workload, Workload):
        raise WorkloadError("the workload sent by the Locust master is not a workload")
    return workload


def _encode(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        name = type(value).__name__
        assert _CLASSES.get(name) is type(value), f"{name} is not in the portable table"
        return {
            _CLASS_KEY: name,
            **{f.name: _encode(getattr(value, f.name)) for f in dataclasses.fields(value)},
        }
    if isinstance(value, Mapping):
        return {str(k): _encode(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_encode(v) for v in value]
    return value


def _decode(value: Any) -> Any:
    if isinstance(value, Mapping):
        if _CLASS_KEY not in value:
            return {str(k): _decode(v) for k, v in value.items()}
        name = value[_CLASS_KEY]
        cls = _CLASSES.get(name) if isinstance(name, str) else None
        if cls is None:
            raise WorkloadError(f"the workload sent by the Locust master holds a {name!r}")
        known = {f.name for f in dataclasses.fields(cls)}
        fields = {k: _decode(v) for k, v in value.items() if k != _CLASS_KEY}
        unknown = sorted(set(fields) - known)
        if unknown:
            raise WorkloadError(
                f"the workload sent by the Locust master has fields this vprof does not know "
                f"({', '.join(unknown)})",
                hint="install the same vprof version on the master and every worker host",
            )
        try:
            return cls(**fields)
        except TypeError as exc:
            raise WorkloadError(f"the workload sent by the Locust master: {exc}") from None
    if isinstance(value, list):
        return tuple(_decode(v) for v in value)  # every sequence in a workload is a tuple
    return value
