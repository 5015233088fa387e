"""Per-request records: one per scheduled request, success or failure, at full precision.

The schema is the contract between the load generator (which writes records), the run
folder (which keeps them; ``vprof.records.rundir`` owns its layout) and the summaries (which
read them).
"""

from vprof.records.rundir import RunDir, RunState, expand_runs, is_run_dir
from vprof.records.schema import FIELDS, RequestRecord, Status
from vprof.records.store import RecordWriter, read_records

__all__ = [
    "FIELDS",
    "RecordWriter",
    "RequestRecord",
    "RunDir",
    "RunState",
    "Status",
    "expand_runs",
    "is_run_dir",
    "read_records",
]
