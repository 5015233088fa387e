"""Write ``registry/vllm_args.json``: the installed vLLM server's flags, read from its own parser.

The registry validates profiles against this file so that ``vprof`` never has to import vLLM
(which takes seconds). Re-run it after upgrading vLLM, and commit the result::

    .venv/bin/python scripts/gen_vllm_args.py            # writes registry/vllm_args.json
    .venv/bin/python scripts/gen_vllm_args.py --check    # exit 1 if the committed file is stale

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

OUT = Path(__file__).resolve().parent.parent / "registry" / "vllm_args.json"

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


def build() -> dict[str, Any]:
    """Introspect the installed vLLM's OpenAI server parser and return the JSON document."""
    saved_argv = sys.argv
    sys.argv = _HELP_ARGV
    try:
        import vllm
        from vllm.entrypoints.launchers.cli_args import make_arg_parser
        from vllm.utils.argparse_utils import FlexibleArgumentParser

        parser = make_arg_parser(FlexibleArgumentParser())
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
        "source": "vllm.entrypoints.launchers.cli_args.make_arg_parser",
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
            print(f"{options.out} is stale; run scripts/gen_vllm_args.py", file=sys.stderr)
            return 1
        print(f"{options.out} is up to date")
        return 0
    options.out.write_text(text)
    print(f"wrote {len(json.loads(text)['args'])} flags to {options.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
