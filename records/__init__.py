"""Per-request records: one per scheduled request, success or failure, at full precision.

The schema is the contract between the load generator (which writes records), the run
folder (which keeps them) and the summaries (which read them).
"""

from vprof.records.schema import FIELDS, RequestRecord, Status
from vprof.records.store import RecordWriter, read_records

__all__ = ["FIELDS", "RecordWriter", "RequestRecord", "Status", "read_records"]
