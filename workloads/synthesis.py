"""Turn a Workload into concrete requests whose prompts have exact token lengths.

A plan depends only on (workload, seed, salt, index): each request seeds its own generators from
those, so an open-loop schedule can be split across Locust workers and every worker builds the
same request for the same index. Lengths and prefix choices come from ``seed`` alone; the
``salt`` changes only the text, so two runs with different salts send the same lengths with
different words (and a warm prefix cache from the first run cannot help the second).

Text is made of "word tokens": vocabulary entries that decode to a space followed by letters and
re-encode to themselves. Byte-level BPE tokenizers split text before every such word, so a string
of n of them encodes to exactly n tokens; that is checked once per tokenizer, and when it does not
hold the builder falls back to ``vllm bench``'s decode, re-encode and trim/pad loop.
"""

from __future__ import annotations

import bisect
import copy
import functools
import os
import random
import re
import weakref
from itertools import accumulate
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from vprof.common.errors import WorkloadError
from vprof.workloads.requestplan import RequestPlan
from vprof.workloads.sessions import start_session
from vprof.workloads.spec import Workload
from vprof.workloads.trace import load_trace
from vprof.workloads.traceplan import TracePlanner


@runtime_checkable
class Tokenizer(Protocol):
    """What synthesis needs from a tokenizer. ``encode`` adds no special tokens."""

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: list[int]) -> str: ...


class HFTokenizer:
    """A ``tokenizers.Tokenizer`` behind the Tokenizer protocol.

    ``num_special_tokens`` is how many tokens (a BOS) the server adds to a completion prompt.
    """

    def __init__(self, tokenizer: Any, path: str = "") -> None:
        self._tok = tokenizer
        self.path = path
        self.vocab_size: int = tokenizer.get_vocab_size()
        processor = tokenizer.post_processor
        self.num_special_tokens: int = (
            processor.num_special_tokens_to_add(False) if processor is not None else 0
        )
        self.special_ids: frozenset[int] = frozenset(
            i for i, t in tokenizer.get_added_tokens_decoder().items() if t.special
        )

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids

    def decode(self, ids: list[int]) -> str:
        return self._tok.decode(ids, skip_special_tokens=False)

    def decode_each(self, ids: list[int]) -> list[str]:
        """Each id decoded on its own (batched in Rust)."""
        return self._tok.decode_batch([[i] for i in ids], skip_special_tokens=False)

    def encode_many(self, texts: list[str]) -> list[list[int]]:
        """Many texts encoded without special tokens (batched in Rust)."""
        return [e.ids for e in self._tok.encode_batch(texts, add_special_tokens=False)]

    def count(self, texts: list[str]) -> list[int]:
        """Token counts of many texts at once (batched in Rust)."""
        return [len(e.ids) for e in self._tok.encode_batch(texts, add_special_tokens=False)]

    def __repr__(self) -> str:
        return f"HFTokenizer({self.path!r}, vocab_size={self.vocab_size})"


def load_tokenizer(model_dir_or_tokenizer_json: str | os.PathLike[str]) -> HFTokenizer:
    """The tokenizer of a model folder (its ``tokenizer.json``) or of a ``tokenizer.json`` file.

    Loaded once per file and process: every Locust user of a process shares it (and the
    vocabulary scan that text building does once per tokenizer).
    """
    path = Path(model_dir_or_tokenizer_json).expanduser()
    file = path / "tokenizer.json" if path.is_dir() else path
    if not file.is_file():
        raise WorkloadError(
            f"no tokenizer.json at {path}",
            hint="give a model folder that holds tokenizer.json, or the file itself",
        )
    return _load_tokenizer_file(str(file.resolve()))


@functools.lru_cache(maxsize=8)
def _load_tokenizer_file(file: str) -> HFTokenizer:
    from tokenizers import Tokenizer as _Tokenizer

    try:
        return HFTokenizer(_Tokenizer.from_file(file), file)
    except Exception as exc:  # the Rust side raises plain Exceptions for bad files
        raise WorkloadError(f"cannot read the tokenizer: {exc}", path=file) from None


_WORD = re.compile(r" [A-Za-z]{1,24}")
_MIN_POOL = 64


