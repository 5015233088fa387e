"""How much wall time does each level of `vprof sweep load` or `vprof tune` take beyond its
warm-up and measured time, and where does it go? (target: at most 2 s more)

Starts ``vprof emulate`` with long answers (``--itl-ms 50``, 256 output tokens: about 13 s a
request) and runs ``vprof sweep load`` against it (``--url``) over a few open-loop rates of a
short shape (``--warmup-s`` + ``--measure-s``). Each level's wall time is taken from its run
folder: from the moment the run folder was made (``run.json``'s ``created_at``) to the moment
the next one was (the last: to the command's end), so it holds the load generator's start,
the shape, the end of the test, the summary and the wait before the next level. Prints each
level's wall time, its excess over warm-up + measured time, and the requests counted
``cancelled`` (cut off at the level's end).

``--command tune`` runs a small ``vprof tune`` instead (its library call, with the trials sent
to the emulator as ``--url`` would): one candidate, levels climbing from ``--start-rps``.

Each level's wall time is split into phases read from its run folder's own timestamps:
``start`` (run folder made → Locust's test began: the load generator's process start and
imports), ``shape`` (Locust's test: lead, warm-up, measured time and the cut), ``exit`` (the
test's end → Locust wrote its last file), ``after`` (→ the run's state written: the sampler's
and the probe's stop, the wait for an idle server), ``summary`` (→ summary written) and
``between`` (→ the next level's run folder: the tune's or sweep's own work between levels).

    .venv/bin/python benchmarks/level_walltime.py
    .venv/bin/python benchmarks/level_walltime.py --levels 2,4 --measure-s 10
    .venv/bin/python benchmarks/level_walltime.py --command tune --warmup-s 1 --measure-s 10 \
        --tokens 40
    .venv/bin/python benchmarks/level_walltime.py --folder TUNE_OR_SWEEP_DIR --warmup-s 1 \
        --measure-s 10
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from measure import running_emulator


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--levels", default="2,4,6", help="request rates, req/s")
    parser.add_argument("--warmup-s", type=float, default=5.0)
    parser.add_argument("--measure-s", type=float, default=30.0)
    parser.add_argument("--itl-ms", type=float, default=50.0)
    parser.add_argument("--tokens", type=int, default=256, help="output tokens per request")
    parser.add_argument("--command", choices=("sweep", "tune"), default="sweep")
    parser.add_argument("--slo", default="ttft_p95=2000ms", help="tune: its SLO")
    parser.add_argument("--start-rps", type=float, default=2.0, help="tune: its first level")
    parser.add_argument("--max-rps", type=float, default=8.0, help="tune: its highest level")
    parser.add_argument(
        "--folder",
        type=Path,
        help="run nothing: the phases of the levels in this sweep's or tune's folder (e.g. a "
        "real vLLM run; give its --warmup-s and --measure-s)",
    )
    args = parser.parse_args()
    if args.folder is not None:
        print(f"levels in {args.folder}")
        print_levels(args.folder, args.warmup_s + args.measure_s, None, None)
        return

    work = Path(tempfile.mkdtemp(prefix="vprof-levels-"))
    workload = work / "long-answers.yaml"
    workload.write_text(
        "description: short prompts, long answers\nendpoint: completions\nseed: 0\n"
        f"prompt_tokens: 64\noutput_tokens: {args.tokens}\nfixed_output: true\n"
    )
    traffic = work / "short-levels.yaml"
    traffic.write_text(
        "description: short open-loop levels\nkind: open-loop\nprocess: poisson\n"
        f"rate_rps: 2\nmax_in_flight: 512\nduration_s: {args.measure_s:g}\n"
        f"warmup_s: {args.warmup_s:g}\n"
    )
    port = free_port()
    emulate = ["--itl-ms", str(args.itl_ms), "--ttft-ms", "50", "--max-model-len", "4096"]
    out = work / "runs"
    with running_emulator(port, emulate):
        started = time.time()
        if args.command == "tune":
            run_tune(args, f"http://127.0.0.1:{port}", workload, out)
        else:
            run_sweep(args, f"http://127.0.0.1:{port}", workload, traffic, out)
        ended = time.time()
    budget = args.warmup_s + args.measure_s
    what = f"levels {args.levels} req/s" if args.command == "sweep" else "tune"
    print(
        f"vprof {args.command}, {what}, {args.tokens} tokens at {args.itl_ms:g} ms"
        f" (~{args.tokens * args.itl_ms / 1000:.0f} s an answer); warm-up + measured = "
        f"{budget:g} s a level; {ended - started:.1f} s in all"
    )
    print_levels(out, budget, started, ended)


def print_levels(out: Path, budget: float, started: float | None, ended: float | None) -> None:
    """Each level's wall time and phases; the last ends at ``ended`` (None: its summary)."""
    folders = [p.parent for p in out.rglob("run.json") if (p.parent / "summary.json").exists()]
    runs = sorted((json.loads((p / "run.json").read_text())["created_at"], p) for p in folders)
    if not runs:
        raise SystemExit(f"no summarised run folder under {out}")
    print(f"  {'level':44} {'wall':>6} {'beyond':>6}  " + " ".join(f"{p:>7}" for p in PHASES))
    excess = []
    for i, (created, path) in enumerate(runs):
        if i + 1 < len(runs):
            until = runs[i + 1][0]
        else:
            until = ended if ended is not None else (path / "summary.json").stat().st_mtime
        summary = json.loads((path / "summary.json").read_text())
        phases = level_phases(path, created, until)
        excess.append(until - created - budget)
        print(
            f"  {path.name[-44:]:44} {until - created:6.1f} {until - created - budget:+6.1f}  "
            + " ".join(f"{phases[p]:7.2f}" for p in PHASES)
            + f"  completed {summary.get('completed')}, cancelled {summary.get('cancelled')}"
        )
    if started is not None:
        print(f"  (first level started {runs[0][0] - started:.1f} s after the command)")
    print(
        f"  beyond warm-up + measured: max {max(excess):+.1f} s, mean "
        f"{sum(excess) / len(excess):+.1f} s over {len(excess)} levels ('between' holds a "
        "server's start where a tune moves to another candidate)"
    )


