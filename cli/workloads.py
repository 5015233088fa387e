"""``vprof workloads``: list workload presets, ``show`` one with a sample of planned lengths."""

from __future__ import annotations

import click

from vprof.cli.options import complete_workload
from vprof.cli.output import emit, format_option

_dirs_option = click.option(
    "--dir",
    "extra_dirs",
    multiple=True,
    type=click.Path(file_okay=False),
    help="Another folder of workload YAML files (repeatable).",
)


@click.group(invoke_without_command=True, short_help="List workload presets; `show` one.")
@_dirs_option
@format_option
@click.pass_context
def workloads(ctx: click.Context, extra_dirs: tuple[str, ...], fmt: str) -> None:
    """List workloads: shipped presets, ./workloads/, $VPROF_WORKLOADS_DIR and --dir folders.

    \b
    Example:
      vprof workloads
      vprof workloads --format json
      vprof workloads show rag-shared-prefix -n 5
    """
    if ctx.invoked_subcommand is not None:
        ctx.obj = {"extra_dirs": extra_dirs}
        return
    from vprof.workloads.loading import load_workloads

    rows = []
    for name, w in sorted(load_workloads(extra_dirs).items()):
        prefix = w.prefix
        rows.append(
            {
                "name": name,
                "endpoint": w.endpoint,
                "prompt_tokens": w.prompt_tokens.describe()
                if w.dataset is None
                else f"{len(w.dataset.prompts)} real prompts",
                "output_tokens": w.output_tokens.describe()
                + (" (fixed)" if w.fixed_output else ""),
                "prefix": f"{prefix.groups}x{prefix.length_tokens} {prefix.popularity} "
                f"share {prefix.share:g}"
                if prefix
                else "",
                "turns": w.conversation.turns.describe()
                if w.conversation
                else (f"agent {w.agent.steps.describe()}" if w.agent else ""),
                "max_tokens": w.max_request_tokens(),
                "description": w.description,
            }
        )
    emit(rows, fmt)


@workloads.command("show")
@click.argument("name", shell_complete=complete_workload)
@click.option(
    "-n",
    "--samples",
    type=click.IntRange(0, 100_000),
    default=8,
    show_default=True,
    help="Planned requests to show.",
)
@click.option(
    "--tokenizer",
    "tokenizer_path",
    default=None,
    help="Model folder or tokenizer.json to build real prompts with [default: the tiny model].",
)
@click.option("--seed", type=int, default=None, help="Override the workload's seed.")
@click.option("--salt", default="", help="Per-run salt (changes the text, not the lengths).")
@_dirs_option
@format_option
@click.pass_context
def show(
    ctx: click.Context,
    name: str,
    samples: int,
    tokenizer_path: str | None,
    seed: int | None,
    salt: str,
    extra_dirs: tuple[str, ...],
    fmt: str,
) -> None:
    """Print a workload as resolved YAML and the lengths of its first planned requests.

    NAME is a workload name or a path to a YAML file. Prompts are built with the tokenizer and
    measured, so the table shows the exact token counts a run would send.

    \b
    Example:
      vprof workloads show chat
      vprof workloads show ./my-workload.yaml -n 20 --salt run-2
      vprof workloads show multi-turn --tokenizer ~/models/llama --format csv
    """
    import yaml

    from vprof.workloads.loading import get_workload
    from vprof.workloads.synthesis import RequestSynthesizer, load_tokenizer

    dirs = tuple((ctx.obj or {}).get("extra_dirs", ())) + extra_dirs
    workload = get_workload(name, dirs)
    if tokenizer_path is None:
        from vprof.tinymodel.build import ensure_tiny_model

        tokenizer_path = str(ensure_tiny_model())
    tokenizer = load_tokenizer(tokenizer_path)
    synth = RequestSynthesizer(workload, tokenizer, seed=seed, salt=salt)
    rows: list[dict[str, object]] = []
    if workload.sessions:
        from vprof.workloads.sessions import start_session

        for cid in range(samples):
            session = start_session(synth, cid)
            plans = session.next_step(None)
            while plans:
                rows.extend(_row(plan) for plan in plans)
                # Stand-in replies of the requested length, so later steps show real growth.
                replies = [tokenizer.decode(list(range(3, 3 + p.max_tokens))) for p in plans]
                plans = session.next_step(replies)
    else:
        rows = [_row(synth.plan(i)) for i in range(samples)]
    if fmt == "table":
        click.echo(yaml.safe_dump(workload.to_dict(), sort_keys=False).rstrip())
        if workload.source:
            click.echo(f"# from {workload.source}")
        click.echo(f"# max prompt+output tokens: {workload.max_request_tokens()}")
        click.echo("")
    emit(rows, fmt)


def _row(plan) -> dict[str, object]:  # plan: RequestPlan
    return {
        "index": plan.index,
        "turn": plan.turn if plan.conversation_id >= 0 else "",
        "call": plan.branch if plan.branch >= 0 else "",
        "prefix_group": plan.prefix_group,
        "prompt_tokens": plan.expected_prompt_tokens,
        "max_tokens": plan.max_tokens,
        "fixed": plan.ignore_eos,
        "text": (plan.prompt if plan.prompt is not None else plan.messages[-1]["content"])[:40],
    }