class _TextBuilder:
    """Builds text of an exact token count for one tokenizer."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer
        vocab_size = getattr(tokenizer, "vocab_size", None)
        if vocab_size is None and hasattr(tokenizer, "get_vocab_size"):
            vocab_size = tokenizer.get_vocab_size()
        if not vocab_size:
            raise WorkloadError(
                "the tokenizer does not say its vocabulary size",
                hint="give it a vocab_size attribute, or use load_tokenizer()",
            )
        special: frozenset[int] = getattr(tokenizer, "special_ids", frozenset())
        self.ids = [i for i in range(int(vocab_size)) if i not in special]
        # Batched in Rust when the tokenizer offers it: a 50k vocabulary scans in ~0.4 s
        # here (0.8 s one id at a time).
        decode_each = getattr(tokenizer, "decode_each", None)
        encode_many = getattr(tokenizer, "encode_many", None)
        texts = decode_each(self.ids) if decode_each else [tokenizer.decode([i]) for i in self.ids]
        encoded = encode_many(texts) if encode_many else [tokenizer.encode(t) for t in texts]
        words = []
        roundtrip = []
        for i, text, ids in zip(self.ids, texts, encoded, strict=True):
            if ids == [i]:
                roundtrip.append(i)
                if _WORD.fullmatch(text):
                    words.append(text)
        self.words = words
        # ids that survive decode and re-encode alone merge less when strung together
        self.roundtrip_ids = roundtrip or self.ids
        self.exact = len(words) >= _MIN_POOL and self._concatenation_is_exact()
        # One-token strings to draw text from piece by piece (a trace's partial block must be
        # a prefix of the full block): the word tokens when they concatenate exactly.
        text_of = dict(zip(self.ids, texts, strict=True))
        self.pieces = words if self.exact else [text_of[i] for i in self.roundtrip_ids]

    def _concatenation_is_exact(self) -> bool:
        rng = random.Random("vprof-selftest")
        for n in (1, 7, 64, 300):
            text = "".join(rng.choices(self.words, k=n))
            if len(self.tokenizer.encode(text)) != n:
                return False
        return True

    def text(self, n_tokens: int, rng: random.Random) -> str:
        """Text that encodes to exactly ``n_tokens`` tokens (no special tokens)."""
        if n_tokens <= 0:
            return ""
        if self.exact:
            return "".join(rng.choices(self.words, k=n_tokens))
        return self._adjusted(n_tokens, rng)

    def _adjusted(self, n_tokens: int, rng: random.Random) -> str:
        # vllm bench's way: random ids, decode, re-encode, then trim or pad and try again.
        tok = self.tokenizer
        pool = self.roundtrip_ids
        text = tok.decode(rng.choices(pool, k=n_tokens))
        best, best_gap = text, n_tokens
        for _ in range(24):
            encoded = tok.encode(text)
            gap = len(encoded) - n_tokens
            if gap == 0:
                return text
            if abs(gap) < best_gap:
                best, best_gap = text, abs(gap)
            if gap > 0:
                text = tok.decode(encoded[:n_tokens])
            else:
                text += tok.decode(rng.choices(pool, k=-gap))
        return best  # close; the gap shows as expected vs server-counted tokens


_BUILDERS: weakref.WeakKeyDictionary[Any, _TextBuilder] = weakref.WeakKeyDictionary()


def _builder(tokenizer: Tokenizer) -> _TextBuilder:
    # One scan of the vocabulary per tokenizer object, shared by every synthesizer (Locust user).
    try:
        found = _BUILDERS.get(tokenizer)
    except TypeError:
        return _TextBuilder(tokenizer)
    if found is None:
        found = _TextBuilder(tokenizer)
        _BUILDERS[tokenizer] = found
    return found


class RequestSynthesizer:
    """Plans the requests of a workload: ``plan(index)`` for single requests,
    ``start_conversation(id)`` for multi-turn chat.

    Example::

        synth = RequestSynthesizer(get_workload("chat"), load_tokenizer(model_dir), salt="run-7")
        plan = synth.plan(0)
    """

    def __init__(
        self,
        workload: Workload,
        tokenizer: Tokenizer,
        *,
        seed: int | None = None,
        salt: str = "",
    ) -> None:
        self.workload = workload
        self.tokenizer = tokenizer
        self.seed = workload.seed if seed is None else seed
        self.salt = salt
        self._builder = _builder(tokenizer)
        self._specials = int(getattr(tokenizer, "num_special_tokens", 0))
        prefix = workload.prefix
        self._cum_weights = list(accumulate(prefix.weights())) if prefix else []
        self._prefix_texts: dict[int, str] = {}
        self._dataset_counts: dict[int, int] = {}
        self._trace: TracePlanner | None = None
        if workload.trace is not None:
            self._trace = TracePlanner(self, load_trace(workload.trace))

    def resalted(self, salt: str) -> RequestSynthesizer:
        """The same planner with another salt: the same lengths, other text (a shallow copy
        that shares the tokenizer and text builder, with prefixes of its own)."""
        other = copy.copy(self)
        other.salt = salt
        other._prefix_texts = {}
        return other

    # --- pieces ---------------------------------------------------------------------------

    def _lengths_rng(self, *parts: object) -> random.Random:
        return random.Random(":".join(["L", str(self.seed), *map(str, parts)]))

    def _text_rng(self, *parts: object) -> random.Random:
        return random.Random(":".join(["T", str(self.seed), self.salt, *map(str, parts)]))

    def _choose_group(self, rng: random.Random) -> int:
        """A prefix group for one request, or -1 when it uses no shared prefix."""
        prefix = self.workload.prefix
        if prefix is None:
            return -1
        use = rng.random() < prefix.share
        pick = rng.random()  # drawn either way, so share does not shift later draws
        if not use:
            return -1
        return min(bisect.bisect_right(self._cum_weights, pick), prefix.groups - 1)

    def prefix_text(self, group: int) -> str:
        """The shared prefix of ``group`` (cached: every request of the group sends the same)."""
        text = self._prefix_texts.get(group)
        if text is None:
            assert self.workload.prefix is not None
            text = self._builder.text(
                self.workload.prefix.length_tokens, self._text_rng("prefix", group)
            )
            self._prefix_texts[group] = text
        return text

    def session_opening(
        self, kind: str, session_id: int
    ) -> tuple[random.Random, int, list[dict[str, str]], int]:
        """How session ``session_id`` of ``kind`` begins: its lengths RNG (its prefix group
        already drawn from it), that group, its opening messages (the shared prefix as the
        system message, when the workload has one) and their token count."""
        rng = self._lengths_rng(kind, session_id)
        group = self._choose_group(rng)
        lead = self._lead_text(group, self._text_rng(kind, session_id))
        if not lead:
            return rng, group, [], 0
        tokens = self.workload.prefix.length_tokens  # type: ignore[union-attr]
        return rng, group, [{"role": "system", "content": lead}], tokens

    def _lead_text(self, group: int, text_rng: random.Random) -> str:
        """The prefix part of a prompt: shared text, or unique text of the same length."""
        prefix = self.workload.prefix
        if prefix is None:
            return ""
        if group >= 0:
            return self.prefix_text(group)
        return self._builder.text(prefix.length_tokens, text_rng)

    def _output(self, n: int) -> tuple[int, int | None, bool]:
        if self.workload.fixed_output:
            return n, n, True
        return n, None, False

    def _dataset_prompt(self, rng: random.Random) -> tuple[str, int, int]:
        """(prompt, its token count, its output tokens or -1) from the JSONL dataset."""
        dataset = self.workload.dataset
        assert dataset is not None
        i = rng.randrange(len(dataset.prompts))
        count = self._dataset_counts.get(i)
        if count is None:
            count = len(self.tokenizer.encode(dataset.prompts[i]))
            self._dataset_counts[i] = count
        return dataset.prompts[i], count, dataset.output_tokens[i]

    # --- plans ----------------------------------------------------------------------------

    def plan(self, index: int) -> RequestPlan:
        """The request at ``index``; the same (workload, seed, salt, index) give the same plan.

        For a multi-turn workload this is the first turn of conversation ``index``; for a
        trace, request ``index`` of the trace.
        """
        if self._trace is not None:
            return self._trace.plan(index)
        w = self.workload
        if w.conversation is not None:
            first = self.start_conversation(index).next_turn(None)
            assert first is not None  # a conversation has at least one turn
            return first
        if w.agent is not None:
            return start_session(self, index).next_step(None)[0]
        lengths = self._lengths_rng(index)
        group = self._choose_group(lengths)
        body_tokens = w.prompt_tokens.sample(lengths)
        output_tokens = w.output_tokens.sample(lengths)
        text_rng = self._text_rng(index)
        lead = self._lead_text(group, text_rng)
        lead_tokens = w.prefix.length_tokens if w.prefix else 0
        if w.dataset is not None:
            body, counted, from_file = self._dataset_prompt(lengths)
            if from_file > 0:
                output_tokens = from_file
        else:
            # For completions the sampled length includes the BOS the server will add.
            content = body_tokens - (self._specials if w.endpoint == "completions" else 0)
            if not lead:
                content = max(content, 1)
            body = self._builder.text(max(content, 0), text_rng)
            counted = max(content, 0)
        max_tokens, min_tokens, ignore_eos = self._output(output_tokens)
        if w.endpoint == "completions":
            return RequestPlan(
                index=index,
                prompt=lead + body,
                messages=None,
                expected_prompt_tokens=lead_tokens + counted + self._specials,
                max_tokens=max_tokens,
                min_tokens=min_tokens,
                ignore_eos=ignore_eos,
                prefix_group=group,
            )
        messages = []
        if lead:
            messages.append({"role": "system", "content": lead})
        messages.append({"role": "user", "content": body})
        return RequestPlan(
            index=index,
            prompt=None,
            messages=messages,
            expected_prompt_tokens=lead_tokens + counted,
            max_tokens=max_tokens,
            min_tokens=min_tokens,
            ignore_eos=ignore_eos,
            prefix_group=group,
        )

    def planned_lengths(self, index: int) -> tuple[int, int, int]:
        """(prefix group, prompt tokens, output tokens) of ``plan(index)`` without building text.

        For chat and conversations this is the first request's content length.
        """
        if self._trace is not None:
            return self._trace.planned_lengths(index)
        w = self.workload
        if w.conversation is not None:
            rng = self._lengths_rng("conversation", index)
            group = self._choose_group(rng)
            rng = self._lengths_rng("conversation", index, 0)
            user = w.conversation.user_tokens or w.prompt_tokens
            prompt, output = user.sample(rng), w.output_tokens.sample(rng)
        elif w.agent is not None:  # the task: the first call of the chain
            group = self._choose_group(self._lengths_rng("agent", index))
            rng = self._lengths_rng("agent", index, 0)
            prompt, output = w.prompt_tokens.sample(rng), w.output_tokens.sample(rng)
        else:
            rng = self._lengths_rng(index)
            group = self._choose_group(rng)
            prompt, output = w.prompt_tokens.sample(rng), w.output_tokens.sample(rng)
        lead = w.prefix.length_tokens if w.prefix else 0
        return group, lead + prompt, output

    def start_conversation(self, conversation_id: int) -> Conversation:
        """A new multi-turn conversation; feed it the assistant's replies turn by turn."""
        if self.workload.conversation is None:
            raise WorkloadError(
                f"workload {self.workload.name!r} has no conversation section",
                key="conversation",
                hint="add conversation: {turns: ...} and endpoint: chat",
            )
        return Conversation(self, conversation_id)


