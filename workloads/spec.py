"""What a workload is: length distributions, shared prefixes, conversations.

Pure data plus sampling. Sampling takes a ``random.Random``: the stdlib generator is cheap to
seed per request (so a plan depends on its index alone) and keeps numpy out of the import path
of ``vprof workloads``.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from vprof.common.errors import WorkloadError
from vprof.common.numbers import MAX_TOKENS, check_number
from vprof.common.suggest import did_you_mean
from vprof.workloads.trace import TraceSpec, load_trace

DISTRIBUTION_KINDS = ("fixed", "uniform", "normal", "lognormal", "empirical")
ENDPOINTS = ("completions", "chat")
POPULARITIES = ("uniform", "zipf")

# Parameters each kind needs (any one set in a tuple of alternatives) and may take.
_REQUIRED: dict[str, tuple[tuple[str, ...], ...]] = {
    "fixed": (("value",),),
    "uniform": (("min", "max"),),
    "normal": (("mean", "stddev"),),
    "lognormal": (("mean", "sigma"), ("median", "sigma")),
    "empirical": ((),),
}
_ALLOWED: dict[str, frozenset[str]] = {
    "fixed": frozenset({"value"}),
    "uniform": frozenset({"min", "max"}),
    "normal": frozenset({"mean", "stddev", "min", "max"}),
    "lognormal": frozenset({"mean", "median", "sigma", "min", "max"}),
    "empirical": frozenset({"min", "max"}),
}
# How far an unclipped normal or lognormal reaches when a bound is needed (max-model-len checks).
_TAIL_SIGMAS = 4.0
# Ranges of each distribution parameter: (minimum, maximum). A lognormal sigma of 10 already
# spreads lengths over 17 orders of magnitude; samples are clipped to MAX_TOKENS in any case.
_PARAM_RANGES: dict[str, tuple[float, float]] = {
    "value": (1, MAX_TOKENS),
    "min": (1, MAX_TOKENS),
    "max": (1, MAX_TOKENS),
    "mean": (1, MAX_TOKENS),
    "median": (1, MAX_TOKENS),
    "stddev": (0, MAX_TOKENS),
    "sigma": (0, 10),
}
MAX_PREFIX_GROUPS = 100_000
# Limits (``check_number`` keywords) of the prefix settings and of a session's context.
PREFIX_LIMITS: dict[str, dict[str, Any]] = {
    "groups": {"minimum": 1, "maximum": MAX_PREFIX_GROUPS, "integer": True},
    "length_tokens": {"minimum": 1, "maximum": MAX_TOKENS, "integer": True},
    "zipf_s": {"above": 0, "maximum": 100},
    "share": {"minimum": 0, "maximum": 1},
}
CONTEXT_LIMITS: dict[str, Any] = {"minimum": 1, "maximum": MAX_TOKENS, "integer": True}


def _check_context_tokens(value: int | None) -> None:
    if value is not None:
        check_number(value, error=WorkloadError, key="max_context_tokens", **CONTEXT_LIMITS)


def distribution_limits(key: str) -> dict[str, Any]:
    """``check_number`` limits of a length distribution's parameter ``key``."""
    low, high = _PARAM_RANGES[key]
    if key == "sigma":  # a spread of 0 is no distribution
        return {"above": low, "maximum": high}
    return {"minimum": low, "maximum": high}


class FrozenParams(Mapping[str, float]):
    """A read-only, hashable parameter mapping, so workloads can be dict keys and set members."""

    __slots__ = ("_data",)

    def __init__(self, data: Mapping[str, float] | None = None) -> None:
        self._data = dict(data or {})

    def __getitem__(self, key: str) -> float:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __hash__(self) -> int:
        return hash(tuple(sorted(self._data.items())))

    def __repr__(self) -> str:
        return repr(self._data)


def _lognormal_mu(p: Mapping[str, float]) -> float:
    """The log-space location of a lognormal given ``median`` or ``mean`` (with ``sigma``)."""
    if "median" in p:
        return math.log(p["median"])
    # mean of a lognormal is exp(mu + sigma^2 / 2)
    return math.log(p["mean"]) - p["sigma"] ** 2 / 2.0


