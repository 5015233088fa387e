"""What ``vprof tune`` may try: the engine arguments it searches, their values, and which
combinations are never started.

The guide's six arguments plus ``max-num-seqs``, each with a default ladder taken from the
guide and the workload (``max-model-len`` from the workload's longest request, never below
it), narrowed or widened with ``--space KEY=V1,V2,…``; a key pinned with ``--set`` is not
searched. A *candidate* sets every searched key; it is refused before any server starts when the
validator (vLLM's own rules) or the guide's rules say it cannot run. Pure apart from reading
vLLM's flag table.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from vprof.common.errors import ProfileError
from vprof.common.numbers import MAX_TOKENS, check_number

if TYPE_CHECKING:
    from vprof.registry import Profile
    from vprof.workloads import Workload

CHUNKED = "enable-chunked-prefill"
BATCHED = "max-num-batched-tokens"
SEQS = "max-num-seqs"
PREFIX = "enable-prefix-caching"
MODEL_LEN = "max-model-len"
GPU_MEMORY = "gpu-memory-utilization"
EAGER = "enforce-eager"
TUNED_KEYS = (CHUNKED, BATCHED, SEQS, PREFIX, GPU_MEMORY, EAGER, MODEL_LEN)

# The search's stages, in the guide's order: the prefill budget first (it moves capacity and
# TTFT the most), then concurrency, the prefix cache, and memory last (it mostly decides
# whether the server starts at all). Keys of --space outside these come after, one by one.
STAGES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("prefill", (CHUNKED, BATCHED)),
    ("concurrency", (SEQS,)),
    ("prefix cache", (PREFIX,)),
    ("memory", (GPU_MEMORY, EAGER, MODEL_LEN)),
)
# Pairs of keys whose best values move together: each scheduler step's token budget
# (max-num-batched-tokens) is shared by one decode token per running sequence (up to
# max-num-seqs) and the prefill chunks, so the best budget depends on the concurrency and the
# other way round. A point within noise of the best on one key's line has the other key's line
# walked from it (benchmarks/tune_vs_grid.py: an optimum off both lines is missed otherwise).
COUPLED = frozenset({frozenset({BATCHED, SEQS})})
# Keys whose larger values need more memory: a candidate needing at least the memory of one
# that ran out of memory at start-up is not started. (Eager mode needs less: no CUDA graphs.)
MORE_MEMORY_WHEN_HIGHER = (BATCHED, SEQS, MODEL_LEN, GPU_MEMORY)
# Where the server listens is not a setting to tune.
NOT_SEARCHABLE = ("port", "host", "uds", "model")
# vLLM's own values when a profile leaves a key unset (the search starts from the nearest).
VLLM_DEFAULTS: dict[str, Any] = {
    CHUNKED: True,
    PREFIX: True,
    EAGER: False,
    BATCHED: 2048,
    SEQS: 256,
    GPU_MEMORY: 0.9,
}
MAX_VALUES = 100  # per key: each value can cost a server start
_LEN_QUANTUM = 256  # max-model-len defaults to the longest request rounded up to this


@dataclass(frozen=True)
class Dim:
    """One searched engine argument: its values in search order and where it came from."""

    key: str
    values: tuple[Any, ...]
    ordered: bool  # numbers, searched as a ladder; otherwise each value is tried
    origin: str = "default"  # "default" or "--space"

    def index(self, value: Any) -> int:
        """The position of ``value``, or of the nearest value on a ladder."""
        if value in self.values:
            return self.values.index(value)
        if not self.ordered or not isinstance(value, (int, float)) or isinstance(value, bool):
            return 0
        return min(range(len(self.values)), key=lambda i: abs(math.log(self.values[i] / value)))


@dataclass(frozen=True)
class Space:
    """The searched keys (``dims``) and the tuned keys held fixed (``fixed``), with notes that
    say what the defaults did (a key left out on this host, max-model-len from the workload)."""

    dims: tuple[Dim, ...]
    fixed: Mapping[str, Any] = field(default_factory=dict)
    longest_request: int = 0
    notes: tuple[str, ...] = ()

    def dim(self, key: str) -> Dim | None:
        return next((d for d in self.dims if d.key == key), None)

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(d.key for d in self.dims)

    def stages(self) -> list[tuple[str, tuple[Dim, ...]]]:
        """The searched keys grouped into the guide's stages; other keys one stage each."""
        out = []
        placed: set[str] = set()
        for name, keys in STAGES:
            dims = tuple(d for d in self.dims if d.key in keys)
            placed.update(keys)
            if dims:
                out.append((name, dims))
        out += [(d.key, (d,)) for d in self.dims if d.key not in placed]
        return out

    def grid_size(self) -> int:
        """How many candidates the full grid holds (before any is refused)."""
        return math.prod(len(d.values) for d in self.dims)

    def grid(self) -> list[Candidate]:
        """Every candidate of the space, as an exhaustive grid would run them."""
        import itertools

        return [
            Candidate(tuple(zip(self.keys, combo, strict=True)))
            for combo in itertools.product(*(d.values for d in self.dims))
        ]

    def to_dict(self) -> dict[str, Any]:
        return {
            "dims": {d.key: list(d.values) for d in self.dims},
            "fixed": dict(self.fixed),
            "longest_request": self.longest_request,
        }