class Conversation:
    """One chat whose history grows: each turn sends every earlier message, the assistant's
    actual replies included, plus a new user message of a sampled length."""

    def __init__(self, synth: RequestSynthesizer, conversation_id: int) -> None:
        spec = synth.workload.conversation
        assert spec is not None
        self._synth = synth
        self.conversation_id = conversation_id
        rng, self.prefix_group, self.messages, self.context_tokens = synth.session_opening(
            "conversation", conversation_id
        )
        self.turns = spec.turns.sample(rng)
        self.turn = 0

    def next_turn(self, last_assistant_text: str | None) -> RequestPlan | None:
        """The next request, after appending the assistant's reply to the previous one
        (``None`` on the first turn). Returns None when the conversation is over."""
        synth = self._synth
        w = synth.workload
        spec = w.conversation
        assert spec is not None
        if self.turn >= self.turns:
            return None
        if self.turn > 0:
            reply = last_assistant_text or ""
            self.messages.append({"role": "assistant", "content": reply})
            self.context_tokens += len(synth.tokenizer.encode(reply)) if reply else 0
        rng = synth._lengths_rng("conversation", self.conversation_id, self.turn)
        user_tokens = (spec.user_tokens or w.prompt_tokens).sample(rng)
        output_tokens = w.output_tokens.sample(rng)
        if (
            spec.max_context_tokens is not None
            and self.turn > 0
            and self.context_tokens + user_tokens + output_tokens > spec.max_context_tokens
        ):
            self.turns = self.turn  # the history no longer fits: the conversation ends here
            return None
        text_rng = synth._text_rng("conversation", self.conversation_id, self.turn)
        user_text = synth._builder.text(user_tokens, text_rng)
        self.messages.append({"role": "user", "content": user_text})
        self.context_tokens += user_tokens
        max_tokens, min_tokens, ignore_eos = synth._output(output_tokens)
        plan = RequestPlan(
            index=self.conversation_id,
            prompt=None,
            messages=list(self.messages),
            expected_prompt_tokens=self.context_tokens,
            max_tokens=max_tokens,
            min_tokens=min_tokens,
            ignore_eos=ignore_eos,
            prefix_group=self.prefix_group,
            conversation_id=self.conversation_id,
            turn=self.turn,
        )
        self.turn += 1
        return plan