@dataclass(frozen=True)
class Distribution:
    """A distribution of token counts: ``fixed``, ``uniform``, ``normal``, ``lognormal`` or
    ``empirical`` (drawn from ``values``). Samples are integers clipped to ``[min, max]`` when
    those are given, and never below 1.

    ``lognormal`` takes ``sigma`` (the log-space spread) and either ``mean`` (the arithmetic
    mean of the lengths) or ``median``.
    """

    kind: str
    params: Mapping[str, float] = field(default_factory=dict)
    values: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.params, FrozenParams):
            object.__setattr__(self, "params", FrozenParams(self.params))
        problem = _distribution_problem(self)
        if problem is not None:
            key, message = problem
            raise WorkloadError(message, key=key)
        # checked as given (a 400-digit integer would overflow float()), then kept as floats
        object.__setattr__(
            self, "params", FrozenParams({k: float(v) for k, v in self.params.items()})
        )

    def sample(self, rng: random.Random) -> int:
        """One length drawn with ``rng``, rounded, clipped to ``[min, max]`` and at least 1."""
        p = self.params
        kind = self.kind
        if kind == "fixed":
            x: float = p["value"]
        elif kind == "uniform":
            x = rng.randint(int(p["min"]), int(p["max"]))
        elif kind == "normal":
            x = rng.gauss(p["mean"], p["stddev"])
        elif kind == "lognormal":
            x = rng.lognormvariate(self._mu(), p["sigma"])
        else:
            x = self.values[rng.randrange(len(self.values))]
        n = int(round(x)) if x < MAX_TOKENS else MAX_TOKENS
        lo = p.get("min")
        hi = p.get("max")
        if lo is not None and n < lo:
            n = int(lo)
        if hi is not None and n > hi:
            n = int(hi)
        return min(max(n, 1), MAX_TOKENS)

    def _mu(self) -> float:
        return _lognormal_mu(self.params)

    def mean(self) -> float:
        """The expected length before clipping (used for summaries, not for sampling)."""
        p = self.params
        if self.kind == "fixed":
            return p["value"]
        if self.kind == "uniform":
            return (p["min"] + p["max"]) / 2.0
        if self.kind == "normal":
            return p["mean"]
        if self.kind == "lognormal":
            return math.exp(self._mu() + p["sigma"] ** 2 / 2.0)
        return sum(self.values) / len(self.values) if self.values else math.nan

    def upper_bound(self) -> int:
        """The largest length this distribution produces: ``max`` when given, otherwise the
        largest value for bounded kinds, and mean + 4 sigma (or its log-space analogue) for
        unclipped normal and lognormal."""
        p = self.params
        if "max" in p:
            return int(p["max"])
        if self.kind == "fixed":
            return max(1, int(round(p["value"])))
        if self.kind == "empirical":
            return max(self.values) if self.values else 0
        if self.kind == "normal":
            tail = p["mean"] + _TAIL_SIGMAS * p["stddev"]
        else:
            tail = math.exp(self._mu() + _TAIL_SIGMAS * p["sigma"])
        return max(1, int(math.ceil(min(tail, MAX_TOKENS))))

    def lower_bound(self) -> int:
        """The smallest length this distribution produces (``min`` when given; 1 for unclipped
        normal and lognormal, whose tails reach it)."""
        p = self.params
        if self.kind == "fixed":
            low = int(round(p["value"]))
        elif self.kind == "uniform":
            low = int(p["min"])
        elif self.kind == "empirical":
            low = min(self.values) if self.values else 1
        else:
            low = 1
        if "min" in p:
            low = max(low, int(p["min"]))
        if "max" in p:
            low = min(low, int(p["max"]))
        return min(max(low, 1), MAX_TOKENS)

    def describe(self) -> str:
        """A short human summary such as ``lognormal mean 300 sigma 0.6 [16, 1500]``."""
        p = self.params
        if self.kind == "fixed":
            return f"{_num(p['value'])}"
        if self.kind == "uniform":
            return f"uniform {_num(p['min'])}-{_num(p['max'])}"
        bounds = ""
        if "min" in p or "max" in p:
            bounds = f" [{_num(p.get('min', 1))}, {_num(p['max']) if 'max' in p else '-'}]"
        if self.kind == "normal":
            return f"normal {_num(p['mean'])}±{_num(p['stddev'])}{bounds}"
        if self.kind == "lognormal":
            centre = f"mean {_num(p['mean'])}" if "mean" in p else f"median {_num(p['median'])}"
            return f"lognormal {centre} sigma {_num(p['sigma'])}{bounds}"
        return f"empirical n={len(self.values)} mean {self.mean():.0f}{bounds}"

    def to_dict(self) -> dict[str, Any]:
        """The YAML form (``values`` are summarised, not listed, for empirical lengths)."""
        if self.kind == "fixed" and set(self.params) == {"value"}:
            return {"kind": "fixed", "value": _num(self.params["value"])}
        out: dict[str, Any] = {"kind": self.kind}
        out.update({k: _num(v) for k, v in self.params.items()})
        if self.kind == "empirical":
            out["count"] = len(self.values)
        return out


