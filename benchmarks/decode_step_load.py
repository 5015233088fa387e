"""Do decode-only steps slow down with the host's load? (issue 23; analysis of a recording)

Reads the run folders ``forecast_accuracy.py --record`` wrote (real vLLM, CPU build) and, per
run, takes the steps seen in the token times exactly as the fit does
(:func:`vprof.forecast.stepfit._step_gaps`: every gap between two tokens of a decoding request
is one step, the other requests' tokens say how many decodes it held), keeping the steps that
computed no prompt, each counted once. Printed:

- per run, the delivered token rate, the host probe's median ``work_ms`` (its fixed piece of
  work; a busier host takes longer) and the mean decode-only step by the decodes it held;
- on the fitting runs (``chat`` at 2, 4, 6 req/s) three forms by the fit's BIC rule: the
  step's constant + a cost per decode; the same + a cost per 1000 tokens/s the run delivered
  (a host share taken by per-token work elsewhere, additive); and the same divided by
  (1 − c × tokens/s) (multiplicative), c on a grid;
- the same with a cost per decode that flattens with the batch (decodes ** γ);
- every run's mean measured step against each form's, fitted on the fitting runs only.

    python benchmarks/decode_step_load.py --runs /work/exp/fc2
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

FIT = (("chat", 2.0), ("chat", 4.0), ("chat", 6.0))
BINS = ((1, 2), (3, 5), (6, 10), (11, 20), (21, 40), (41, 80))
EVIDENCE = 10.0  # as vprof.forecast.stepfit.EVIDENCE


def _load(runs: Path) -> dict[tuple[str, float], dict[str, Any]]:
    import numpy as np

    from vprof.analysis.run import summaries_of
    from vprof.forecast.observed import load_observed
    from vprof.forecast.stepfit import _step_gaps
    from vprof.records import expand_runs

    out: dict[tuple[str, float], dict[str, Any]] = {}
    for folder in sorted(p for p in runs.iterdir() if p.is_dir()):
        for path in expand_runs([folder]):
            (summary,) = summaries_of(path)
            rate = summary.get("offered_load")
            if summary.get("state") != "completed" or not isinstance(rate, (int, float)):
                continue
            o = load_observed(path)
            if o.token_s is None:
                continue
            a, y, w = _step_gaps(o)
            alone = a[:, 1] == 0  # no prompt computed in the step
            m = o.measured
            ok = m["ok"] & np.isfinite(m["first_s"]) & np.isfinite(m["last_s"])
            span = float(np.max(m["last_s"][ok]) - np.min(m["first_s"][ok]))
            tokens = sum(t.size for t in o.token_s)
            work = []
            host = Path(path) / "host.jsonl"
            if host.is_file():
                work = [json.loads(line)["work_ms"] for line in host.read_text().splitlines()]
            out[(folder.name, float(rate))] = {
                "d": a[alone, 2],
                "y": y[alone],
                "w": w[alone],
                "tps": tokens / span,
                "work_ms": float(np.median(work)) if work else math.nan,
            }
    return out


def _wls(x: Any, y: Any, w: Any) -> tuple[Any, float]:
    import numpy as np

    r = np.sqrt(w)
    c = np.linalg.lstsq(x * r[:, None], y * r, rcond=None)[0]
    e = (y - x @ c) * r
    return c, float(e @ e)


def main() -> None:
    import numpy as np

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=Path, required=True)
    runs = _load(parser.parse_args().runs)
    fit = [runs[k] for k in FIT if k in runs]
    if len(fit) < 2:
        raise SystemExit("the fitting runs (chat at 2, 4, 6 req/s) are not in --runs")

    print("mean decode-only step (ms) by the decodes it held (steps, each counted once)")
    head = "".join(f"{f'{lo}-{hi}':>13}" for lo, hi in BINS)
    print(f"{'run':24}{'tok/s':>7}{'work_ms':>8}{head}")
    for (workload, rate), r in sorted(runs.items()):
        cells = ""
        for lo, hi in BINS:
            s = (r["d"] >= lo) & (r["d"] <= hi)
            n = float(r["w"][s].sum())
            mean = float(np.sum(r["w"][s] * r["y"][s]) / n) if n > 20 else math.nan
            cells += f"{mean:7.2f} ({n:3.0f})" if n > 20 else f"{'':13}"
        print(f"{f'{workload}@{rate:g}':24}{r['tps']:7.0f}{r['work_ms']:8.2f}{cells}")

    d = np.concatenate([r["d"] for r in fit])
    y = np.concatenate([r["y"] for r in fit])
    w = np.concatenate([r["w"] for r in fit])
    tps = np.concatenate([np.full(r["d"].size, r["tps"] / 1000.0) for r in fit])
    n = float(w.sum())

    def bic(sse: float, k: int) -> float:
        return n * math.log(sse / n) + k * math.log(n)

    ones = np.ones_like(d)
    forms: dict[str, tuple[Any, float, float]] = {}  # name: (coefficients, c, BIC)
    c, sse = _wls(np.column_stack([ones, d]), y, w)
    forms["linear"] = (c, 0.0, bic(sse, 2))
    c, sse = _wls(np.column_stack([ones, d, tps]), y, w)
    forms["+ h·tok/s"] = (c, 0.0, bic(sse, 3))
    best = None
    for share in np.linspace(0.0, 0.5, 101):
        scale = 1.0 - share * tps
        c, sse = _wls(np.column_stack([ones, d]) / scale[:, None], y, w)
        if best is None or sse < best[1]:
            best = (c, sse, float(share))
    assert best is not None
    forms["/(1 − c·tok/s)"] = (best[0], best[2], bic(best[1], 3))
    gammas: dict[float, Any] = {}
    for gamma in (0.9, 0.8, 0.7, 0.6, 0.5):
        c, sse = _wls(np.column_stack([ones, d**gamma]), y, w)
        gammas[gamma] = c
        forms[f"decodes^{gamma:g}"] = (c, 0.0, bic(sse, 3))

    plain = forms["linear"][2]
    print(f"\nfitted on chat at 2, 4, 6 req/s ({n:.0f} decode-only steps; BIC against linear,")
    print(f"a term joins when {EVIDENCE:g} points lower)")
    for name, (c, share, b) in forms.items():
        extra = f", c = {share:.3f} per 1000 tok/s" if "1 −" in name else ""
        terms = ", ".join(f"{v:.3g}" for v in c)
        print(f"  {name:16} coefficients {terms}{extra}: BIC {b - plain:+.1f}")

    print("\nmean step (ms): measured, then each form fitted on the fitting runs")
    print(f"{'run':24}{'measured':>9}{'linear':>8}{'+h·tps':>8}{'decodes^0.7':>12}")
    for (workload, rate), r in sorted(runs.items()):
        wm = float(np.sum(r["w"] * r["y"]) / np.sum(r["w"]))
        c1 = forms["linear"][0]
        ch = forms["+ h·tok/s"][0]
        cg = gammas[0.7]
        p1 = c1[0] + c1[1] * r["d"]
        ph = ch[0] + ch[1] * r["d"] + ch[2] * r["tps"] / 1000.0
        pg = cg[0] + cg[1] * r["d"] ** 0.7
        got = [float(np.sum(r["w"] * p) / np.sum(r["w"])) for p in (p1, ph, pg)]
        print(f"{f'{workload}@{rate:g}':24}{wm:9.2f}{got[0]:8.2f}{got[1]:8.2f}{got[2]:12.2f}")


if __name__ == "__main__":
    main()
