"""How long one scheduler step takes, from what it holds (pure).

A step's time is a constant plus a cost per prefill token, per decoding sequence, per context
token the decodes read, per query × key pair of the prefill chunks (attention, which grows
with the context a chunk attends to), per prefill chunk and per prompt whose prefill ends in
the step (its first token sampled: a prompt's share of the work that does not grow with its
length, once per chunk or once per prompt; the fit judges which the steps show)::

    step_ms = base + prefill_token · P + decode_seq · D^γ + decode_context · C / 1e3
              + prefill_attention · A / 1e6 + prefill_chunk · N + prefill_prompt · E

where P is the prefill tokens computed in the step, D the sequences decoding, C the context
tokens those decodes attend to, A the pairs a chunk's tokens attend to (chunk × (tokens
before it + chunk / 2)), N the prompts the step computes a chunk of and E those whose last
chunk it is; γ
(``decode_exponent``, 1 unless the fit finds the decodes' cost flattening with the batch)
bends the cost per decode. A request reaching the engine also lengthens the step it arrives
in by ``arrival_ms`` + ``arrival_ms_per_1k_prompt`` per 1,000 prompt tokens (taking it in —
the server's HTTP, tokenising and hand-over to the engine — shares the machine with the
step; fitted on the steps the token times show, so it is what it is on the server's own
hardware, none where the front end has room of its own). Requests also spend
``frontend_ms`` (+ per prompt token, + ``frontend_ms_per_in_flight`` per request the client
had out when it sent this one: the API server serves them all) between the client's send and
the engine (HTTP, tokenising, and streaming back), and steps vary by ``jitter`` (their
coefficient of variation). Nothing here knows CPUs or GPUs: the coefficients
are fitted on the server's own runs.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any

# The coefficients, in the order the fit's parameter vector holds them.
COEFFICIENTS = (
    "base_ms",
    "prefill_token_ms",
    "decode_seq_ms",
    "decode_context_ms_per_1k",
    "prefill_attention_ms_per_1m",
    "prefill_chunk_ms",
    "frontend_ms",
    "frontend_ms_per_1k_prompt",
)

# The terms of the engine's step time: the coefficients before the front end's, and what a
# prompt and an arrival add (an arrival lengthens the step it lands in).
STEP_TERMS = (
    *COEFFICIENTS[: COEFFICIENTS.index("frontend_ms")],
    "prefill_prompt_ms",
    "arrival_ms",
    "arrival_ms_per_1k_prompt",
)


@dataclass(frozen=True)
class StepCost:
    base_ms: float
    prefill_token_ms: float
    decode_seq_ms: float
    decode_context_ms_per_1k: float = 0.0
    prefill_attention_ms_per_1m: float = 0.0
    prefill_chunk_ms: float = 0.0
    frontend_ms: float = 0.0
    frontend_ms_per_1k_prompt: float = 0.0
    jitter: float = 0.0  # coefficient of variation of a step's time
    decode_exponent: float = 1.0  # γ: decodes cost decode_seq · D^γ (fitted, not calibrated)
    # what a request reaching the engine adds to the step it arrives in (fitted, not calibrated)
    arrival_ms: float = 0.0
    arrival_ms_per_1k_prompt: float = 0.0
    # the front end's delay per request in flight at the send (fitted, not calibrated)
    frontend_ms_per_in_flight: float = 0.0
    # per prompt whose prefill ends in the step (fitted, not calibrated)
    prefill_prompt_ms: float = 0.0

    def step_ms(
        self,
        prefill_tokens: float,
        decodes: float,
        context: float,
        attention: float,
        chunks: float = 0.0,
        prompts: float = 0.0,
    ) -> float:
        """The time of one step holding these (see the module's formula)."""
        return (
            self.base_ms
            + self.prefill_token_ms * prefill_tokens
            + self.decode_seq_ms * decodes**self.decode_exponent
            + self.decode_context_ms_per_1k * context * 1e-3
            + self.prefill_attention_ms_per_1m * attention * 1e-6
            + self.prefill_chunk_ms * chunks
            + self.prefill_prompt_ms * prompts
        )

    def arrival_s(self, prompt_tokens: Any) -> Any:
        """Seconds a request's arrival adds to the engine's step, per request."""
        return (self.arrival_ms + self.arrival_ms_per_1k_prompt * prompt_tokens * 1e-3) * 1e-3

    def frontend_s(self, prompt_tokens: Any) -> Any:
        """Seconds from the client's send to the engine (and the answer back), per request,
        with no other request in flight."""
        return (self.frontend_ms + self.frontend_ms_per_1k_prompt * prompt_tokens * 1e-3) * 1e-3

    def vector(self) -> list[float]:
        return [float(getattr(self, name)) for name in COEFFICIENTS]

    @classmethod
    def from_vector(
        cls, values: Any, jitter: float = 0.0, decode_exponent: float = 1.0, **fixed: float
    ) -> StepCost:
        """From the calibration's vector; ``fixed``: the fitted terms it does not move."""
        named = {name: float(v) for name, v in zip(COEFFICIENTS, values, strict=True)}
        return cls(**named, jitter=jitter, decode_exponent=decode_exponent, **fixed)

    def paced(self, factor: float) -> StepCost:
        """Every step of the engine taking ``factor`` × its time (the front end's delay, the
        jitter and γ as they are)."""
        return replace(self, **{name: getattr(self, name) * factor for name in STEP_TERMS})

    def with_jitter(self, jitter: float) -> StepCost:
        return replace(self, jitter=float(jitter))

    def to_json(self) -> dict[str, float]:
        return {k: float(v) for k, v in asdict(self).items()}


STEP_COST_FIELDS = tuple(f.name for f in fields(StepCost))