def fixed(value: int) -> Distribution:
    """Shorthand for ``Distribution("fixed", {"value": value})``."""
    return Distribution("fixed", {"value": float(value)})


def _num(x: float | int) -> float | int:
    return int(x) if float(x).is_integer() else float(x)


def _distribution_problem(d: Distribution) -> tuple[str, str] | None:
    """(key, message) for the first thing wrong with ``d``, or None."""
    if d.kind not in DISTRIBUTION_KINDS:
        return "kind", (
            f"unknown distribution kind {d.kind!r}{did_you_mean(d.kind, DISTRIBUTION_KINDS)}; "
            f"choose one of {', '.join(DISTRIBUTION_KINDS)}"
        )
    p = d.params
    for key in p:
        if key not in _ALLOWED[d.kind]:
            allowed = sorted(_ALLOWED[d.kind])
            return key, (
                f"{d.kind} distributions take no {key!r}"
                f"{did_you_mean(key, allowed)}; they take {', '.join(allowed)}"
            )
    alternatives = _REQUIRED[d.kind]
    if not any(all(k in p for k in alt) for alt in alternatives):
        wanted = " or ".join("+".join(alt) for alt in alternatives)
        return d.kind, f"a {d.kind} distribution needs {wanted}"
    for key, value in p.items():
        try:
            check_number(value, error=WorkloadError, **distribution_limits(key))
        except WorkloadError as exc:
            counts = key in ("value", "min", "max", "mean", "median")
            return key, ("a token count " if counts else "") + exc.message
    if "min" in p and "max" in p and p["min"] > p["max"]:
        return "min", f"min ({_num(p['min'])}) is larger than max ({_num(p['max'])})"
    if "mean" in p and "median" in p:
        return "median", "give mean or median, not both"
    if d.kind == "empirical":
        if not d.values:
            return "values", "an empirical distribution needs at least one value"
        bad = next(
            (
                v
                for v in d.values
                if not isinstance(v, int) or isinstance(v, bool) or not 1 <= v <= MAX_TOKENS
            ),
            None,
        )
        if bad is not None:
            return "values", (
                f"token counts must be integers from 1 to {MAX_TOKENS:,}, got {bad!r}"
            )
    return None


@dataclass(frozen=True)
class PrefixSpec:
    """Shared prefixes: ``groups`` distinct prefixes of ``length_tokens`` tokens each.

    A request uses one with probability ``share``; which one follows ``popularity`` (``uniform``
    or ``zipf`` with exponent ``zipf_s``: group k is drawn with weight 1 / (k + 1) ** s). A
    request without a shared prefix gets unique text of the same length in its place, so
    ``share`` changes reuse but not prompt length.
    """

    groups: int
    length_tokens: int
    popularity: str = "uniform"
    zipf_s: float = 1.0
    share: float = 1.0

    def __post_init__(self) -> None:
        for key in ("groups", "length_tokens"):
            value = getattr(self, key)
            if not isinstance(value, int) or isinstance(value, bool):
                raise WorkloadError(f"must be an integer, got {value!r}", key=key)
            check_number(value, error=WorkloadError, key=key, **PREFIX_LIMITS[key])
        if self.popularity not in POPULARITIES:
            raise WorkloadError(
                f"unknown popularity {self.popularity!r}"
                f"{did_you_mean(self.popularity, POPULARITIES)}; choose uniform or zipf",
                key="popularity",
            )
        for key in ("zipf_s", "share"):
            check_number(getattr(self, key), error=WorkloadError, key=key, **PREFIX_LIMITS[key])

    def weights(self) -> tuple[float, ...]:
        """Probability of each group, given that a request uses a prefix."""
        if self.popularity == "uniform":
            raw = [1.0] * self.groups
        else:
            raw = [1.0 / (k + 1) ** self.zipf_s for k in range(self.groups)]
        total = sum(raw)
        return tuple(w / total for w in raw)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "groups": self.groups,
            "length_tokens": self.length_tokens,
            "popularity": self.popularity,
        }
        if self.popularity == "zipf":
            out["zipf_s"] = _num(self.zipf_s)
        out["share"] = _num(self.share)
        return out


