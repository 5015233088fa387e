"""A step-level replay of vLLM v1's scheduler fed with a request stream (numpy, pure).

Each step follows vLLM v1's ``Scheduler.schedule``: requests already running go first — every
decoding sequence takes one token of the budget, a prompt still being prefilled takes what is
left of it (its next chunk) — then waiting requests are admitted in arrival order while the
budget lasts and fewer than ``max_num_seqs`` run: a prompt's cached prefix blocks are skipped
(prefix caching), and without chunked prefill a prompt that does not fit the rest of the
budget waits for the next step. A request that needs KV blocks the cache does not have
preempts the most recently admitted one (which goes back to the front of the queue, to be
computed again); no waiting request is admitted in a step that preempted. A step's time comes
from :class:`~vprof.forecast.stepcost.StepCost`; the step that computes a prompt's last token
samples its first output token, every later step one more. A request that reaches the engine
while a step runs lengthens that step by what taking it in costs (``StepCost.arrival_s``); it
joins the queue when the step ends. One that reaches an idle engine costs no step.

Runs of identical decode-only steps (nothing to admit, no prompt in flight) are taken in one
move, so a ten-minute run costs a few thousand iterations, not a hundred thousand.

The client is part of the replay: open-loop arrivals held back while ``max_in_flight``
requests are out, closed-loop users who send their next request when the last one ends, or
the send times a measured run had (:class:`Replay`).
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any

from vprof.forecast.rules import SchedulerRules
from vprof.forecast.stalls import PauseClock, RecordedPauses, RunStalls, StallProcess
from vprof.forecast.stepcost import StepCost

# Statuses of simulated requests (the records' statuses)
OK, ERROR, CANCELLED, NOT_SENT = "ok", "error", "cancelled", "not-sent"
STOP_TIMEOUT_S = 60.0  # the load generator waits this long for streams in flight at the end
_SHORT_JUMP = 48  # decode runs up to this many steps are stepped in Python, longer in numpy


# --------------------------------------------------------------------------- the client


@dataclass(frozen=True)
class Replay:
    """Requests sent at the times a measured run sent them (NaN: never sent)."""

    sent_s: Any  # numpy float array, seconds from the run's start


@dataclass(frozen=True)
class OpenLoop:
    """Arrivals at ``scheduled_s``; at most ``max_in_flight`` out at once (a request due while
    every user is busy goes out when one is free); nothing is sent after ``end_s``."""

    scheduled_s: Any
    max_in_flight: int
    end_s: float


@dataclass(frozen=True)
class ClosedLoop:
    """Users who each send a request, wait for its answer, and send the next ``gap_s`` later.
    ``users`` is ``[(t_s, count), …]``: how many users there are from each time on."""

    users: tuple[tuple[float, int], ...]
    end_s: float
    gap_s: float = 0.001


Client = Replay | OpenLoop | ClosedLoop


@dataclass(frozen=True)
class Requests:
    """What each request asks for, by index (the order a workload plans them in)."""

    prompt_tokens: Any  # int arrays, one value per request
    output_tokens: Any
    prefix_key: Any = None  # shared-prefix group (-1: none); None: no request shares
    prefix_tokens: Any = None  # tokens of the prompt the group shares
    known_hit: Any = None  # cached tokens the server reported (-1: simulate the cache)

    @property
    def n(self) -> int:
        return len(self.prompt_tokens)


@dataclass
class Replayed:
    """What the replay gives back: per request, when it was sent, its first and last token,
    its status and cached tokens; and each step's end time (``steps_s``), so each request's
    token times are ``steps_s[first_step + k]`` (``segments`` for requests that were
    preempted: ``(step, token)`` pairs where a run of consecutive tokens began)."""

    sent_s: Any
    first_s: Any
    last_s: Any
    status: Any  # numpy array of str
    cached: Any
    first_step: Any
    steps_s: Any
    segments: dict[int, list[tuple[int, int]]] = field(default_factory=dict)
    scheduled_s: Any = None  # per request: when its prompt was first scheduled (a step's start)
    step_decodes: Any = None  # per step: the sequences it decoded
    preemptions: int = 0
    steps: int = 0
    iterations: int = 0
    step_tokens: int = 0  # tokens scheduled, summed over steps (vLLM's iteration_tokens_total)
    max_kv_usage: float = 0.0
    max_waiting: int = 0
    prefix_queries: int = 0
    prefix_hits: int = 0

    def token_times(self, i: int, count: int) -> Any:
        """The times of request ``i``'s first ``count`` tokens."""
        import numpy as np

        if i in self.segments:
            out = np.empty(count)
            segs = self.segments[i]
            for j, (step, token) in enumerate(segs):
                stop = segs[j + 1][1] if j + 1 < len(segs) else count
                out[token:stop] = self.steps_s[step : step + stop - token]
            return out
        start = int(self.first_step[i])
        return self.steps_s[start : start + count]


