"""Tune's trials as bench runs: one server per candidate, one run folder per level.

What :mod:`vprof.runs.tuner` needs of servers (a :class:`~vprof.runs.tuner.TrialRunner`):
a candidate's server, started by its first level that is not already completed in the tune
folder (so a resumed tune starts no server it does not need), and the interleaved repeats and
compare's verdict of the final check. Candidates whose server would not start are remembered
(``failures``, kept in ``tune.json``) and not started again.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from vprof.analysis.keys import SummaryKey as K
from vprof.records.rundir import RunState, read_json
from vprof.runs.spec import NOT_STARTED, SKIPPED, Progress, unplaced
from vprof.runs.tuneevidence import Measurement, Verdict
from vprof.runs.tunerequest import Prepared, rate_shape
from vprof.runs.tunespace import Candidate, variant
from vprof.server.logparse import environment_cause, mentions_oom

if TYPE_CHECKING:
    from vprof.registry import Profile
    from vprof.runs.bench import ServerSession
    from vprof.runs.spec import RunOutcome
    from vprof.traffic import TrafficShape

# A level the load generator could not keep up with says nothing of the server (and a plan never
# counts it as met): it is measured again, at most this many times in all.
CLIENT_LIMITED_ATTEMPTS = 3


class BenchTrials:
    """Trials as bench runs in the tune folder: one server per candidate, one run per level.

    Candidates whose server would not start are remembered in ``tune.json`` and not started
    again when the tune is resumed.
    """

    def __init__(self, prepared: Prepared, say: Progress, failures: dict[str, str]) -> None:
        self.prepared = prepared
        self.say = unplaced(say)  # how many benches a tune runs is not known beforehand
        self.failures = failures  # profile identity → why its server did not start
        self.on_failure: Callable[[], None] = lambda: None
        self.opened = 0  # trials opened so far
        # the KV cache each candidate's server had, as vLLM's start-up log said (by identity)
        self.kv_cache_tokens: dict[str, int] = {}

    def profile_of(self, candidate: Candidate) -> Profile:
        p = self.prepared
        return variant(p.base, p.space, candidate)

    def shape(self, rate_rps: float) -> TrafficShape:
        return rate_shape(self.prepared.level_shape, rate_rps)

    def open(self, candidate: Candidate) -> _BenchTrial:
        self.opened += 1
        return _BenchTrial(self, self.profile_of(candidate))

    def measurement(
        self, outcome: RunOutcome, rate_rps: float, wall_s: float, profile: Profile
    ) -> Measurement:
        if outcome.state == NOT_STARTED:
            cause = environment_cause(outcome.reason) or ""
            if not cause:  # the machine's fault is no fact about the candidate: not remembered
                self.failures[profile.identity()] = outcome.reason
                self.on_failure()
            return Measurement(
                rate_rps,
                NOT_STARTED,
                reason=outcome.reason,
                oom=mentions_oom(outcome.reason),
                wall_s=wall_s,
                environment=cause,
            )
        summary = read_json(outcome.run.summary_json, strict=False)
        kv = (outcome.run.meta().get("server") or {}).get("kv_cache_tokens")
        if isinstance(kv, int) and not isinstance(kv, bool) and kv > 0:
            self.kv_cache_tokens[profile.identity()] = kv
        oom = mentions_oom(outcome.reason)
        if not oom and outcome.state == RunState.FAILED:
            try:
                oom = mentions_oom(outcome.run.server_log.read_text(errors="replace"))
            except OSError:
                pass
        return Measurement(
            rate_rps,
            outcome.state,
            summary,
            str(outcome.run.path),
            outcome.reason,
            outcome.repeat,
            oom,
            wall_s,
        )

    def confirm(
        self, candidates: Sequence[Candidate], rate_rps: float, repeats: int
    ) -> dict[Candidate, list[Measurement]]:
        """Each candidate ``repeats`` times at ``rate_rps``, interleaved, as one bench."""
        from vprof.runs.bench import run_bench

        profiles = [self.profile_of(c) for c in candidates]
        spec = replace(
            self.prepared.spec, traffic=(self.shape(rate_rps),), repeat=repeats, order="interleaved"
        )
        started = time.monotonic()
        outcomes = run_bench(profiles, spec, self.say)
        wall = (time.monotonic() - started) / max(1, len(outcomes))
        by_name = {p.name: p for p in profiles}
        measured = []
        serving = None  # a bench keeps one server up across consecutive runs of a profile
        for o in outcomes:
            m = self.measurement(o, rate_rps, wall, by_name[o.profile])
            if o.state not in (SKIPPED, NOT_STARTED):
                m.started_server = o.profile != serving
                serving = o.profile
            measured.append((o.profile, m))
        return {
            c: [m for name, m in measured if name == p.name]
            for c, p in zip(candidates, profiles, strict=True)
        }

    def verdict(
        self, base: Sequence[Measurement], other: Sequence[Measurement], metric: str
    ) -> Verdict:
        """compare's verdict on ``metric`` between two groups of runs (paired over the
        interleaved repeats of the check), with its interval's half-width."""
        from vprof.analysis.compare import compare

        a = [m.run for m in base if m.run and m.summary]
        b = [m.run for m in other if m.run and m.summary]
        if not a or not b:
            return Verdict("not compared: a side has no completed run")
        frame = compare([a, b], metrics=[metric], slo=self.prepared.spec.slo, n_boot=200)
        if not len(frame):
            return Verdict("not compared")
        row = frame.iloc[0]
        low, diff, high = row["ci_low_pct"], row["diff_pct"], row["ci_high_pct"]
        half = (
            max(high - diff, diff - low) if math.isfinite(low) and math.isfinite(high) else math.inf
        )
        return Verdict(str(row["verdict"]), bool(row["significant"]), float(half))


class _BenchTrial:
    """One candidate's server: started by its first level that is not already completed."""

    def __init__(self, trials: BenchTrials, profile: Profile) -> None:
        self.trials = trials
        self.profile = profile
        self.session: ServerSession | None = None
        self.server_started = False

    def measure(self, rate_rps: float) -> Measurement:
        from vprof.runs.bench import ServerSession

        known = self.trials.failures.get(self.profile.identity())
        # (a failure of the machine remembered by an older vprof is tried again)
        if known is not None and self.session is None and environment_cause(known) is None:
            self.trials.say(f"{self.profile.name}: its server did not start before; not retried")
            return Measurement(rate_rps, NOT_STARTED, reason=known, oom=mentions_oom(known))
        if self.session is None:
            self.session = ServerSession(self.profile, self.trials.prepared.spec, self.trials.say)
        started, starts = time.monotonic(), self.session.starts
        for attempt in range(1, CLIENT_LIMITED_ATTEMPTS + 1):
            outcome = self.session.run(self.trials.shape(rate_rps), repeat=attempt)
            measured = self.trials.measurement(
                outcome, rate_rps, time.monotonic() - started, self.profile
            )
            if not (measured.summary or {}).get(K.CLIENT_LIMITED):
                break
            if attempt < CLIENT_LIMITED_ATTEMPTS:
                self.trials.say(
                    f"{self.profile.name} at {rate_rps:g} req/s: the load generator "
                    "could not keep up; measured again"
                )
        self.server_started = self.session.starts > 0
        measured.started_server = self.session.starts > starts
        return measured

    def close(self) -> None:
        if self.session is not None:
            self.session.close()
