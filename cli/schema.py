"""``vprof schema``: the JSON Schema of profile, workload or traffic files, for editors."""

from __future__ import annotations

from pathlib import Path

import click

KINDS = ("profile", "workload", "traffic")


def _schema(kind: str) -> dict:
    if kind == "profile":
        from vprof.registry.fileschema import profile_schema

        return profile_schema()
    if kind == "workload":
        from vprof.workloads.fileschema import workload_schema

        return workload_schema()
    from vprof.traffic.fileschema import traffic_schema

    return traffic_schema()


@click.command(short_help="Write the JSON Schema of profile, workload or traffic files.")
@click.argument("kind", type=click.Choice(KINDS))
@click.option(
    "-o",
    "--out",
    type=click.Path(path_type=Path),
    help="Write it here instead of to stdout (a folder: vprof-KIND.schema.json in it).",
)
@click.option("--force", is_flag=True, help="Replace --out even when vprof did not write it.")
def schema(kind: str, out: Path | None, force: bool) -> None:
    """Write the JSON Schema of KIND files (profile, workload or traffic), built from the rules
    vprof checks them with (for profiles: the installed vLLM's flags). An editor that reads
    `# yaml-language-server: $schema=FILE` then completes keys and engine flags, shows vLLM's
    help for each flag and marks mistakes as you type; `vprof validate` still checks what a
    schema cannot (combinations of flags, files that must exist).

    \b
    Example:
      vprof schema profile -o profiles/
      # then, first line of profiles/my-profile.yaml:
      # yaml-language-server: $schema=vprof-profile.schema.json
    """
    import json

    text = json.dumps(_schema(kind), indent=1, ensure_ascii=False) + "\n"
    if out is None:
        click.echo(text, nl=False)
        return
    from vprof.records.outputs import SCHEMA, claim_output, write_output

    if out.is_dir():
        out = out / f"vprof-{kind}.schema.json"
    write_output(claim_output(out, SCHEMA, force=force, key="--out"), text, key="--out")
    click.echo(
        f"wrote {out}; a {kind} file in that folder uses it with the first line\n"
        f"# yaml-language-server: $schema={out.name}",
        err=True,
    )