@dataclass(frozen=True, order=True)
class Candidate:
    """One setting of every searched key, in the space's order (hashable, so trials are
    cached by candidate)."""

    settings: tuple[tuple[str, Any], ...]

    def get(self, key: str, default: Any = None) -> Any:
        return next((v for k, v in self.settings if k == key), default)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.settings)

    def with_value(self, key: str, value: Any) -> Candidate:
        return Candidate(tuple((k, value if k == key else v) for k, v in self.settings))

    def label(self, base: str) -> str:
        """``baseline@chunked-bt512-seqs64``: the base profile and every searched value."""
        return (
            f"{base}@" + "-".join(_short(k, v) for k, v in self.settings) if self.settings else base
        )

    def describe(self) -> str:
        return ", ".join(f"{k}={_yaml_text(v)}" for k, v in self.settings)


def _short(key: str, value: Any) -> str:
    flags = {CHUNKED: ("chunked", "nochunk"), PREFIX: ("pc", "nopc"), EAGER: ("eager", "graphs")}
    if key in flags:
        return flags[key][0] if value else flags[key][1]
    prefixes = {BATCHED: "bt", SEQS: "seqs", MODEL_LEN: "len", GPU_MEMORY: "mem"}
    if key in prefixes:
        return (
            f"{prefixes[key]}{value:g}" if isinstance(value, float) else f"{prefixes[key]}{value}"
        )
    return f"{key}={_yaml_text(value)}"


def _yaml_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return f"{value:g}" if isinstance(value, float) else str(value)


# --------------------------------------------------------------------------- --space


def parse_space(items: Sequence[str]) -> dict[str, tuple[Any, ...]]:
    """``["max-num-seqs=32,64", "enable-chunked-prefill=true,false"]`` → values by canonical
    flag name, each checked by the one rule for numbers and vLLM's flag table. The workload's
    own limits (max-model-len) are checked later, by :func:`build_space`."""
    from vprof.registry.overrides import parse_ladder_values
    from vprof.registry.profile import flag_key
    from vprof.registry.vllm_args import flag_table

    table = flag_table()
    out: dict[str, tuple[Any, ...]] = {}
    for item in items:
        written, sep, text = item.partition("=")
        written = flag_key(written.strip())
        if not sep or not written or not text.strip():
            raise ProfileError(
                f"{item!r} is not KEY=V1,V2,…",
                key="--space",
                hint="e.g. --space max-num-batched-tokens=512,1024,2048",
            )
        spec = table.lookup(written)
        if spec is None:
            near = table.suggest(written)
            raise ProfileError(
                f"unknown vLLM engine argument (vLLM {table.vllm_version})",
                key=f"--space {written}",
                hint=f"did you mean '{near}'?" if near else "see `vllm serve --help=all`",
            )
        key = spec.name
        where = f"--space {written}"
        if key in NOT_SEARCHABLE or written in NOT_SEARCHABLE:
            raise ProfileError(
                f"{written} is not a setting to tune",
                key=where,
                hint="set it with --port/--model or in the profile",
            )
        if key in out:
            raise ProfileError("given twice", key=where, hint="give each key once")
        try:
            values = parse_ladder_values(text, written)
        except ProfileError as exc:
            raise ProfileError(exc.message, key=where, hint=exc.hint) from None
        if len(values) > MAX_VALUES:
            raise ProfileError(f"at most {MAX_VALUES} values, got {len(values)}", key=where)
        checked = [_check_value(key, value, where) for value in values]
        seen: list[Any] = []
        for value in checked:
            if any(_same(value, s) for s in seen):
                raise ProfileError(f"{_yaml_text(value)} is given twice", key=where)
            seen.append(value)
        out[key] = tuple(checked)
    return out


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b