PHASES = ("start", "shape", "exit", "after", "summary", "between")


def level_phases(path: Path, created: float, until: float) -> dict[str, float]:
    """Seconds of each phase of one level, from its run folder's timestamps (see above)."""
    locust = json.loads((path / "locust.json").read_text())
    marks = [
        created,
        float(locust["started_at"]),
        float(locust["stopped_at"]),
        max((path / f).stat().st_mtime for f in ("locust.json", "records.arrow")),
        (path / "status.json").stat().st_mtime,
        (path / "summary.json").stat().st_mtime,
        until,
    ]
    return {name: b - a for name, a, b in zip(PHASES, marks[:-1], marks[1:], strict=True)}


def run_sweep(args: argparse.Namespace, url: str, workload: Path, traffic: Path, out: Path):
    command = [
        sys.executable,
        "-m",
        "vprof.cli.main",
        "sweep",
        "load",
        "emulated",
        "--url",
        url,
        "--traffic",
        str(traffic),
        "--workload",
        str(workload),
        "--levels",
        args.levels,
        "--out",
        str(out),
    ]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode:
        print(done.stdout[-2000:], done.stderr[-2000:])
        raise SystemExit(f"vprof sweep load exited with {done.returncode}")


def run_tune(args: argparse.Namespace, url: str, workload: Path, out: Path) -> None:
    """One candidate's climb, as ``vprof tune`` runs it, its trials sent to ``url``."""
    from dataclasses import replace

    import vprof.server.host as host
    from vprof.runs.tune import run_prepared
    from vprof.runs.tunerequest import TuneRequest, prepare
    from vprof.server.host import HostEngine

    # no server is started (the trials go to the emulator): the search space needs no vLLM
    host.detect_engine = lambda: HostEngine("vllm", "emulated", False, False)  # type: ignore[assignment]

    request = TuneRequest(
        profile="chunked-512",
        slo=args.slo,
        workload=str(workload),
        space=("max-num-batched-tokens=512",),  # one candidate: its levels follow each other
        budget_trials=1,
        level_s=args.measure_s,
        warmup_s=args.warmup_s,
        start_rps=args.start_rps,
        max_rps=args.max_rps,
        repeat=1,
        out_dir=out,
        report=False,
        set_args=("max-model-len=4096",),
    )
    prepared = prepare(request)
    prepared = replace(prepared, spec=replace(prepared.spec, url=url))
    run_prepared(prepared, lambda line: None)


if __name__ == "__main__":
    main()
