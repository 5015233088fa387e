"""Write ``registry/vllm_args.json``: the installed vLLM server's flags, read from its own parser.

The registry validates profiles against this file so that ``vprof`` never has to import vLLM
(which takes seconds). The shipped file describes the vLLM vprof is developed against; re-run
this after upgrading that vLLM, and commit the result::

    .venv/bin/python -m vprof.registry.gen_vllm_args            # writes registry/vllm_args.json
    .venv/bin/python -m vprof.registry.gen_vllm_args --check    # exit 1 if it is stale

When another vLLM is installed, ``vprof.registry.vllm_args`` runs this module once in a child
process (``--out`` a file in vprof's cache) so the registry checks against that vLLM's flags;
it is part of the package for that reason, and imports vLLM only inside ``build``.

Each entry is keyed by the long flag name without dashes and records ``kind`` (bool, flag, int,
int_or_auto, float, str, json), whether it takes a list (``nargs``/``append``), whether ``None``
is accepted, ``choices``, ``default``, ``aliases``, whether a ``--no-`` form exists, and the first
line of its help.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().with_name("vllm_args.json")

# vLLM builds help texts (dataclass docstrings) only when "--help" is on the command line;
# it checks sys.argv while the parser is being built, so set it before importing vLLM.
_HELP_ARGV = ["vllm", "--help"]  # not "serve": that hides --model (it is positional there)

_JSON_TYPES = {"parse_dataclass", "loads", "union_dict_and_str"}


def _unwrap(type_fn: Any) -> tuple[str, bool]:
    """Name of the innermost converter of an argparse ``type`` and whether it accepts None."""
    nullable = False
    name = getattr(type_fn, "__name__", None)
    while name in ("_optional_type", "_parse_type") and type_fn.__closure__:
        nullable = nullable or name == "_optional_type"
        type_fn = type_fn.__closure__[0].cell_contents
        name = getattr(type_fn, "__name__", None)
    return (name or "None"), nullable


def _kind(action: argparse.Action) -> str:
    action_name = type(action).__name__
    if action_name == "BooleanOptionalAction":
        return "bool"
    if action_name in ("_StoreTrueAction", "_StoreFalseAction"):
        return "flag"
    type_name, _ = _unwrap(action.type)
    if type_name in ("int", "human_readable_int"):
        return "int"
    if type_name == "human_readable_int_or_auto":
        return "int_or_auto"
    if type_name == "float":
        return "float"
    if type_name in _JSON_TYPES:
        return "json"
    return "str"


def _jsonable(value: Any) -> Any:
    """The default as JSON data; anything exotic (enums, sets, dataclasses) as its string."""
    if value is argparse.SUPPRESS:
        return None
    if isinstance(value, set):
        value = sorted(value, key=str)
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError):
        return str(value)


def describe(action: argparse.Action) -> dict[str, Any]:
    """One flag's entry for the JSON file."""
    long_names = [s for s in action.option_strings if s.startswith("--")]
    kind = _kind(action)
    negatable = kind == "bool"
    positives = [s for s in long_names if not (negatable and s.startswith("--no-"))]
    _, nullable = _unwrap(action.type)
    choices = None
    if action.choices is not None:
        choices = [str(c) for c in action.choices]
    help_text = (action.help or "").strip()
    # argparse help escapes "%" as "%%"
    first_line = " ".join(help_text.replace("%%", "%").split("\n\n", 1)[0].split())
    return {
        "name": positives[0][2:],
        "kind": kind,
        "list": action.nargs in ("+", "*") or type(action).__name__ == "_AppendAction",
        "append": type(action).__name__ == "_AppendAction",
        "nullable": nullable,
        # "4k" / "1K" style strings are accepted by these converters
        "human_readable": _unwrap(action.type)[0].startswith("human_readable_int"),
        "negatable": negatable,
        "choices": choices,
        "default": _jsonable(action.default),
        "aliases": [
            s.lstrip("-")
            for s in action.option_strings
            if s not in (positives[0],) and not (negatable and s.startswith("--no-"))
        ],
        "help": first_line[:200],
    }


# Where the OpenAI server's parser lives, newest vLLM first (modules moved between releases).
_PARSER_MODULES = ("vllm.entrypoints.launchers.cli_args", "vllm.entrypoints.openai.cli_args")
_FLEXIBLE_PARSER_MODULES = ("vllm.utils.argparse_utils", "vllm.utils")


def _first(modules: tuple[str, ...], attribute: str) -> Any:
    import importlib

    for name in modules:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        if hasattr(module, attribute):
            return getattr(module, attribute)
    raise ImportError(f"no {attribute} in any of {', '.join(modules)}")


def _make_parser() -> tuple[argparse.ArgumentParser, str]:
    """The server's parser and where its ``make_arg_parser`` was found."""
    make_arg_parser = _first(_PARSER_MODULES, "make_arg_parser")
    flexible = _first(_FLEXIBLE_PARSER_MODULES, "FlexibleArgumentParser")
    return make_arg_parser(flexible()), f"{make_arg_parser.__module__}.make_arg_parser"


def build() -> dict[str, Any]:
    """Introspect the installed vLLM's OpenAI server parser and return the JSON document."""
    saved_argv = sys.argv
    sys.argv = _HELP_ARGV
    try:
        import vllm

        parser, source = _make_parser()
    finally:
        sys.argv = saved_argv
    args: dict[str, Any] = {}
    for action in parser._actions:
        if not action.option_strings or isinstance(action, argparse._HelpAction):
            continue
        if not any(s.startswith("--") for s in action.option_strings):
            continue
        entry = describe(action)
        args[entry.pop("name")] = entry
    return {
        "vllm_version": vllm.__version__,
        "source": source,
        "generated_by": "scripts/gen_vllm_args.py",
        "args": dict(sorted(args.items())),
    }


def main(argv: list[str] | None = None) -> int:
    """Write (or with ``--check`` compare) ``registry/vllm_args.json``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--check", action="store_true", help="exit 1 if the file is stale")
    options = parser.parse_args(argv)
    text = json.dumps(build(), indent=1, sort_keys=False) + "\n"
    if options.check:
        current = options.out.read_text() if options.out.exists() else ""
        if current != text:
            print(
                f"{options.out} is stale; run python -m vprof.registry.gen_vllm_args",
                file=sys.stderr,
            )
            return 1
        print(f"{options.out} is up to date")
        return 0
    # write then rename, so a reader never sees half a table
    partial = options.out.with_name(options.out.name + ".partial")
    partial.write_text(text)
    partial.replace(options.out)
    print(f"wrote {len(json.loads(text)['args'])} flags to {options.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