def _check_value(key: str, value: Any, where: str) -> Any:
    """One --space value: the tuned keys by their ranges, every key by vLLM's flag table."""
    if key in (BATCHED, SEQS, MODEL_LEN):
        value = check_number(
            value, minimum=1, maximum=MAX_TOKENS, integer=True, error=ProfileError, key=where
        )
    elif key == GPU_MEMORY:
        value = check_number(
            value,
            above=0,
            maximum=1,
            error=ProfileError,
            key=where,
            hint="0.9 means 90% of the GPU",
        )
    elif key in (CHUNKED, PREFIX, EAGER) and not isinstance(value, bool):
        raise ProfileError(f"expected true or false, got {value!r}", key=where)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        value = check_number(value, error=ProfileError, key=where)  # finite
    _check_flag_alone(key, value, where)
    return value


def _check_flag_alone(key: str, value: Any, where: str) -> None:
    """The validator's type, choice and range checks of one flag (a profile holding only it,
    so no combination rule can fire)."""
    from vprof.registry import Profile
    from vprof.registry.validate import check

    probe = Profile(
        name="space",
        description="--space",
        model="m",
        engine_args={key: value},
        origins={key: where},
    )
    errors, _ = check(probe)
    if errors:
        raise ProfileError(errors[0].message, key=where, hint=errors[0].hint)


# --------------------------------------------------------------------------- the default space


def shares_prefixes(workload: Workload) -> bool:
    """True when requests share prompt prefixes (a prefix pool, conversations, or a trace with
    block ids): only then can prefix caching change the answer."""
    if workload.prefix is not None or workload.conversation is not None:
        return True
    if workload.trace is not None:
        from vprof.workloads.trace import load_trace

        return any(r.prefix_blocks for r in load_trace(workload.trace).requests)
    return False