# --------------------------------------------------------------------------- the replay


class _Clients:
    """Turns a :data:`Client` into arrivals at the engine, in time order. A request's front
    end takes ``frontend_s`` (its own, at no load) plus ``per_in_flight_s`` for each request
    the client had out when it sent it (sent, not yet answered): a send joins ``pending`` at
    the earliest it can arrive, and is given its arrival (``heap``) by :meth:`release` once
    the replay has reached that time, when every answer before its send is known."""

    def __init__(self, client: Client, n: int, frontend_s: Any, per_in_flight_s: float) -> None:
        import numpy as np

        self.client = client
        self.n = n
        self.frontend_s = frontend_s
        self.per_in_flight_s = per_in_flight_s
        self.sent = np.full(n, np.nan)
        self.heap: list[tuple[float, int]] = []
        self.pending: list[tuple[float, int]] = []
        self.send_times: list[float] = []  # sorted
        self.end_times: list[float] = []  # sorted: when requests ended (answered or not)
        self.next_index = 0
        self.exhausted = False  # a closed loop asked for more requests than the stream holds
        if isinstance(client, Replay):
            order = np.argsort(client.sent_s, kind="stable")
            for i in order:
                t = float(client.sent_s[i])
                if math.isfinite(t):
                    self._send(int(i), t)
        elif isinstance(client, OpenLoop):
            self.in_flight = 0
            self._fill_open(0.0)
        else:
            self.users = 0
            self.stopping = 0  # users to retire when their request ends
            self.changes = deque(client.users)
            self.user_events: list[float] = []
            self._apply_user_changes(0.0, initial=True)

    def _send(self, i: int, t: float) -> None:
        self.sent[i] = t
        bisect.insort(self.send_times, t)
        heapq.heappush(self.pending, (t + float(self.frontend_s[i]), i))

    def release(self, t: float) -> None:
        """Give the sends that can reach the engine by ``t`` their arrival."""
        pending = self.pending
        while pending and pending[0][0] <= t:
            earliest, i = heapq.heappop(pending)
            sent = float(self.sent[i])
            out = bisect.bisect_left(self.send_times, sent) - bisect.bisect_right(
                self.end_times, sent
            )
            heapq.heappush(self.heap, (earliest + self.per_in_flight_s * out, i))

    def next_arrival(self) -> float:
        """The earliest a request not yet at the engine can reach it."""
        return min(
            self.heap[0][0] if self.heap else math.inf,
            self.pending[0][0] if self.pending else math.inf,
        )

    def _fill_open(self, now: float) -> None:
        client = self.client
        assert isinstance(client, OpenLoop)
        sched = client.scheduled_s
        while self.in_flight < client.max_in_flight and self.next_index < self.n:
            t = max(float(sched[self.next_index]), now)
            if t >= client.end_s:
                self.next_index = self.n
                return
            self._send(self.next_index, t)
            self.next_index += 1
            self.in_flight += 1

    def _new_request(self, t: float) -> bool:
        client = self.client
        assert isinstance(client, ClosedLoop)
        if t >= client.end_s:
            return False
        if self.next_index >= self.n:
            self.exhausted = True
            return False
        self._send(self.next_index, t)
        self.next_index += 1
        return True

    def _apply_user_changes(self, now: float, initial: bool = False) -> None:
        client = self.client
        assert isinstance(client, ClosedLoop)
        while self.changes and (initial or self.changes[0][0] <= now):
            at, count = self.changes.popleft()
            initial = False
            if count > self.users:
                for _ in range(count - self.users):
                    self._new_request(at)
                self.users = count
            elif count < self.users:
                self.stopping += self.users - count
                self.users = count

    def next_change(self) -> float:
        if isinstance(self.client, ClosedLoop) and self.changes:
            return float(self.changes[0][0])
        return math.inf

    def step_to(self, t: float) -> None:
        """Apply what the client does up to ``t`` (closed-loop users joining)."""
        if isinstance(self.client, ClosedLoop) and self.changes and self.changes[0][0] <= t:
            self._apply_user_changes(t)

    def finished(self, t: float) -> None:
        """A request ended (answered, failed or cut off) at ``t``."""
        bisect.insort(self.end_times, t)
        if isinstance(self.client, OpenLoop):
            self.in_flight -= 1
            self._fill_open(t)
        elif isinstance(self.client, ClosedLoop):
            self._apply_user_changes(t)
            if self.stopping > 0:
                self.stopping -= 1
                return
            self._new_request(t + self.client.gap_s)


