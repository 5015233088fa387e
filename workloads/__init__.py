"""Seeded, reproducible LLM request synthesis: named workloads and exact-length prompts.

Pure: no HTTP (except ``check_against_server``), no Locust, and no numpy, so ``vprof workloads``
starts fast and a Locust user can call ``RequestSynthesizer.plan`` per request.
"""

from vprof.workloads.loading import (
    PRESETS_DIR,
    get_workload,
    load_workload_file,
    load_workloads,
    workload_from_dict,
)
from vprof.workloads.requestplan import RequestPlan
from vprof.workloads.spec import (
    ConversationSpec,
    Distribution,
    PrefixSpec,
    PromptDataset,
    Workload,
    fixed,
)
from vprof.workloads.synthesis import (
    Conversation,
    HFTokenizer,
    RequestSynthesizer,
    Tokenizer,
    load_tokenizer,
)
from vprof.workloads.tokencheck import TokenCheck, check_against_server

__all__ = [
    "PRESETS_DIR",
    "Conversation",
    "ConversationSpec",
    "Distribution",
    "HFTokenizer",
    "PrefixSpec",
    "PromptDataset",
    "RequestPlan",
    "RequestSynthesizer",
    "TokenCheck",
    "Tokenizer",
    "Workload",
    "check_against_server",
    "fixed",
    "get_workload",
    "load_tokenizer",
    "load_workload_file",
    "load_workloads",
    "workload_from_dict",
]
