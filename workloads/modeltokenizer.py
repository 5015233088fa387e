"""Which tokenizer prompts are built with: the served model's own, found without a network.

Prompts are built to exact token lengths, so they must be counted with the tokenizer of the
model the server runs. In order: ``--tokenizer``; a model that is a local folder holding a
``tokenizer.json``; for a Hugging Face hub id (``meta-llama/Meta-Llama-3-8B-Instruct``), the
local Hugging Face cache (``huggingface_hub.try_to_load_from_cache``: no network; vLLM fills
that cache when it downloads a model); a download, only when asked (``--fetch-tokenizer``).
Failing all of them, vprof's tiny model's tokenizer stands in, and the choice says so
(``is_stand_in``): its prompt lengths are then off on the server.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vprof.common.errors import WorkloadError

GIVEN = "--tokenizer"
MODEL_FOLDER = "model folder"
HF_CACHE = "Hugging Face cache"
DOWNLOADED = "downloaded"
STAND_IN = "stand-in"

_TOKENIZER_FILE = "tokenizer.json"
_EXTRA_FILES = ("tokenizer_config.json",)  # the chat template; optional


@dataclass(frozen=True)
class TokenizerChoice:
    """The tokenizer prompts are built with, where it came from, and for which model."""

    path: str  # a tokenizer.json or a folder that holds one
    source: str  # GIVEN | MODEL_FOLDER | HF_CACHE | DOWNLOADED | STAND_IN
    model: str | None = None  # the model it was looked up for (None: not known)

    @property
    def is_stand_in(self) -> bool:
        return self.source == STAND_IN

    @property
    def label(self) -> str:
        """Short, for a summary: ``acme/m (Hugging Face cache)``."""
        if self.is_stand_in:
            return f"vprof's tiny model (stand-in for {self.model or 'an unknown model'})"
        named = self.model if self.source in (HF_CACHE, DOWNLOADED) else self.path
        return f"{named} ({self.source})"

    def record(self) -> dict[str, Any]:
        """What ``run.json`` keeps."""
        return {
            "tokenizer": {
                "path": self.path,
                "source": self.source,
                "model": self.model,
                "label": self.label,
            },
            "tokenizer_is_stand_in": self.is_stand_in,
        }

    def note(self) -> str:
        """One line for the person running the bench ("" when there is nothing to say)."""
        if self.is_stand_in:
            wanted = f"for {self.model!r} " if self.model else ""
            return (
                f"warning: no tokenizer {wanted}in a model folder or the local Hugging Face "
                "cache; prompts are built with vprof's tiny model's tokenizer as a stand-in, so "
                "the server will count other lengths than the workload asks for (pass "
                "--tokenizer PATH, or --fetch-tokenizer to download the model's)"
            )
        if self.source in (HF_CACHE, DOWNLOADED):
            return f"tokenizer: {self.model}'s, {self.source} ({self.path})"
        return ""


def find_tokenizer(
    models: Sequence[str | None], *, given: str | None = None, fetch: bool = False
) -> TokenizerChoice:
    """The tokenizer for the first of ``models`` (folders or hub ids, most specific first)
    that has one; ``given`` wins; ``fetch`` downloads from the hub when nothing local has it.
    A download that fails is an error (it was asked for); otherwise the tiny model stands in."""
    wanted = [str(m) for m in models if m]
    if given:
        return TokenizerChoice(str(given), GIVEN, wanted[0] if wanted else None)
    for model in wanted:
        folder = Path(model).expanduser()
        if (folder / _TOKENIZER_FILE).is_file():
            return TokenizerChoice(str(folder), MODEL_FOLDER, model)
    hub_ids = [m for m in wanted if _looks_like_hub_id(m)]
    for model in hub_ids:
        if cached := _from_cache(model):
            return TokenizerChoice(cached, HF_CACHE, model)
    if fetch and hub_ids:
        return TokenizerChoice(_download(hub_ids[0]), DOWNLOADED, hub_ids[0])
    if fetch:
        raise WorkloadError(
            f"--fetch-tokenizer: {', '.join(map(repr, wanted)) or 'the model'} is not a "
            "Hugging Face hub id (owner/name), so there is nothing to download",
            key="--fetch-tokenizer",
            hint="pass --tokenizer PATH (a model folder or its tokenizer.json)",
        )
    from vprof.tinymodel import ensure_tiny_model

    return TokenizerChoice(str(ensure_tiny_model()), STAND_IN, wanted[0] if wanted else None)


def _looks_like_hub_id(model: str) -> bool:
    """``owner/name`` or ``name``: no path separators beyond one slash, not a local path."""
    if model.startswith(("/", ".", "~")) or model.count("/") > 1 or "\\" in model:
        return False
    return bool(model.strip())


def _from_cache(model: str) -> str | None:
    """The cached snapshot folder holding ``model``'s tokenizer.json, or None."""
    from huggingface_hub import try_to_load_from_cache

    try:
        found = try_to_load_from_cache(model, _TOKENIZER_FILE)
    except Exception:  # noqa: BLE001 (a name the hub would refuse is simply not cached)
        return None
    return str(Path(found).parent) if isinstance(found, str) and Path(found).is_file() else None


def _download(model: str) -> str:
    """Download ``model``'s tokenizer files into the Hugging Face cache; its snapshot folder."""
    from huggingface_hub import hf_hub_download

    try:
        path = hf_hub_download(model, _TOKENIZER_FILE)
    except Exception as exc:  # noqa: BLE001 (network, auth, a repo without one: all end here)
        raise WorkloadError(
            f"could not download {model}'s {_TOKENIZER_FILE}: {type(exc).__name__}: "
            f"{' '.join(str(exc).split())[:300]}",
            key="--fetch-tokenizer",
            hint="check the network and the model's access (HF_TOKEN for gated models), or "
            "pass --tokenizer PATH",
        ) from None
    for extra in _EXTRA_FILES:
        try:
            hf_hub_download(model, extra)
        except Exception:  # noqa: BLE001 (optional: a tokenizer without a config still counts)
            pass
    return str(Path(path).parent)