def simulate(
    requests: Requests,
    client: Client,
    rules: SchedulerRules,
    cost: StepCost,
    *,
    seed: int = 0,
    horizon_s: float | None = None,
    stalls: StallProcess | RunStalls | None = None,
) -> Replayed:
    """Replay ``requests`` as ``client`` sends them to a server with ``rules`` and ``cost``.

    ``horizon_s``: requests still unanswered then are cut off (``cancelled``); by default the
    client's end plus the load generator's stop timeout. ``stalls``: the engine pauses as this
    process says (drawn from ``seed``), or where a run's own stalls were (their times in the
    replay's), besides the steps' own jitter.
    """
    import numpy as np

    n = requests.n
    prompt = np.asarray(requests.prompt_tokens, dtype=np.int64)
    output = np.maximum(np.asarray(requests.output_tokens, dtype=np.int64), 1)
    frontend = np.asarray(cost.frontend_s(prompt.astype(np.float64)), dtype=np.float64)
    clients = _Clients(client, n, frontend, cost.frontend_ms_per_in_flight * 1e-3)
    if horizon_s is None:
        end = getattr(client, "end_s", None)
        if end is None:
            sent = clients.sent[np.isfinite(clients.sent)]
            end = float(sent.max()) if sent.size else 0.0
        horizon_s = float(end) + STOP_TIMEOUT_S
    state = _State(requests, prompt, output, rules, cost, clients, seed, stalls)
    state.run(horizon_s)
    return state.result()