def default_model_len(longest: int) -> int:
    """The workload's longest request (prompt + output) rounded up to a multiple of 256."""
    return max(_LEN_QUANTUM, -(-longest // _LEN_QUANTUM) * _LEN_QUANTUM)


def _ladder(values: Iterable[int]) -> tuple[int, ...]:
    return tuple(sorted({int(v) for v in values if 1 <= v <= MAX_TOKENS}))


def build_space(
    profile: Profile,
    workload: Workload,
    given: Mapping[str, tuple[Any, ...]],
    *,
    gpu: bool,
) -> Space:
    """The space to search for ``profile`` under ``workload``: ``given`` (from --space) where
    named, the defaults elsewhere; keys the profile got from ``--set`` are pinned.

    Raises :class:`ProfileError` naming the key when a value breaks the guide's rules (a
    max-model-len below the workload's longest request)."""
    for key in given:
        if profile.origins.get(key) == "--set":
            raise ProfileError(
                f"--set {key}={_yaml_text(profile.engine_args.get(key, ''))} pins it, and --space "
                f"{key} searches it: the two contradict each other",
                key=f"--space {key}",
                hint=f"give --set {key} to keep one value, or --space {key} to search",
            )
    longest = int(workload.max_request_tokens())
    args = profile.engine_args
    pinned = {k for k in TUNED_KEYS if profile.origins.get(k) == "--set"}
    notes: list[str] = []
    dims: list[Dim] = []
    fixed: dict[str, Any] = {}

    def too_short(value: Any, where: str) -> None:
        if longest and isinstance(value, int) and value != -1 and value < longest:
            raise ProfileError(
                f"{value} is below the workload's longest request ({longest} tokens, prompt + "
                "output); vLLM would reject those requests",
                key=where,
                hint=f"use {default_model_len(longest)} or more",
            )

    # max-model-len first: the batched-tokens ladder is built on it
    if MODEL_LEN in given:
        for value in given[MODEL_LEN]:
            too_short(value, f"--space {MODEL_LEN}")
        model_lens: tuple[Any, ...] = _ladder(given[MODEL_LEN])
    elif MODEL_LEN in pinned:
        too_short(args[MODEL_LEN], f"--set {MODEL_LEN}")
        model_lens = (args[MODEL_LEN],)
    elif longest:
        model_lens = (default_model_len(longest),)
        if args.get(MODEL_LEN) != model_lens[0]:
            notes.append(
                f"max-model-len {model_lens[0]}: the workload's longest request is {longest} "
                f"tokens (the profile has {args.get(MODEL_LEN, 'the model default')}); a "
                "tighter limit frees memory for the KV cache"
            )
    elif isinstance(args.get(MODEL_LEN), int):
        model_lens = (args[MODEL_LEN],)
    else:
        raise ProfileError(
            "the workload's longest request is not known (prompts from a file), and the profile "
            "sets no max-model-len",
            key=f"--space {MODEL_LEN}",
            hint="give --space max-model-len=N (at least the longest prompt + output)",
        )
    model_len = min(model_lens)

    defaults: dict[str, tuple[Any, ...]] = {
        CHUNKED: (True, False),
        BATCHED: _ladder(
            [128, 256, 512, 1024, 2048, 4096, 8192, *(k * model_len for k in (1, 2, 3))]
        ),
        SEQS: (32, 64, 128, 256, 512),
        PREFIX: (True, False),
        EAGER: (False, True),
        GPU_MEMORY: (0.85, 0.9, 0.95),
        MODEL_LEN: model_lens,
    }
    for key in TUNED_KEYS:
        if key in given:
            values, origin = given[key], "--space"
        elif key in pinned:
            fixed[key] = args[key]
            continue
        elif key == PREFIX and not shares_prefixes(workload):
            if key in args:
                fixed[key] = args[key]
            stays = _yaml_text(args[key]) if key in args else "as vLLM's default (on)"
            notes.append(
                f"enable-prefix-caching stays {stays}: workload {workload.name} shares no "
                f"prefixes (--space {PREFIX}=true,false searches it)"
            )
            continue
        elif key == GPU_MEMORY and not gpu:
            if key in args:
                fixed[key] = args[key]
            notes.append(
                "gpu-memory-utilization is not searched: this host has no GPU, and the CPU "
                "build sizes its KV cache from VLLM_CPU_KVCACHE_SPACE"
            )
            continue
        else:
            values, origin = defaults[key], "default"
        ordered = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
        if ordered:
            values = tuple(sorted(values))
        else:
            # the profile's own value (or vLLM's default) is tried first
            start = args.get(key, VLLM_DEFAULTS.get(key))
            values = tuple(sorted(values, key=lambda v: not _same(v, start)))
        if len(values) == 1:
            fixed[key] = values[0]
            continue
        dims.append(Dim(key, tuple(values), ordered, origin))
    for key, values in given.items():  # keys beyond the guide's, searched after them
        if key in TUNED_KEYS:
            continue
        ordered = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
        if len(values) == 1:
            fixed[key] = values[0]
        else:
            dims.append(Dim(key, tuple(sorted(values)) if ordered else values, ordered, "--space"))
    order = [key for _, keys in STAGES for key in keys]
    dims.sort(key=lambda d: order.index(d.key) if d.key in order else len(order))
    return Space(tuple(dims), fixed, longest, tuple(notes))


def starting_candidate(space: Space, profile: Profile) -> Candidate:
    """The profile's own settings, each moved to the nearest value of its ladder (a key it
    leaves unset starts at vLLM's default)."""
    settings = []
    for dim in space.dims:
        current = profile.engine_args.get(dim.key, VLLM_DEFAULTS.get(dim.key, dim.values[0]))
        settings.append((dim.key, dim.values[dim.index(current)]))
    return Candidate(tuple(settings))


# --------------------------------------------------------------------------- refusals


def variant(profile: Profile, space: Space, candidate: Candidate) -> Profile:
    """The base profile with the space's fixed keys and the candidate's values, named by its
    label (so run folders say which candidate they measured)."""
    from dataclasses import replace

    settings = {**space.fixed, **candidate.as_dict()}
    changed = profile.with_overrides(set_args=settings)
    # Origins say "--space" so a validator message names where the value came from.
    origins = {**changed.origins, **{k: "--space" for k in candidate.as_dict()}}
    return replace(changed, name=candidate.label(profile.name), origins=origins)


def refusal(profile: Profile, space: Space, candidate: Candidate) -> str | None:
    """Why ``candidate`` must not be started (the validator's first error, or a guide rule),
    or None when it may run."""
    from vprof.registry.validate import check

    value = candidate.get(MODEL_LEN, space.fixed.get(MODEL_LEN))
    if space.longest_request and isinstance(value, int) and 0 < value < space.longest_request:
        return f"max-model-len {value} is below the workload's longest request"
    errors, _ = check(variant(profile, space, candidate))
    if errors:
        first = errors[0]
        return f"{first.key}: {first.message}" if first.key else first.message
    return None


def needs_more_memory(candidate: Candidate, than: Candidate, space: Space) -> bool:
    """True when ``candidate`` needs at least the memory ``than`` needed: every other key the
    same, each memory-hungry key at least as high, and CUDA graphs wherever ``than`` had them."""
    if candidate == than:
        return True
    for key in space.keys:
        mine, theirs = candidate.get(key), than.get(key)
        if key in MORE_MEMORY_WHEN_HIGHER:
            if mine < theirs:
                return False
        elif key == EAGER:
            if mine and not theirs:  # eager needs less memory than CUDA graphs
                return False
        elif not _same(mine, theirs):
            return False
    return True
