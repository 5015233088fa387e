"""YAML reading that remembers the line of every mapping key and the text of every plain scalar.

PyYAML's plain ``safe_load`` forgets where values came from and silently keeps the last of two
duplicate keys; profiles, workloads and traffic shapes need both, so errors can say
``file:line: key``. Values come back as plain dicts, lists and scalars; ``YamlDoc.line`` gives
the line of any key path, and ``YamlDoc.text`` the source text of a plain scalar that YAML
turned into something other than a string (``010`` → 8, ``1.10`` → 1.1, ``12:30`` → 750), so
readers that expect a string can keep what was written.

It is the one reader of configuration, so the limits live here: files over
``MAX_CONFIG_BYTES``, documents that expand (through aliases) to more than ``MAX_VALUES``
values or nest deeper than ``MAX_DEPTH``, and values that contain themselves are refused
before anything is built. Uses libyaml's C loader where available.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from vprof.common.errors import VprofError

_BaseLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_STR_TAG = "tag:yaml.org,2002:str"

KeyPath = tuple[str, ...]

# A profile is ~1 KB; the largest realistic config (a workload with inline lengths) ~100 KB.
MAX_CONFIG_BYTES = 4 * 2**20
# Values after alias expansion: a "billion laughs" document expands to 10**9 from 12 lines.
MAX_VALUES = 200_000
MAX_DEPTH = 100


@dataclass(frozen=True)
class YamlDoc:
    """One parsed YAML document and where each of its mapping keys was written.

    ``lines`` maps a key path (each key as ``str``; list items by their index) to its 1-based
    line; ``()`` is the line the document's top-level value starts on. ``texts`` maps the key
    path of each plain (unquoted) scalar that YAML read as a non-string to its source text;
    ``key_texts`` does the same for mapping keys (``ON: 1`` has the key ``True``, written "ON").
    """

    path: str
    data: Any
    lines: dict[KeyPath, int] = field(default_factory=dict)
    texts: dict[KeyPath, str] = field(default_factory=dict)
    key_texts: dict[KeyPath, str] = field(default_factory=dict)

    def line(self, *keys: Any) -> int | None:
        """The line of ``keys`` (e.g. ``line("engine_args", "port")``), or None if not written."""
        return self.lines.get(tuple(str(k) for k in keys))

    def text(self, *keys: Any) -> str | None:
        """The source text of the plain scalar at ``keys`` when YAML read it as a non-string
        (``VER: 1.10`` → ``"1.10"``); None for strings, quoted scalars and collections."""
        return self.texts.get(tuple(str(k) for k in keys))

    def key_as_written(self, *keys: Any) -> Any:
        """The last of ``keys`` (a mapping key) as written: ``"ON"`` for a key YAML read as
        ``True``; the key itself when it was a string."""
        return self.key_texts.get(tuple(str(k) for k in keys), keys[-1])

    def as_written(self, *keys: Any, value: Any) -> Any:
        """``value`` (the data at ``keys``) as a string when it was written as a plain scalar
        YAML turned into a number, bool or date; otherwise ``value`` unchanged."""
        text = self.text(*keys)
        return text if text is not None and value is not None else value

    def strings_as_written(self, names: Collection[str]) -> Any:
        """A copy of ``data`` where the value of each mapping key in ``names``, at any depth,
        is its source text if YAML read a plain scalar there as a non-string
        (``name: 1.10`` → ``"1.10"``)."""

        def walk(value: Any, path: KeyPath) -> Any:
            if isinstance(value, dict):
                out = {}
                for key, item in value.items():
                    sub = path + (str(key),)
                    text = self.texts.get(sub) if key in names else None
                    out[key] = text if text is not None and item is not None else walk(item, sub)
                return out
            if isinstance(value, list):
                return [walk(item, path + (str(i),)) for i, item in enumerate(value)]
            return value

        return walk(self.data, ())


class _DuplicateKey(Exception):
    def __init__(self, key: Any, line: int, first_line: int) -> None:
        super().__init__(key)
        self.key = key
        self.line = line
        self.first_line = first_line


class _Refused(Exception):
    """A document over a limit, found before construction."""

    def __init__(self, message: str, line: int | None, hint: str) -> None:
        super().__init__(message)
        self.message = message
        self.line = line
        self.hint = hint


class _LineLoader(_BaseLoader):  # type: ignore[misc, valid-type]
    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.key_lines: dict[int, dict[Any, int]] = {}  # id(mapping) -> {key: line}
        self.scalar_texts: dict[int, dict[Any, str]] = {}  # id(collection) -> {key: text}
        self.key_texts: dict[int, dict[Any, str]] = {}  # id(mapping) -> {key: its text}


def _plain_text(node: yaml.Node) -> str | None:
    """The source text of a plain scalar YAML resolved to a non-string, else None."""
    # the C loader marks plain scalars with style "", the Python one with None
    if isinstance(node, yaml.ScalarNode) and not node.style and node.tag != _STR_TAG:
        return str(node.value)
    return None


def _construct_mapping(loader: _LineLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    loader.flatten_mapping(node)
    result: dict[Any, Any] = {}
    lines: dict[Any, int] = {}
    texts: dict[Any, str] = {}
    key_texts: dict[Any, str] = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if (key_text := _plain_text(key_node)) is not None:
            key_texts[key] = key_text
        line = key_node.start_mark.line + 1
        if not isinstance(key, (str, int, float, bool)) and key is not None:
            raise yaml.constructor.ConstructorError(
                None, None, "a mapping key must be a plain value", key_node.start_mark
            )
        if key in result:
            raise _DuplicateKey(key, line, lines[key])
        result[key] = loader.construct_object(value_node, deep=True)
        lines[key] = line
        text = _plain_text(value_node)
        if text is not None:
            texts[key] = text
    loader.key_lines[id(result)] = lines
    if texts:
        loader.scalar_texts[id(result)] = texts
    if key_texts:
        loader.key_texts[id(result)] = key_texts
    return result


def _construct_sequence(loader: _LineLoader, node: yaml.SequenceNode) -> list[Any]:
    result = [loader.construct_object(child, deep=True) for child in node.value]
    texts = {i: t for i, child in enumerate(node.value) if (t := _plain_text(child)) is not None}
    if texts:
        loader.scalar_texts[id(result)] = texts
    return result


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, _construct_sequence)


def _check_limits(root: yaml.Node) -> None:
    """Refuse a document that expands past ``MAX_VALUES``, nests past ``MAX_DEPTH`` or holds a
    value that contains itself; linear in the composed (unexpanded) node graph."""
    sizes: dict[int, int] = {}  # id(node) -> values below it, aliases expanded
    open_nodes: set[int] = set()

    def size(node: yaml.Node, depth: int) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        line = node.start_mark.line + 1
        if key in open_nodes:
            raise _Refused(
                "a value contains itself through an alias",
                line,
                "YAML anchors (&) may be reused (*) but not inside themselves",
            )
        if depth > MAX_DEPTH:
            raise _Refused(f"nested more than {MAX_DEPTH} levels deep", line, "flatten it")
        total = 1
        if isinstance(node, (yaml.SequenceNode, yaml.MappingNode)):
            open_nodes.add(key)
            children = (
                node.value
                if isinstance(node, yaml.SequenceNode)
                else [n for pair in node.value for n in pair]
            )
            for child in children:
                total += size(child, depth + 1)
                if total > MAX_VALUES:
                    raise _Refused(
                        f"expands to more than {MAX_VALUES:,} values (counting every alias "
                        "use in full)",
                        line,
                        "a config file this large is a mistake or an alias bomb; put long "
                        "lists of lengths in a file (file: lengths.txt)",
                    )
            open_nodes.discard(key)
        sizes[key] = total
        return total

    size(root, 0)


def _collect(
    value: Any,
    path: KeyPath,
    loader: _LineLoader,
    out: dict[KeyPath, int],
    texts: dict[KeyPath, str],
    key_texts: dict[KeyPath, str],
) -> None:
    """Record the line of every key and the text of every plain scalar below ``value`` under
    its path (aliased values under each path that uses them)."""
    if isinstance(value, dict):
        items: Any = value.items()
        table = loader.key_lines.get(id(value), {})
    elif isinstance(value, list):
        items, table = enumerate(value), {}
    else:
        return
    scalar_texts = loader.scalar_texts.get(id(value), {})
    written_keys = loader.key_texts.get(id(value), {}) if isinstance(value, dict) else {}
    for key, item in items:
        sub = path + (str(key),)
        if key in table:
            out.setdefault(sub, table[key])
        if key in scalar_texts:
            texts.setdefault(sub, scalar_texts[key])
        if key in written_keys:
            key_texts.setdefault(sub, written_keys[key])
        _collect(item, sub, loader, out, texts, key_texts)


def parse_yaml(
    text: str,
    path: str,
    error: type[VprofError] = VprofError,
    *,
    invalid: str = "malformed YAML",
    key: str | None = None,
) -> YamlDoc:
    """Parse ``text`` (the contents of ``path``; ``key`` names it in errors when it is not a
    file, e.g. ``--set``).

    Malformed YAML (``"<invalid>: <problem>"``), duplicate keys and documents over the limits
    above raise ``error`` naming the file, the line and, for a duplicate, the key.
    """
    if len(text) > MAX_CONFIG_BYTES:
        raise error(
            f"{len(text):,} characters is more than a config file may hold "
            f"({MAX_CONFIG_BYTES // 2**20} MiB)",
            path=path,
            key=key,
        )
    if "\x00" in text:
        line = text.count("\n", 0, text.index("\x00")) + 1
        raise error(f"{invalid}: a NUL character", path=path, line=line, key=key)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:  # a lone surrogate: bytes that were not UTF-8 (argv)
        line = text.count("\n", 0, exc.start) + 1
        raise error(
            f"{invalid}: not valid Unicode (bytes that are not UTF-8?)",
            path=path,
            line=line,
            key=key,
        ) from None
    loader = _LineLoader(text)
    try:
        node = loader.get_single_node()
        if node is not None:
            _check_limits(node)
        data = loader.construct_document(node) if node is not None else None
    except _Refused as exc:
        raise error(exc.message, path=path, line=exc.line, key=key, hint=exc.hint) from None
    except _DuplicateKey as exc:
        raise error(
            f"duplicate key (first set on line {exc.first_line})",
            path=path,
            line=exc.line,
            key=str(exc.key) if key is None else f"{key}: {exc.key}",
        ) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = " ".join(str(exc.problem or exc.context or "malformed YAML").split())
        raise error(
            f"{invalid}: {problem}",
            path=path,
            line=(mark.line + 1) if mark else None,
            key=key,
            hint="check indentation and quoting",
        ) from None
    except yaml.YAMLError as exc:
        raise error(f"{invalid}: {exc}", path=path, key=key) from None
    finally:
        loader.dispose()
    lines: dict[KeyPath, int] = {}
    texts: dict[KeyPath, str] = {}
    key_texts: dict[KeyPath, str] = {}
    if node is not None:
        lines[()] = node.start_mark.line + 1
        top = _plain_text(node)
        if top is not None:
            texts[()] = top
        _collect(data, (), loader, lines, texts, key_texts)
    return YamlDoc(path, data, lines, texts, key_texts)


def read_yaml(
    path: Path,
    error: type[VprofError] = VprofError,
    *,
    what: str = "YAML file",
    invalid: str = "malformed YAML",
) -> YamlDoc:
    """Read and parse one YAML file; an unreadable file raises ``error`` too
    (``"cannot read <what>: <reason>"``), and so does one over ``MAX_CONFIG_BYTES``."""
    try:
        with path.open("rb") as stream:  # read at most the limit: the path may be a FIFO
            raw = stream.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise error(f"cannot read {what}: {exc.strerror or exc}", path=str(path)) from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise error(
            f"{what} is larger than {MAX_CONFIG_BYTES // 2**20} MiB, too large for a config file",
            path=str(path),
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise error(
            f"cannot read {what}: byte 0x{raw[exc.start]:02x} is not UTF-8",
            path=str(path),
            line=line,
            hint="save it as UTF-8",
        ) from None
    if text.startswith("\ufeff"):  # a BOM, as some editors write
        text = text[1:]
    return parse_yaml(text, str(path), error, invalid=invalid)
