"""YAML reading that remembers the line of every mapping key.

PyYAML's plain ``safe_load`` forgets where values came from and silently keeps the last of two
duplicate keys; profiles, workloads and traffic shapes need both, so errors can say
``file:line: key``. Values come back as plain dicts, lists and scalars; ``YamlDoc.line`` gives
the line of any key path. Uses libyaml's C loader where available.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from vprof.common.errors import VprofError

_BaseLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

KeyPath = tuple[str, ...]


@dataclass(frozen=True)
class YamlDoc:
    """One parsed YAML document and where each of its mapping keys was written.

    ``lines`` maps a key path (each key as ``str``; list items by their index) to its 1-based
    line; ``()`` is the line the document's top-level value starts on.
    """

    path: str
    data: Any
    lines: dict[KeyPath, int] = field(default_factory=dict)

    def line(self, *keys: Any) -> int | None:
        """The line of ``keys`` (e.g. ``line("engine_args", "port")``), or None if not written."""
        return self.lines.get(tuple(str(k) for k in keys))


class _DuplicateKey(Exception):
    def __init__(self, key: Any, line: int, first_line: int) -> None:
        super().__init__(key)
        self.key = key
        self.line = line
        self.first_line = first_line


class _LineLoader(_BaseLoader):  # type: ignore[misc, valid-type]
    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.key_lines: dict[int, dict[Any, int]] = {}  # id(mapping) -> {key: line}


def _construct_mapping(loader: _LineLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    loader.flatten_mapping(node)
    result: dict[Any, Any] = {}
    lines: dict[Any, int] = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        line = key_node.start_mark.line + 1
        if not isinstance(key, (str, int, float, bool)) and key is not None:
            raise yaml.constructor.ConstructorError(
                None, None, "a mapping key must be a plain value", key_node.start_mark
            )
        if key in result:
            raise _DuplicateKey(key, line, lines[key])
        result[key] = loader.construct_object(value_node, deep=True)
        lines[key] = line
    loader.key_lines[id(result)] = lines
    return result


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _collect(
    value: Any,
    path: KeyPath,
    tables: dict[int, dict[Any, int]],
    out: dict[KeyPath, int],
    within: frozenset[int] = frozenset(),
) -> None:
    """Record the line of every key below ``value`` under its path (aliases under each path)."""
    if id(value) in within:  # a recursive alias
        return
    if isinstance(value, dict):
        items: Any = value.items()
        table = tables.get(id(value), {})
    elif isinstance(value, list):
        items, table = enumerate(value), {}
    else:
        return
    within |= {id(value)}
    for key, item in items:
        sub = path + (str(key),)
        if key in table:
            out.setdefault(sub, table[key])
        _collect(item, sub, tables, out, within)


def parse_yaml(
    text: str,
    path: str,
    error: type[VprofError] = VprofError,
    *,
    invalid: str = "malformed YAML",
) -> YamlDoc:
    """Parse ``text`` (the contents of ``path``).

    Malformed YAML (``"<invalid>: <problem>"``) and duplicate keys raise ``error`` naming the
    file, the line and, for a duplicate, the key.
    """
    loader = _LineLoader(text)
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except _DuplicateKey as exc:
        raise error(
            f"duplicate key (first set on line {exc.first_line})",
            path=path,
            line=exc.line,
            key=str(exc.key),
        ) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = " ".join(str(exc.problem or exc.context or "malformed YAML").split())
        raise error(
            f"{invalid}: {problem}",
            path=path,
            line=(mark.line + 1) if mark else None,
            hint="check indentation and quoting",
        ) from None
    except yaml.YAMLError as exc:
        raise error(f"{invalid}: {exc}", path=path) from None
    finally:
        loader.dispose()
    lines: dict[KeyPath, int] = {}
    if node is not None:
        lines[()] = node.start_mark.line + 1
        _collect(data, (), loader.key_lines, lines)
    return YamlDoc(path, data, lines)


def read_yaml(
    path: Path,
    error: type[VprofError] = VprofError,
    *,
    what: str = "YAML file",
    invalid: str = "malformed YAML",
) -> YamlDoc:
    """Read and parse one YAML file; an unreadable file raises ``error`` too
    (``"cannot read <what>: <reason>"``)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise error(f"cannot read {what}: {exc.strerror or exc}", path=str(path)) from None
    except UnicodeDecodeError as exc:
        raise error(f"cannot read {what}: {exc}", path=str(path)) from None
    return parse_yaml(text, str(path), error, invalid=invalid)
