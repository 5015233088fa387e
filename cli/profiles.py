"""Registry commands: ``profiles`` (list, ``show``), ``validate``, ``render`` and ``diff``.

These parse, call ``vprof.registry`` and print; they import nothing heavier than click and yaml.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

import vprof.registry as registry
from vprof.cli.options import (
    complete_profile,
    complete_traffic,
    complete_workload,
    profile_override_options,
    profiles_dir_option,
)
from vprof.cli.output import emit, format_option, json_text
from vprof.registry import Profile, ProfileError
from vprof.registry.overrides import parse_env_args
from vprof.registry.profile import ENTRYPOINTS

# The settings the guide tunes, shown as columns by `vprof profiles`.
KEY_SETTINGS = {
    "max_model_len": "max-model-len",
    "batched_tokens": "max-num-batched-tokens",
    "chunked": "enable-chunked-prefill",
    "prefix_cache": "enable-prefix-caching",
    "eager": "enforce-eager",
    "gpu_mem": "gpu-memory-utilization",
}
UNSET = "(default)"


def _short(where: str, home: str | None = None) -> str:
    """A ``path:line`` origin: its file name alone when it lies in the directory ``home``,
    else relative to the current directory when it is below it."""
    path, sep, line = where.rpartition(":")
    if not sep or not line.isdigit():
        path, line = where, ""
    if home is not None and os.path.dirname(path) == home:
        path = os.path.basename(path)
    elif os.path.isabs(path):
        relative = os.path.relpath(path)
        if not relative.startswith(".."):
            path = relative
    return f"{path}:{line}" if line else path


def _dirs(ctx: click.Context | None, own: Sequence[Path]) -> list[Path]:
    """``--profiles-dir`` given to the group and to the subcommand, in that order."""
    inherited = (ctx.obj or {}).get("profiles_dirs", []) if ctx else []
    return [*inherited, *own]


# ---------------------------------------------------------------------------- profiles


@click.group(invoke_without_command=True, short_help="List shipped and user profiles; `show` one.")
@profiles_dir_option
@format_option
@click.pass_context
def profiles(ctx: click.Context, profiles_dirs: tuple[Path, ...], fmt: str) -> None:
    """List the profiles: name, key settings and what each is for.

    Shipped profiles come first; ./profiles/, $VPROF_PROFILES_DIR and --profiles-dir layer
    over them (a later profile replaces an earlier one of the same name). A blank setting
    means vLLM's default.

    \b
    Example:
      vprof profiles
      vprof profiles --format json
      vprof profiles show chunked-256
    """
    ctx.ensure_object(dict)
    ctx.obj["profiles_dirs"] = list(profiles_dirs)
    if ctx.invoked_subcommand is not None:
        return
    rows = []
    for profile in registry.load_profiles(profiles_dirs).values():
        row: dict[str, Any] = {"name": profile.name}
        for column, flag in KEY_SETTINGS.items():
            row[column] = profile.engine_args.get(flag)
        row.update(
            description=profile.description,
            model=profile.model,
            entrypoint=profile.entrypoint,
            extends=profile.extends,
            source=_short(profile.source),
        )
        rows.append(row)
    columns = None
    if fmt in ("table", "markdown"):  # keep the terminal view narrow; json/csv get everything
        columns = ["name", *KEY_SETTINGS, "description"]
    emit(rows, fmt, columns)


def _setting_rows(profile: Profile) -> list[dict[str, Any]]:
    """One row per resolved setting; its origin by file name when the profile's own directory
    holds it (the heading names that directory), so the table fits a deep checkout too."""
    home = os.path.dirname(profile.source)
    settings: list[tuple[str, Any]] = [
        ("model", profile.model),
        ("entrypoint", profile.entrypoint),
        *profile.engine_args.items(),
        *((f"env.{k}", v) for k, v in profile.env.items()),
    ]
    return [
        {
            "setting": key,
            "value": json.dumps(value) if isinstance(value, (dict, list)) else value,
            "from": _short(profile.origins.get(key, profile.source), home),
        }
        for key, value in settings
    ]


@profiles.command("show")
@click.argument("name", shell_complete=complete_profile)
@profiles_dir_option
@format_option
@click.pass_context
def show(ctx: click.Context, name: str, profiles_dirs: tuple[Path, ...], fmt: str) -> None:
    """Show one profile resolved (after extends) and where each value came from.

    \b
    Example:
      vprof profiles show guide-chunked
      vprof profiles show chunked-256 --format json
    """
    profile = registry.get_profile(name, _dirs(ctx.parent, profiles_dirs))
    notes = registry.validate(profile)
    if fmt == "json":
        data = profile.as_dict()
        data.update(argv=registry.render(profile), identity=profile.identity(), notes=notes)
        click.echo(json_text(data, indent=2))
        return
    if fmt in ("table", "markdown"):
        click.echo(f"{profile.name}: {profile.description}")
        extends = f"extends {profile.extends}, " if profile.extends else ""
        click.echo(f"{extends}defined in {_short(profile.source)}; identity {profile.identity()}")
        click.echo()
    emit(_setting_rows(profile), fmt)
    if fmt in ("table", "markdown"):
        click.echo()
        click.echo("command: " + registry.render_shell(profile))
        for note in notes:
            click.echo("note: " + _short_note(note))


def _short_note(note: str) -> str:
    where, sep, rest = note.partition(": ")
    return f"{_short(where)}{sep}{rest}"


# ---------------------------------------------------------------------------- validate


@click.command(short_help="Check profile files without running anything.")
@click.argument("paths", nargs=-1, type=click.Path(exists=True, path_type=Path))
@profiles_dir_option
@click.option("--quiet", "-q", is_flag=True, help="Print only problems, no notes.")
@click.pass_context
def validate(
    ctx: click.Context, paths: tuple[Path, ...], profiles_dirs: tuple[Path, ...], quiet: bool
) -> None:
    """Check profile files without running anything (no PATH: every profile).

    Catches unknown vLLM flags, wrong types and ranges, and combinations vLLM refuses to
    start with; notes say where the guide's advice is outdated for the installed vLLM. On a
    problem it prints `path:line: key: message` and exits 2. A PATH may extend any profile.

    \b
    Example:
      vprof validate
      vprof validate my-profiles/ ./tuned.yaml
    """
    from vprof.registry.loader import collect_profiles, profile_files
    from vprof.registry.validate import check

    profiles_found, problems = collect_profiles([*profiles_dirs, *paths])
    if paths:
        wanted = {str(f) for path in paths for f in profile_files(path)}
        problems = [p for p in problems if p.path in wanted]
        profiles_found = {n: p for n, p in profiles_found.items() if p.source in wanted}
        if not profiles_found and not problems:
            raise ProfileError("no profile files (*.yaml, *.yml) in " + ", ".join(map(str, paths)))
    shown: set[str] = set()  # a note about the flag table itself comes with every profile
    for profile in profiles_found.values():
        errors, notes = check(profile)
        problems += errors
        if not errors:
            click.echo(f"ok    {profile.name:<24} {_short(profile.source)}")
        if not quiet:
            for note in notes:
                if note not in shown:
                    shown.add(note)
                    click.echo("note: " + _short_note(note))
    for problem in problems:
        if problem.path:
            problem.path = _short(problem.path)
        click.echo(f"Error: {problem.format()}", err=True)
    if problems:
        ctx.exit(2)


# ---------------------------------------------------------------------------- render


RENDER_FORMATS = ("shell", "argv", "docker", "k8s")


@click.command("render", short_help="Render a profile as a command, argv, docker or k8s.")
@click.argument("name", shell_complete=complete_profile)
@click.option(
    "--format", "fmt", type=click.Choice(RENDER_FORMATS), default="shell", show_default=True
)
@profile_override_options
@click.option("--env", "env_args", multiple=True, metavar="NAME=VALUE", help="Set an env var.")
@click.option("--entrypoint", type=click.Choice(ENTRYPOINTS), help="Launcher to render.")
@click.option("--python", default="python3", show_default=True, help="Python for module forms.")
@click.option(
    "--replicas",
    type=click.IntRange(0, 100_000),
    default=1,
    show_default=True,
    help="Replicas in the Kubernetes Deployment.",
)
@click.option("--image", default=None, help="Container image (docker, k8s).")
@click.option(
    "--load-workers",
    type=click.IntRange(1, 10_000),
    default=None,
    help="k8s: add the load generator: a Job running vprof bench against the server's "
    "Service, waiting for this many Locust workers from a Deployment beside it.",
)
@click.option(
    "--load-image",
    default=None,
    help="With --load-workers: an image with vprof installed. [default: vprof:latest]",
)
@click.option(
    "--workload",
    default=None,
    shell_complete=complete_workload,
    help="With --load-workers: the bench's workload preset. [default: chat]",
)
@click.option(
    "--traffic",
    multiple=True,
    shell_complete=complete_traffic,
    help="With --load-workers: the bench's traffic shape preset (repeatable). [default: steady]",
)
@profiles_dir_option
def render(
    name: str,
    fmt: str,
    model: str | None,
    port: int | None,
    set_args: tuple[str, ...],
    env_args: tuple[str, ...],
    entrypoint: str | None,
    python: str,
    replicas: int,
    image: str | None,
    load_workers: int | None,
    load_image: str | None,
    workload: str | None,
    traffic: tuple[str, ...],
    profiles_dirs: tuple[Path, ...],
) -> None:
    """Print a profile's launch command: shell line, argv JSON, docker run, or Kubernetes.

    The profile is validated first (with the overrides applied); nothing is executed.

    \b
    Example:
      vprof render chunked-256
      vprof render chunked-256 --format argv --model ./my-model --port 8100
      vprof render baseline --set max-num-seqs=64 --set enable-prefix-caching=null
      vprof render chunked-1024 --format k8s --replicas 4 | kubectl apply -f -
      vprof render chunked-1024 --format k8s --load-workers 4 --traffic poisson | kubectl apply -f -
    """
    if fmt != "k8s" and load_workers is not None:
        raise click.UsageError("--load-workers renders Kubernetes objects: add --format k8s")
    if load_workers is None and (load_image or workload or traffic):
        raise click.UsageError("--load-image, --workload and --traffic need --load-workers")
    profile = registry.resolve_profile(
        name,
        profiles_dirs,
        model=model,
        port=port,
        set_args=set_args,
        entrypoint=entrypoint,
        env=parse_env_args(env_args),
    )
    registry.validate(profile)
    image_kw = {"image": image} if image else {}
    if fmt == "argv":
        click.echo(json_text(registry.render(profile, python=python)))
    elif fmt == "docker":
        click.echo(registry.render_docker(profile, **image_kw))
    elif fmt == "k8s":
        click.echo(registry.render_k8s(profile, replicas=replicas, **image_kw), nl=False)
        if load_workers is not None:
            load = registry.render_k8s_load(
                profile,
                workers=load_workers,
                **({"image": load_image} if load_image else {}),
                **({"workload": workload} if workload else {}),
                **({"traffic": traffic} if traffic else {}),
            )
            click.echo("---\n" + load, nl=False)
    else:
        click.echo(registry.render_shell(profile, python=python))


# ---------------------------------------------------------------------------- diff


def _settings(profile: Profile) -> dict[str, Any]:
    flat: dict[str, Any] = {"model": profile.model, "entrypoint": profile.entrypoint}
    flat.update(profile.engine_args)
    flat.update({f"env.{k}": v for k, v in profile.env.items()})
    return flat


@click.command("diff", short_help="Show what differs between two profiles.")
@click.argument("first", shell_complete=complete_profile)
@click.argument("second", shell_complete=complete_profile)
@profiles_dir_option
@format_option
def diff(first: str, second: str, profiles_dirs: tuple[Path, ...], fmt: str) -> None:
    """Show the settings that differ between two profiles (after extends).

    \b
    Example:
      vprof diff baseline chunked-256
      vprof diff guide-prefix-caching guide-chunked --format markdown
    """
    a = registry.get_profile(first, profiles_dirs)
    b = registry.get_profile(second, profiles_dirs)
    settings_a, settings_b = _settings(a), _settings(b)
    keys = list(dict.fromkeys([*settings_a, *settings_b]))
    rows = [
        {"setting": key, a.name: settings_a.get(key, UNSET), b.name: settings_b.get(key, UNSET)}
        for key in keys
        if settings_a.get(key, UNSET) != settings_b.get(key, UNSET)
    ]
    if not rows:
        click.echo(f"{a.name} and {b.name} have the same settings")
        return
    if a.name == b.name:  # the same name from two layers: keep both columns apart
        for row in rows:
            row["first"], row["second"] = row.pop(a.name), settings_b.get(row["setting"], UNSET)
    emit(rows, fmt)
