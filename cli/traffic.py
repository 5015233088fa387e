"""``vprof traffic``: list the traffic shape presets and show one."""

from __future__ import annotations

import click
import yaml

from vprof.cli.options import complete_traffic
from vprof.cli.output import emit, format_option


def _summary(shape) -> str:
    if shape.open_loop:
        return f"{shape.process} {shape.rate_rps:g} req/s, ≤{shape.max_in_flight} in flight"
    if shape.kind == "steady":
        return f"{shape.users} users"
    if shape.kind == "spike":
        return f"{shape.users} users, spike to {shape.spike_users}"
    return f"{shape.start_users}→{shape.users} users"


@click.group(invoke_without_command=True, short_help="List traffic shape presets; `show` one.")
@click.option(
    "--dir",
    "dirs",
    multiple=True,
    type=click.Path(file_okay=False),
    help="Another folder of shape YAML files (repeatable).",
)
@format_option
@click.pass_context
def traffic(ctx: click.Context, dirs: tuple[str, ...], fmt: str) -> None:
    """List traffic shapes: shipped presets, ./traffic/ and $VPROF_TRAFFIC_DIR.

    \b
    Example:
      vprof traffic
      vprof traffic show poisson
    """
    ctx.obj = {"dirs": dirs}
    if ctx.invoked_subcommand is not None:
        return
    from vprof.traffic.load import load_shapes

    rows = [
        {
            "name": s.name,
            "kind": s.kind,
            "load": _summary(s),
            "warmup_s": s.warmup_s,
            "duration_s": s.duration_s,
            "description": s.description,
        }
        for s in load_shapes(dirs).values()
    ]
    emit(rows, fmt)


@traffic.command()
@click.argument("name", shell_complete=complete_traffic)
@click.pass_context
def show(ctx: click.Context, name: str) -> None:
    """Show one shape's settings (a preset name or a YAML path).

    \b
    Example:
      vprof traffic show steady
    """
    from vprof.traffic.load import get_shape

    shape = get_shape(name, ctx.obj["dirs"] if ctx.obj else ())
    data = {k: v for k, v in shape.to_dict().items() if k != "source"}
    click.echo(f"# {shape.source}")
    click.echo(yaml.safe_dump(data, sort_keys=False).rstrip())
    if shape.open_loop:
        click.echo(f"# {shape.expected_requests()} requests scheduled over {shape.total_s:g} s")
