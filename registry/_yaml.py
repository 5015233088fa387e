"""YAML reading that remembers the line of every mapping key.

PyYAML's plain ``safe_load`` forgets where values came from and silently keeps the last of two
duplicate keys; profiles need both, so errors can say ``file:line: key``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from vprof.common.errors import ProfileError

_BaseLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class LineDict(dict):
    """A dict from YAML that also maps each key to its 1-based line in the file."""

    lines: dict[Any, int]

    def __init__(self) -> None:
        super().__init__()
        self.lines = {}


class _DuplicateKey(Exception):
    def __init__(self, key: Any, line: int, first_line: int) -> None:
        super().__init__(key)
        self.key = key
        self.line = line
        self.first_line = first_line


class _LineLoader(_BaseLoader):  # type: ignore[misc, valid-type]
    pass


def _construct_mapping(loader: _LineLoader, node: yaml.MappingNode) -> LineDict:
    loader.flatten_mapping(node)
    result = LineDict()
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        line = key_node.start_mark.line + 1
        if not isinstance(key, (str, int, float, bool)) and key is not None:
            raise yaml.constructor.ConstructorError(
                None, None, "a mapping key must be a plain value", key_node.start_mark
            )
        if key in result:
            raise _DuplicateKey(key, line, result.lines[key])
        result[key] = loader.construct_object(value_node, deep=True)
        result.lines[key] = line
    return result


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def load_yaml(text: str, path: str) -> Any:
    """Parse ``text`` (the contents of ``path``); mappings come back as ``LineDict``.

    Raises ``ProfileError`` naming the file and line for malformed YAML and duplicate keys.
    """
    try:
        return yaml.load(text, Loader=_LineLoader)  # noqa: S506 - a SafeLoader subclass
    except _DuplicateKey as exc:
        raise ProfileError(
            f"duplicate key (first set on line {exc.first_line})",
            path=path,
            line=exc.line,
            key=str(exc.key),
        ) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = " ".join(str(exc.problem or exc.context or "malformed YAML").split())
        raise ProfileError(
            f"malformed YAML: {problem}",
            path=path,
            line=(mark.line + 1) if mark else None,
            hint="check indentation and quoting",
        ) from None
    except yaml.YAMLError as exc:
        raise ProfileError(f"malformed YAML: {exc}", path=path) from None


def read_yaml_file(path: Path) -> Any:
    """Read and parse one YAML file; unreadable files become ``ProfileError`` too."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ProfileError(f"cannot read profile file: {exc}", path=str(path)) from None
    return load_yaml(text, str(path))