THINK_KINDS = ("fixed", "uniform", "exponential", "lognormal")
# A think time or tool delay longer than a day is a typo (and would park a session for good).
MAX_THINK_S = 86_400.0
_THINK_REQUIRED: dict[str, tuple[tuple[str, ...], ...]] = {
    "fixed": (("value",),),
    "uniform": (("min", "max"),),
    "exponential": (("mean",),),
    "lognormal": (("mean", "sigma"), ("median", "sigma")),
}
_THINK_ALLOWED: dict[str, frozenset[str]] = {
    "fixed": frozenset({"value"}),
    "uniform": frozenset({"min", "max"}),
    "exponential": frozenset({"mean", "max"}),
    "lognormal": frozenset({"mean", "median", "sigma", "max"}),
}


def think_limits(kind: str, key: str) -> dict[str, Any]:
    """``check_number`` limits of parameter ``key`` of a ``kind`` think time, in seconds."""
    limits: dict[str, Any] = {"minimum": 0, "maximum": MAX_THINK_S if key != "sigma" else 10}
    if key in ("sigma", "median") or (key == "mean" and kind == "lognormal"):
        limits["above"] = 0  # a log-space location needs a positive centre
    return limits


@dataclass(frozen=True)
class ThinkTime:
    """A distribution of seconds between one answer and the session's next request: ``fixed``
    (``value``), ``uniform`` (``min``, ``max``), ``exponential`` (``mean``) or ``lognormal``
    (``sigma`` with ``mean`` or ``median``). Samples are clipped to ``[0, max]``."""

    kind: str
    params: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.params, FrozenParams):
            object.__setattr__(self, "params", FrozenParams(self.params))
        if self.kind not in THINK_KINDS:
            raise WorkloadError(
                f"unknown think-time kind {self.kind!r}{did_you_mean(self.kind, THINK_KINDS)}; "
                f"choose one of {', '.join(THINK_KINDS)}",
                key="kind",
            )
        p = self.params
        for key in p:
            if key not in _THINK_ALLOWED[self.kind]:
                allowed = sorted(_THINK_ALLOWED[self.kind])
                raise WorkloadError(
                    f"{self.kind} think times take no {key!r}{did_you_mean(key, allowed)}; "
                    f"they take {', '.join(allowed)}",
                    key=key,
                )
        alternatives = _THINK_REQUIRED[self.kind]
        if not any(all(k in p for k in alt) for alt in alternatives):
            wanted = " or ".join("+".join(alt) for alt in alternatives)
            raise WorkloadError(f"a {self.kind} think time needs {wanted}", key=self.kind)
        for key, value in p.items():
            check_number(value, error=WorkloadError, key=key, **think_limits(self.kind, key))
        if "min" in p and "max" in p and p["min"] > p["max"]:
            raise WorkloadError(f"min ({p['min']:g}) is larger than max ({p['max']:g})", key="min")
        if "mean" in p and "median" in p:
            raise WorkloadError("give mean or median, not both", key="median")
        object.__setattr__(self, "params", FrozenParams({k: float(v) for k, v in p.items()}))

    def sample(self, rng: random.Random) -> float:
        """One think time in seconds, drawn with ``rng``."""
        p = self.params
        if self.kind == "fixed":
            x = p["value"]
        elif self.kind == "uniform":
            x = rng.uniform(p["min"], p["max"])
        elif self.kind == "exponential":
            x = rng.expovariate(1.0 / p["mean"]) if p["mean"] > 0 else 0.0
        else:
            x = rng.lognormvariate(_lognormal_mu(p), p["sigma"])
        return min(max(x, 0.0), p.get("max", MAX_THINK_S))

    def mean(self) -> float:
        """The expected think time in seconds, before clipping."""
        p = self.params
        if self.kind == "fixed":
            return p["value"]
        if self.kind == "uniform":
            return (p["min"] + p["max"]) / 2.0
        if self.kind == "exponential" or "mean" in p:
            return p["mean"]
        return p["median"] * math.exp(p["sigma"] ** 2 / 2.0)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, **{k: _num(v) for k, v in self.params.items()}}


def think_time(value: Any) -> ThinkTime:
    """A ThinkTime from YAML data: a number of seconds (fixed) or a mapping with a ``kind``."""
    if isinstance(value, Mapping):
        spec = dict(value)
        kind = spec.pop("kind", None)
        if kind is None:
            raise WorkloadError(
                "a think time needs a kind (fixed, uniform, exponential or lognormal)", key=""
            )
        return ThinkTime(str(kind), spec)
    check_number(value, minimum=0, maximum=MAX_THINK_S, error=WorkloadError, key="")
    return ThinkTime("fixed", {"value": value})


