"""Sessions: the requests of one conversation or agent chain, step by step, with think times.

A session answers two questions for whoever sends its requests: which calls make up the next
step, given the answers to the last one (:meth:`Session.next_step`), and how long to wait after
the last answer before they are due (:meth:`Session.think_s`). A conversation's step is one
turn; an agent's step is one call or ``fan_out`` parallel calls that share the context so far.
Everything drawn — lengths, texts, think times — depends only on (workload, seed, salt,
session id, step), like every other plan.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from vprof.workloads.requestplan import RequestPlan
from vprof.workloads.spec import ThinkTime

if TYPE_CHECKING:  # a synthesizer hands itself to its sessions
    from vprof.workloads.synthesis import Conversation, RequestSynthesizer


class Session:
    """One session of a conversation or agent workload (``start_session`` makes them)."""

    def __init__(self, synth: RequestSynthesizer, session_id: int) -> None:
        self.session_id = session_id
        self.step = 0  # the index of the next step to plan
        self._synth = synth
        w = synth.workload
        self._think: ThinkTime | None = None
        self._conversation: Conversation | None = None
        self._agent: _AgentChain | None = None
        if w.agent is not None:
            self._think = w.agent.think_time_s
            self._agent = _AgentChain(synth, session_id)
        else:
            assert w.conversation is not None
            self._think = w.conversation.think_time_s
            self._conversation = synth.start_conversation(session_id)

    def next_step(self, answers: list[str] | None) -> list[RequestPlan]:
        """The calls of the next step, given the answers to the previous step's calls (in
        their order; ``None`` for the first step). An empty list: the session is over."""
        if self._conversation is not None:
            last = answers[0] if answers else None
            plan = self._conversation.next_turn(last)
            plans = [plan] if plan is not None else []
        else:
            assert self._agent is not None
            plans = self._agent.next_step(answers)
        if plans:
            self.step += 1
        return plans

    def think_s(self) -> float:
        """Seconds between the previous step's last answer and the step ``next_step`` gave last
        (0 without a think time). Drawn from the seed, session and step alone."""
        if self._think is None:
            return 0.0
        return self._think.sample(self._synth._lengths_rng("think", self.session_id, self.step))


def start_session(synth: RequestSynthesizer, session_id: int) -> Session:
    """A new session of ``synth``'s conversation or agent workload."""
    return Session(synth, session_id)


class _AgentChain:
    """An agent's growing context: system prompt and task, then for each call its tool result
    and answer. Step 0 is one call (the task); a later step's ``fan_out`` calls each add their
    own tool result to the shared context, and the next step sees all of them."""

    def __init__(self, synth: RequestSynthesizer, session_id: int) -> None:
        w = synth.workload
        spec = w.agent
        assert spec is not None
        self._synth = synth
        self._spec = spec
        self.session_id = session_id
        rng, self.prefix_group, self.messages, self.context_tokens = synth.session_opening(
            "agent", session_id
        )
        self.steps = spec.steps.sample(rng)
        self.step = 0
        self._pending: list[dict[str, str]] = []  # the last step's call messages

    def next_step(self, answers: list[str] | None) -> list[RequestPlan]:
        synth = self._synth
        w = synth.workload
        if self.step >= self.steps:
            return []
        if self.step > 0:
            # The shared context gains every call of the last step: its message and answer.
            for message, answer in zip(self._pending, answers or [], strict=False):
                self.messages.append(message)
                self.messages.append({"role": "assistant", "content": answer})
                self.context_tokens += len(synth.tokenizer.encode(answer)) if answer else 0
        rng = synth._lengths_rng("agent", self.session_id, self.step)
        fan = 1 if self.step == 0 or self._spec.fan_out is None else self._spec.fan_out.sample(rng)
        calls = []
        for branch in range(fan):
            length = (w.prompt_tokens if self.step == 0 else self._spec.tool_tokens).sample(rng)
            output = w.output_tokens.sample(rng)
            calls.append((branch, length, output))
        limit = self._spec.max_context_tokens
        if limit is not None and self.step > 0:
            needed = self.context_tokens + max(n + out for _, n, out in calls)
            if needed > limit:
                self.steps = self.step  # the context no longer fits: the session ends here
                return []
        plans = []
        self._pending = []
        for branch, length, output in calls:
            text = synth._builder.text(
                length, synth._text_rng("agent", self.session_id, self.step, branch)
            )
            message = {"role": "user", "content": text}
            self._pending.append(message)
            max_tokens, min_tokens, ignore_eos = synth._output(output)
            plans.append(
                RequestPlan(
                    index=self.session_id,
                    prompt=None,
                    messages=[*self.messages, message],
                    expected_prompt_tokens=self.context_tokens + length,
                    max_tokens=max_tokens,
                    min_tokens=min_tokens,
                    ignore_eos=ignore_eos,
                    prefix_group=self.prefix_group,
                    conversation_id=self.session_id,
                    turn=self.step,
                    branch=branch if fan > 1 else -1,
                )
            )
        # the context grows by each call's message as soon as the step is sent
        self.context_tokens += sum(n for _, n, _ in calls)
        self.step += 1
        return plans