class _State:
    """The replay's state; :meth:`run` is the step loop. Decoding sequences are not touched
    step by step: one that began decoding at step ``dec_step`` with ``dec_gen`` tokens has
    ``dec_gen + (s - dec_step)`` tokens after step ``s``, and its prompt and all but its last
    token in the KV cache."""

    def __init__(
        self,
        requests: Requests,
        prompt: Any,
        output: Any,
        rules: SchedulerRules,
        cost: StepCost,
        clients: _Clients,
        seed: int,
        stalls: StallProcess | RunStalls | None = None,
    ) -> None:
        import numpy as np

        n = requests.n
        self.np = np
        self.n = n
        self.P: list[int] = prompt.tolist()
        self.O: list[int] = output.tolist()
        self.clients = clients
        self.changes_users = isinstance(clients.client, ClosedLoop)
        self.rules = rules
        none = [-1] * n
        self.keys = (
            np.asarray(requests.prefix_key, dtype=np.int64).tolist()
            if requests.prefix_key is not None
            else none
        )
        self.key_tokens = (
            np.asarray(requests.prefix_tokens, dtype=np.int64).tolist()
            if requests.prefix_tokens is not None
            else [0] * n
        )
        self.known = (
            np.asarray(requests.known_hit, dtype=np.int64).tolist()
            if requests.known_hit is not None
            else None
        )
        # per request
        self.computed = [0] * n  # prefilling requests: tokens in the KV cache
        self.generated = [0] * n  # tokens sampled (kept up to date except while decoding)
        self.shared = [0] * n  # tokens of its KV that its prefix key holds, not itself
        self.hit = [0] * n  # cached tokens at its first admission
        self.phase = [0] * n  # 0 not running, 1 prefilling, 2 decoding
        self.dec_step = [0] * n
        self.dec_gen = [0] * n
        self.finish_at = [-1] * n
        self.first_step = np.full(n, -1, dtype=np.int64)
        self.scheduled_s = np.full(n, np.nan)
        self.first_s = np.full(n, np.nan)
        self.last_s = np.full(n, np.nan)
        self.status = np.full(n, NOT_SENT, dtype=object)
        self.segments: dict[int, list[tuple[int, int]]] = {}
        # the scheduler
        self.running: dict[int, None] = {}  # admission order
        self.prefilling: list[int] = []
        self.waiting: deque[int] = deque()
        self.blocked = False  # the queue's head needs KV that only a finish can free
        self.n_dec = 0
        self.ctx_dec = 0  # context tokens of the decoding sequences
        self.finish_heap: list[tuple[int, int]] = []
        self.steps: list[float] = []
        self.step_decodes: list[int] = []
        self.t = 0.0
        # the KV cache: running requests' own tokens plus the cached prefixes they use;
        # cached prefixes no request uses are evictable, least recently used first
        self.used = 0
        self.cached: dict[int, int] = {}
        self.refs: dict[int, int] = {}
        self.evictable: OrderedDict[int, int] = OrderedDict()
        self.evictable_tokens = 0
        # costs, in seconds
        self.c0 = cost.base_ms * 1e-3
        self.c_tok = cost.prefill_token_ms * 1e-3
        self.c_dec = cost.decode_seq_ms * 1e-3
        self.gamma = float(cost.decode_exponent)
        self.c_ctx = cost.decode_context_ms_per_1k * 1e-6
        self.c_att = cost.prefill_attention_ms_per_1m * 1e-9
        self.c_chunk = cost.prefill_chunk_ms * 1e-3
        self.c_prompt = cost.prefill_prompt_ms * 1e-3
        arrival = np.asarray(cost.arrival_s(prompt.astype(np.float64)), dtype=np.float64)
        self.arrival_cost: list[float] | None = arrival.tolist() if arrival.any() else None
        self.landed: list[int] = []  # arrivals a step took in (and was charged for)
        self.rng = np.random.default_rng(seed)
        jitter = float(cost.jitter)
        self.sigma = math.sqrt(math.log1p(jitter * jitter)) if jitter > 0 else 0.0
        self.noise = (
            self.rng.lognormal(-(self.sigma**2) / 2, self.sigma, 8192).tolist()
            if self.sigma > 0
            else None
        )
        self.noise_at = 0
        self.pauses: PauseClock | RecordedPauses | None = None
        if isinstance(stalls, RunStalls):
            self.pauses = RecordedPauses(stalls)
        elif stalls is not None and stalls.rate_per_s > 0:
            self.pauses = PauseClock(stalls, seed)
        # what the server's /metrics would count
        self.preemptions = 0
        self.iterations = 0
        self.step_tokens = 0
        self.max_used = 0.0
        self.max_waiting = 0
        self.queries = 0
        self.hits = 0

    # -- the KV cache ---------------------------------------------------------------------
    def _own(self, i: int, computed: int) -> int:
        return computed - min(computed, self.shared[i])

    def _evict(self, need: int) -> bool:
        """Make ``need`` tokens free, evicting unused cached prefixes (LRU) if it must."""
        capacity = self.rules.kv_cache_tokens
        free = capacity - self.used - self.evictable_tokens
        while free < need and self.evictable:
            key, tokens = self.evictable.popitem(last=False)
            self.evictable_tokens -= tokens
            self.cached.pop(key, None)
            free += tokens
        return free >= need

    def _slack(self) -> int:
        return len(self.running) * self.rules.block_size // 2  # partly filled last blocks

    def _lookup(self, i: int) -> tuple[int, int]:
        """(cached tokens request ``i`` may skip, tokens of it its prefix key holds)."""
        B = self.rules.block_size
        total = self.P[i] + self.generated[i]
        limit = ((total - 1) // B) * B  # vLLM recomputes at least the last token
        if self.known is not None and self.known[i] >= 0 and self.generated[i] == 0:
            hit = min(self.known[i], limit)
            return hit, hit
        key = self.keys[i]
        if key < 0 or not self.rules.prefix_caching:
            return 0, 0
        shared = min((self.key_tokens[i] // B) * B, limit)
        return min(self.cached.get(key, 0), shared), shared

    def _hold(self, i: int, shared: int) -> None:
        """Request ``i`` is admitted: it uses its prefix key's cached blocks."""
        self.shared[i] = shared
        key = self.keys[i]
        if key < 0 or not shared or not self.rules.prefix_caching:
            return
        if key in self.evictable:
            tokens = self.evictable.pop(key)
            self.evictable_tokens -= tokens
            self.used += tokens
        self.refs[key] = self.refs.get(key, 0) + 1

    def _release(self, i: int, computed: int) -> None:
        """Free a request's KV (it finished or was preempted); its prefix stays cached."""
        self.used -= self._own(i, computed)
        key = self.keys[i]
        if key >= 0 and self.shared[i] and self.rules.prefix_caching and key in self.refs:
            self.refs[key] -= 1
            if self.refs[key] == 0:
                del self.refs[key]
                tokens = self.cached.get(key, 0)
                self.used -= tokens
                self.evictable[key] = tokens
                self.evictable_tokens += tokens
        self.shared[i] = 0

    def _cache_progress(self, i: int, computed: int) -> None:
        """Whole blocks of a shared prefix become cached as soon as they are computed."""
        key = self.keys[i]
        if key < 0 or not self.shared[i] or key not in self.refs:
            return
        B = self.rules.block_size
        done = min((computed // B) * B, self.shared[i])
        have = self.cached.get(key, 0)
        if done > have:
            self.cached[key] = done
            self.used += done - have

    # -- requests changing state ----------------------------------------------------------
    def _decode_state(self, i: int) -> tuple[int, int]:
        """(generated, computed) of decoding request ``i`` after the last step."""
        g = self.dec_gen[i] + (len(self.steps) - 1 - self.dec_step[i])
        return g, self.P[i] + g - 1

    def _preempt_last(self) -> int:
        victim = next(reversed(self.running))
        del self.running[victim]
        if self.phase[victim] == 2:
            g, c = self._decode_state(victim)
            self.generated[victim] = g
            self.n_dec -= 1
            self.ctx_dec -= c
            self.finish_at[victim] = -1
        else:
            self.prefilling.remove(victim)
            c = self.computed[victim]
        self._release(victim, c)
        self.computed[victim] = 0
        self.phase[victim] = 0
        self.waiting.appendleft(victim)
        self.preemptions += 1
        self.blocked = False
        return victim

    def _start_decoding(self, i: int, s: int) -> None:
        """Request ``i`` sampled a token at step ``s`` after its prompt (again) was computed."""
        g = self.generated[i]
        if g == 1:
            self.first_step[i] = s
            self.first_s[i] = self.steps[s]
        else:  # resumed after a preemption: a new run of consecutive tokens
            self.segments.setdefault(i, [(int(self.first_step[i]), 0)]).append((s, g - 1))
        remaining = self.O[i] - g
        if remaining <= 0:
            self._finish(i, s, self.computed[i])
            return
        self.phase[i] = 2
        self.dec_step[i] = s
        self.dec_gen[i] = g
        self.n_dec += 1
        self.ctx_dec += self.computed[i]
        self.finish_at[i] = s + remaining
        heapq.heappush(self.finish_heap, (s + remaining, i))

    def _finish(self, i: int, s: int, computed: int) -> None:
        del self.running[i]
        self.phase[i] = 0
        self.last_s[i] = self.steps[s]
        self.status[i] = OK
        self._release(i, computed)
        self.blocked = False
        self.clients.finished(self.steps[s])

    def _finish_decodes(self, last: int) -> None:
        """Decoding requests whose last token came at or before step ``last``."""
        heap = self.finish_heap
        while heap and heap[0][0] <= last:
            f, i = heapq.heappop(heap)
            if self.finish_at[i] != f or self.phase[i] != 2:
                continue  # preempted since
            computed = self.P[i] + self.O[i] - 1
            self.n_dec -= 1
            self.ctx_dec -= self.P[i] + self.dec_gen[i] + (f - self.dec_step[i]) - 1
            self.finish_at[i] = -1
            self._finish(i, f, computed)

    def _next_finish(self) -> int | None:
        heap = self.finish_heap
        while heap and (self.finish_at[heap[0][1]] != heap[0][0] or self.phase[heap[0][1]] != 2):
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def _land(self, end: float) -> float:
        """The end of a step that would end at ``end``, lengthened by the requests that
        reach the engine while it runs (taken off the arrivals, to join the queue after it)."""
        cost = self.arrival_cost
        if cost is None:
            return end
        self.clients.release(end)
        heap = self.clients.heap
        arrived = []
        while heap and heap[0][0] < end:
            i = heapq.heappop(heap)[1]
            end += cost[i]
            arrived.append(i)
        self.landed.extend(reversed(arrived))  # popped from the end: first come, first queued
        return end

    def _factor(self) -> float:
        if self.noise is None:
            return 1.0
        value = self.noise[self.noise_at]
        self.noise_at = (self.noise_at + 1) % len(self.noise)
        return value

    # -- the loop -------------------------------------------------------------------------
    def run(self, horizon_s: float) -> None:
        heap = self.clients.heap
        rules = self.rules
        max_seqs = rules.max_num_seqs
        capacity = rules.kv_cache_tokens
        closed = isinstance(self.clients.client, ClosedLoop)
        while True:
            self.iterations += 1
            t = self.t
            if closed:
                self.clients.step_to(t)
            self.clients.release(t)
            landed = self.landed
            while landed or (heap and heap[0][0] <= t):
                i = landed.pop() if landed else heapq.heappop(heap)[1]
                if self.P[i] + self.O[i] > rules.max_model_len or self.P[i] > capacity:
                    self.status[i] = ERROR  # vLLM refuses it at once (HTTP 400)
                    self.last_s[i] = t
                    self.clients.finished(t)
                    continue
                self.waiting.append(i)
                self.blocked = False
            if not self.running and not self.waiting:
                upcoming = min(self.clients.next_arrival(), self.clients.next_change())
                if upcoming > horizon_s:
                    return
                self.t = max(t, upcoming)
                continue
            if t > horizon_s:
                return
            self.max_waiting = max(self.max_waiting, len(self.waiting))
            admissible = self.waiting and len(self.running) < max_seqs and not self.blocked
            if not self.prefilling and self.n_dec and not admissible and self._jump(horizon_s):
                continue
            self._step()

    def _jump(self, horizon_s: float) -> bool:
        """Take the identical decode-only steps up to the next event at once (False: none)."""
        np = self.np
        s = len(self.steps)
        f = self._next_finish()
        k = f - s + 1 if f is not None else 1
        n_dec = self.n_dec
        slack = len(self.running) * self.rules.block_size // 2
        free = self.rules.kv_cache_tokens - self.used - self.evictable_tokens - slack
        if free < n_dec * k:
            while k > 1 and not self._evict(n_dec * k + slack):
                k //= 2
        if k <= 1:
            return False
        full = len(self.running) >= self.rules.max_num_seqs
        until = math.inf if full else self.clients.next_arrival()
        if self.changes_users:
            until = min(until, self.clients.next_change())
        if horizon_s < until:
            until = horizon_s
        t = self.t
        base = self.c0 + self.c_dec * n_dec**self.gamma + self.c_ctx * self.ctx_dec
        slope = self.c_ctx * n_dec
        if until < math.inf:
            k = min(k, int((until - t) / max(base, 1e-9)) + 2)
        if k <= _SHORT_JUMP:
            # a few steps: plain Python is faster than numpy's call overhead
            ends = []
            noise, at, size = self.noise, self.noise_at, len(self.noise or ())
            pauses = self.pauses
            for j in range(k):
                step = base + slope * j
                if noise is not None:
                    step *= noise[at]
                    at = at + 1 if at + 1 < size else 0
                end = t + step
                if end >= until:
                    end = self._land(end)  # the arrival it meets lengthens it
                end = end if pauses is None else pauses.step_end(t, end)
                ends.append(end)
                t = end
                if t >= until:
                    break  # the next step starts after the arrival: it is not part of the run
            self.noise_at = at
            k = len(ends)
            self.steps.extend(ends)
            self.step_decodes.extend([n_dec] * k)
            last_t = ends[-1]
        else:
            dt = base + slope * np.arange(k, dtype=np.float64)
            if self.sigma > 0:
                dt = dt * self.rng.lognormal(-(self.sigma**2) / 2, self.sigma, k)
            ends_a = t + np.cumsum(dt)
            if self.pauses is not None and self.pauses.due_before(float(ends_a[-1])):
                ends_a = self.pauses.shift_ends(t, ends_a, until)
            if until < math.inf:
                # only the steps that start before the next arrival are unaffected by it
                k = max(1, min(k, int(np.searchsorted(ends_a, until, side="left")) + 1))
                ends_a = ends_a[:k]
                ends_a[-1] = self._land(float(ends_a[-1]))  # the arrival it meets lengthens it
            self.steps.extend(ends_a.tolist())
            self.step_decodes.extend([n_dec] * k)
            last_t = float(ends_a[-1])
        self.step_tokens += n_dec * k
        self.ctx_dec += n_dec * k
        self.used += n_dec * k
        self.max_used = max(
            self.max_used, (self.used + self.evictable_tokens) / self.rules.kv_cache_tokens
        )
        self.t = last_t
        self._finish_decodes(s + k - 1)
        return True

    def _step(self) -> None:
        """One step, scheduled as vLLM v1 does."""
        rules = self.rules
        budget = rules.max_num_batched_tokens
        B = rules.block_size
        threshold = rules.long_prefill_token_threshold
        running = self.running
        waiting = self.waiting
        P, generated, computed = self.P, self.generated, self.computed
        preempted = False
        # with room for anything this step could add, no allocation needs checking
        roomy = (
            rules.kv_cache_tokens - self.used - self.evictable_tokens - self._slack()
            >= budget + self.n_dec + 2 * B
        )
        # running requests first: every decoding sequence takes one token
        while not roomy and self.n_dec and not self._evict(self.n_dec + self._slack()):
            self._preempt_last()
            preempted = True
        decodes = min(self.n_dec, budget)
        budget -= decodes
        context = self.ctx_dec
        scheduled: list[tuple[int, int]] = []
        # then the prompts being prefilled, in admission order
        for i in list(self.prefilling) if self.prefilling else ():
            if budget <= 0:
                break
            if i not in running:
                continue
            chunk = min(P[i] + generated[i] - computed[i], budget)
            if 0 < threshold < chunk and len(running) + len(waiting) > 1:
                chunk = threshold
            if not roomy:
                need = self._own(i, computed[i] + chunk) - self._own(i, computed[i])
                while i in running and not self._evict(need + self._slack()):
                    preempted = True
                    self._preempt_last()
                if i not in running:
                    continue
            scheduled.append((i, chunk))
            budget -= chunk
        # then waiting requests, unless this step preempted one
        max_seqs = rules.max_num_seqs
        while not preempted and waiting and budget > 0 and len(running) < max_seqs:
            i = waiting[0]
            hit, shared = self._lookup(i)
            remaining = P[i] + generated[i] - hit
            if remaining > budget and not rules.chunked_prefill:
                break
            chunk = remaining if remaining < budget else budget
            if 0 < threshold < chunk and len(running) + len(waiting) > 1:
                chunk = threshold
            if not roomy:
                own = (hit + chunk) - min(hit + chunk, shared)
                if not self._evict(own + self._slack() + B):
                    if not running:  # it can never fit
                        waiting.popleft()
                        self.status[i] = ERROR
                        self.last_s[i] = self.t
                        self.clients.finished(self.t)
                        continue
                    self.blocked = True
                    break
            waiting.popleft()
            if shared:
                self._hold(i, shared)
            if generated[i] == 0:
                self.hit[i] = hit
                self.queries += P[i]
                self.hits += hit
                if math.isnan(self.scheduled_s[i]):  # its first admission
                    self.scheduled_s[i] = self.t
            computed[i] = hit
            running[i] = None
            self.phase[i] = 1
            self.prefilling.append(i)
            scheduled.append((i, chunk))
            budget -= chunk
        if not scheduled and not decodes:
            # nothing can run until something arrives
            self.t = max(self.t, self.clients.next_arrival())
            return
        prefill_tokens = 0
        attention = 0.0
        ending = 0  # prompts whose last chunk this is
        for i, chunk in scheduled:
            prefill_tokens += chunk
            attention += chunk * (computed[i] + chunk / 2)
            ending += computed[i] + chunk >= P[i] + generated[i]
        dt = (
            self.c0
            + self.c_tok * prefill_tokens
            + self.c_dec * decodes**self.gamma
            + self.c_ctx * context
            + self.c_att * attention
            + self.c_chunk * len(scheduled)
            + self.c_prompt * ending
        )
        if self.noise is not None:
            dt *= self._factor()
        start = self.t
        self.t = self._land(start + dt)
        if self.pauses is not None:
            self.t = self.pauses.step_end(start, self.t)
        s = len(self.steps)
        self.steps.append(self.t)
        self.step_decodes.append(decodes)
        self.step_tokens += prefill_tokens + decodes
        self.ctx_dec += decodes
        self.used += decodes
        shared_of = self.shared
        for i, chunk in scheduled:
            before = computed[i]
            after = before + chunk
            share = shared_of[i]
            self.used += (after - min(after, share)) - (before - min(before, share))
            computed[i] = after
            if share:
                self._cache_progress(i, after)
            if after >= P[i] + generated[i]:
                self.prefilling.remove(i)
                generated[i] += 1
                self._start_decoding(i, s)
        used = (self.used + self.evictable_tokens) / rules.kv_cache_tokens
        if used > self.max_used:
            self.max_used = used
        if self.finish_heap and self.finish_heap[0][0] <= s:
            self._finish_decodes(s)

    def result(self) -> Replayed:
        np = self.np
        sent = self.clients.sent
        status = self.status
        cut = (status == NOT_SENT) & np.isfinite(sent)
        status[cut] = CANCELLED
        return Replayed(
            sent_s=sent,
            first_s=self.first_s,
            last_s=self.last_s,
            status=status,
            cached=np.asarray(self.hit, dtype=np.int64),
            first_step=self.first_step,
            steps_s=np.asarray(self.steps),
            segments=self.segments,
            scheduled_s=self.scheduled_s,
            step_decodes=np.asarray(self.step_decodes, dtype=np.int64),
            preemptions=self.preemptions,
            steps=len(self.steps),
            iterations=self.iterations,
            step_tokens=self.step_tokens,
            max_kv_usage=self.max_used,
            max_waiting=self.max_waiting,
            prefix_queries=self.queries,
            prefix_hits=self.hits,
        )