@dataclass(frozen=True)
class ConversationSpec:
    """Multi-turn chat: each turn resends the history (previous messages plus the assistant's
    actual reply) and adds a new user message of ``user_tokens`` (default: the workload's
    ``prompt_tokens``). A conversation ends after ``turns`` turns, or earlier when the next
    request would exceed ``max_context_tokens`` (prompt plus requested output).

    Open loop, conversations arrive at the traffic's rate and each next turn is due
    ``think_time_s`` (drawn per turn; none: at once) after the previous answer ended."""

    turns: Distribution
    user_tokens: Distribution | None = None
    max_context_tokens: int | None = None
    think_time_s: ThinkTime | None = None

    def __post_init__(self) -> None:
        _check_context_tokens(self.max_context_tokens)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"turns": self.turns.to_dict()}
        if self.user_tokens is not None:
            out["user_tokens"] = self.user_tokens.to_dict()
        if self.max_context_tokens is not None:
            out["max_context_tokens"] = self.max_context_tokens
        if self.think_time_s is not None:
            out["think_time_s"] = self.think_time_s.to_dict()
        return out


@dataclass(frozen=True)
class AgentSpec:
    """Agent-style sessions: a chain of ``steps`` calls sharing one growing context.

    The first step sends the system prompt (the workload's ``prefix``) and a task of
    ``prompt_tokens``; every later call sends the whole context so far — each earlier call's
    message and answer — plus a synthetic tool result of ``tool_tokens``. A step makes
    ``fan_out`` calls at once (drawn per step; default 1), each with its own tool result, and the
    next step waits for all of them, then ``think_time_s`` more (the tools' running time).
    """

    steps: Distribution
    tool_tokens: Distribution
    fan_out: Distribution | None = None
    think_time_s: ThinkTime | None = None
    max_context_tokens: int | None = None

    def __post_init__(self) -> None:
        if self.fan_out is not None and self.fan_out.upper_bound() > MAX_FAN_OUT:
            raise WorkloadError(f"at most {MAX_FAN_OUT} calls at once", key="fan_out")
        _check_context_tokens(self.max_context_tokens)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "steps": self.steps.to_dict(),
            "tool_tokens": self.tool_tokens.to_dict(),
        }
        if self.fan_out is not None:
            out["fan_out"] = self.fan_out.to_dict()
        if self.think_time_s is not None:
            out["think_time_s"] = self.think_time_s.to_dict()
        if self.max_context_tokens is not None:
            out["max_context_tokens"] = self.max_context_tokens
        return out


MAX_FAN_OUT = 1024


@dataclass(frozen=True)
class PromptDataset:
    """Real prompts from a JSONL file (``{"prompt": ..., "output_tokens": ...}`` per line),
    sent as they are (the salt changes only a generated prefix, never a real prompt); their
    token counts are measured with the tokenizer."""

    path: str
    prompts: tuple[str, ...]
    output_tokens: tuple[int, ...]  # -1 where the line gave none

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "empirical", "file": self.path, "prompts": len(self.prompts)}


@dataclass(frozen=True)
class Workload:
    """A named, seeded description of the requests to send.

    With a ``prefix``, a prompt is the prefix (``prefix.length_tokens``) followed by
    ``prompt_tokens`` more tokens. For ``completions`` the prompt length counts the tokens the
    tokenizer adds (a BOS token), as the server's ``usage.prompt_tokens`` does; for ``chat`` it
    counts message content only (the chat template adds its own tokens).
    """

    name: str
    description: str
    endpoint: str
    prompt_tokens: Distribution
    output_tokens: Distribution
    prefix: PrefixSpec | None = None
    conversation: ConversationSpec | None = None
    fixed_output: bool = True
    seed: int = 0
    dataset: PromptDataset | None = None
    source: str = field(default="", compare=False)
    trace: TraceSpec | None = None  # kind: trace; prompt/output_tokens are then its lengths
    agent: AgentSpec | None = None

    @property
    def kind(self) -> str:
        """``trace`` for a replayed trace, else ``synthetic``."""
        return "trace" if self.trace is not None else "synthetic"

    def __post_init__(self) -> None:
        if self.endpoint not in ENDPOINTS:
            raise WorkloadError(
                f"unknown endpoint {self.endpoint!r}{did_you_mean(self.endpoint, ENDPOINTS)}; "
                "choose completions or chat",
                key="endpoint",
            )
        if self.conversation is not None and self.endpoint != "chat":
            raise WorkloadError("multi-turn conversations need endpoint: chat", key="conversation")
        if self.agent is not None:
            if self.endpoint != "chat":
                raise WorkloadError("agent sessions need endpoint: chat", key="agent")
            if self.conversation is not None:
                raise WorkloadError(
                    "a workload is either conversations or agent sessions, not both", key="agent"
                )
            if self.dataset is not None:
                raise WorkloadError(
                    "real prompts from a file are single-turn; drop the agent section", key="agent"
                )
        if self.conversation is not None and self.dataset is not None:
            raise WorkloadError(
                "real prompts from a file are single-turn; drop the conversation section",
                key="conversation",
            )
        if not isinstance(self.seed, int) or isinstance(self.seed, bool):
            raise WorkloadError(f"must be an integer, got {self.seed!r}", key="seed")
        if self.trace is not None and (
            self.prefix is not None
            or self.conversation is not None
            or self.dataset is not None
            or self.agent is not None
        ):
            raise WorkloadError(
                "a trace brings its own lengths and prefixes; drop prefix, conversation and "
                "prompt files",
                key="kind",
            )

    def max_request_tokens(self) -> int:
        """The longest prompt plus output this workload can produce (for max-model-len checks).

        Unclipped normal or lognormal lengths count at mean + 4 sigma; real prompts from a
        dataset are not known until tokenised and count as zero here.
        """
        if self.trace is not None:
            return load_trace(self.trace).max_request_tokens()
        prefix = self.prefix.length_tokens if self.prefix else 0
        prompt = 0 if self.dataset is not None else self.prompt_tokens.upper_bound()
        output = self.output_tokens.upper_bound()
        if self.agent is not None:
            agent = self.agent
            fan = agent.fan_out.upper_bound() if agent.fan_out else 1
            calls = 1 + (agent.steps.upper_bound() - 1) * fan
            longest = prefix + prompt + output + calls * (agent.tool_tokens.upper_bound() + output)
            if agent.max_context_tokens is not None:
                longest = min(longest, agent.max_context_tokens)
            return longest
        if self.conversation is None:
            return prefix + prompt + output
        conv = self.conversation
        user = conv.user_tokens.upper_bound() if conv.user_tokens else prompt
        turns = conv.turns.upper_bound()
        longest = prefix + turns * (user + output)
        if conv.max_context_tokens is not None:
            longest = min(longest, conv.max_context_tokens)
        return longest

    def min_request_tokens(self) -> int:
        """The shortest prompt plus output this workload can produce (a request that cannot fit
        a server's max-model-len means none can). Real prompts count as one token here."""
        prefix = self.prefix.length_tokens if self.prefix and self.prefix.share >= 1 else 0
        prompt = 1 if self.dataset is not None else self.prompt_tokens.lower_bound()
        output = self.output_tokens.lower_bound()  # max_tokens counts, sent or not
        return prefix + prompt + output

    def to_dict(self) -> dict[str, Any]:
        """The workload as YAML-ready data (what ``vprof workloads show`` prints)."""
        if self.trace is not None:
            return {
                "name": self.name,
                "description": self.description,
                "kind": "trace",
                "endpoint": self.endpoint,
                "seed": self.seed,
                **self.trace.to_dict(),
                "fixed_output": self.fixed_output,
                # what was read of the file, so an edited trace reads as a new workload
                "content_sha256": load_trace(self.trace).content_sha256[:16],
            }
        out: dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "endpoint": self.endpoint,
            "seed": self.seed,
            "prompt_tokens": self.dataset.to_dict()
            if self.dataset is not None
            else self.prompt_tokens.to_dict(),
            "output_tokens": self.output_tokens.to_dict(),
            "fixed_output": self.fixed_output,
        }
        if self.prefix is not None:
            out["prefix"] = self.prefix.to_dict()
        if self.conversation is not None:
            out["conversation"] = self.conversation.to_dict()
        if self.agent is not None:
            out["agent"] = self.agent.to_dict()
        return out

    @property
    def sessions(self) -> bool:
        """True when requests come in sessions (conversations or agent chains), whose later
        requests need the earlier answers."""
        return self.conversation is not None or self.agent is not None
