"""Loading a profile: YAML + `-p key=value` overrides -> a validated, hashed Profile.

Validation errors are rewritten into one message per field that names the YAML key path, the
value given and what is allowed, with the closest known key for a typo. A file no profile can be
(over MAX_PROFILE_BYTES, not UTF-8, not YAML, or YAML whose aliases expand it past MAX_YAML_NODES:
a "billion laughs") is refused before it is built, and no message prints more than a short excerpt
of a value.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap
from ruamel.yaml.error import YAMLError as RuamelYAMLError

from ninferkit.errors import ProfileError
from ninferkit.params.kinds import KINDS, serve_section
from ninferkit.params.profile import Profile

MAX_PROFILE_BYTES = 1024 * 1024
"""A profile is a few KiB; a larger file is not one (and is not read whole)."""
MAX_YAML_NODES = 100_000
"""Values a profile may hold once its aliases are expanded (the seed profiles hold a few hundred)."""
MAX_SHOWN_CHARS = 120


@dataclass(frozen=True)
class LoadedProfile:
    """A validated profile plus where it came from and the reasons written beside its flags."""

    profile: Profile
    source: Path | None
    overrides: tuple[str, ...] = ()
    comments: dict[str, str] = field(default_factory=dict)

    @property
    def hash(self) -> str:
        return profile_hash(self.profile)


def profile_hash(profile: Profile) -> str:
    """A stable 12-hex-digit hash of the validated values (defaults included, comments excluded). A profile with
    no variants or objective hashes as it did before profiles had them, so its runs' rows still count as its own."""
    values = profile.model_dump(mode="json")
    for key in ("variants", "objective"):
        if not values.get(key):
            values.pop(key, None)
    canonical = json.dumps(values, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:12]


def read_yaml_mapping(source: Path, kind: str, home: str, keys: str) -> tuple[str, dict[str, Any]]:
    """The text and the mapping of a YAML file ninferkit reads as one of its own (a profile, a fleet file), with
    the checks both need before their schema: ProfileError when it is missing, not text or not a mapping."""
    if not source.is_file():
        raise ProfileError(f"{kind} {source} does not exist; {kind}s live in {home}")
    text = read_profile_text(source)
    data = parse_yaml(text, str(source))
    if not isinstance(data, dict):
        raise ProfileError(f"{source}: a {kind} is a YAML mapping with {keys}")
    return text, data


def load_profile(path: str | Path, overrides: Iterable[str] = ()) -> LoadedProfile:
    """Read, override and validate a profile; raise ProfileError listing every bad field.

    Example: ``load_profile("params/local-cpu.yaml", ["serve.max_context=8192"])``.
    """
    source = profile_path(path)
    text, data = read_yaml_mapping(source, "profile", _profiles_here(source), "at least name, engine, artifact")
    overrides = tuple(overrides)
    for item in overrides:
        apply_override(data, item)
    refuse_control_text(data, str(source))
    return LoadedProfile(validate_profile(data, where=str(source)), source, overrides, yaml_comments(text))


PROFILES = Path("params")
"""Where a bare profile name is looked up (relative to the working directory, the checkout's root)."""


def profile_path(path: str | Path) -> Path:
    """The profile file a command names: a path as given, or a bare name (no folder, no suffix) as
    params/NAME.yaml, as `ninferkit launch local-cpu` means params/local-cpu.yaml."""
    source = Path(path)
    if source.is_file() or source.suffix or len(source.parts) != 1:
        return source
    named = PROFILES / f"{source.name}.yaml"
    return named if named.is_file() else source


def _profiles_here(source: Path) -> str:
    """Where profiles live, for the message about one that does not exist: the names params/ holds here."""
    names = sorted(path.stem for path in PROFILES.glob("*.yaml")) if PROFILES.is_dir() else []
    if not names:
        return "params/*.yaml (give the file's path, e.g. params/local-cpu.yaml)"
    return (f"params/*.yaml; here: {', '.join(names)} (give the path, e.g. params/{names[0]}.yaml, or the bare "
            f"name, e.g. {names[0]})")


def read_profile_text(source: Path) -> str:
    """A profile file's text, read no further than MAX_PROFILE_BYTES; ProfileError for a larger or non-UTF-8 one."""
    with source.open("rb") as handle:
        raw = handle.read(MAX_PROFILE_BYTES + 1)
    if len(raw) > MAX_PROFILE_BYTES:
        raise ProfileError(f"{source} is over {MAX_PROFILE_BYTES // 1024} KiB: not a profile (a profile is a few "
                           "KiB of YAML); check the path")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProfileError(f"{source} is not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start}); "
                           "save the profile as UTF-8") from None


class _CountingLoader(yaml.SafeLoader):
    """PyYAML's safe loader, composing the node graph first so its expanded size can be checked."""


def parse_yaml(text: str, where: str) -> Any:
    """YAML text to Python values; ProfileError when it is not YAML or its aliases expand it past
    MAX_YAML_NODES (checked on the node graph, before a single value is built)."""
    try:
        loader = _CountingLoader(text)
    except yaml.YAMLError as exc:
        raise ProfileError(f"{where}: not valid YAML: {_excerpt(str(exc), 400)}") from None
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _refuse_duplicate_keys(node, where, set())
        size = _expanded_size(node, {})
        if size > MAX_YAML_NODES:
            raise ProfileError(f"{where}: the YAML expands to over {MAX_YAML_NODES:,} values through its aliases "
                               "(&anchor / *alias); a profile holds a few hundred: write the values out")
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        raise ProfileError(f"{where}: not valid YAML: {_excerpt(str(exc), 400)}") from None
    except RecursionError:
        raise ProfileError(f"{where}: the YAML nests too deeply to be a profile") from None
    except ValueError as exc:  # a number past Python's 4,300 digits, a date that is none (issue 40)
        said = str(exc).split(";")[0]  # not Python's advice to raise its digit limit
        raise ProfileError(f"{where}: a value no profile holds ({_excerpt(said, 200)}); write the number or date as "
                           "the field's help says") from None
    finally:
        loader.dispose()


def _refuse_duplicate_keys(node: yaml.Node, where: str, seen: set[int]) -> None:
    """ProfileError for a key written twice in one mapping: YAML keeps the last silently, so a profile with a
    section pasted twice would run with half of what its author read."""
    if id(node) in seen:
        return
    seen.add(id(node))
    if isinstance(node, yaml.MappingNode):
        keys: dict[str, int] = {}
        for key, value in node.value:
            if isinstance(key, yaml.ScalarNode) and key.tag != "tag:yaml.org,2002:merge":
                line = key.start_mark.line + 1
                if key.value in keys:
                    raise ProfileError(f"{where}: key '{_excerpt(key.value)}' is written twice in one mapping (lines "
                                       f"{keys[key.value]} and {line}); YAML would keep only the last: keep one")
                keys[key.value] = line
            _refuse_duplicate_keys(value, where, seen)
    elif isinstance(node, yaml.SequenceNode):
        for child in node.value:
            _refuse_duplicate_keys(child, where, seen)


def refuse_control_text(data: Any, where: str, path: str = "") -> None:
    """ProfileError for a text value (or key) holding a control character, a byte that was not UTF-8 (a
    command-line value arrives with it as a lone surrogate), or a trailing newline (a name check's `$`
    matches before one). Tabs and newlines inside a text are text."""
    if isinstance(data, dict):
        for key, value in data.items():
            refuse_control_text(key, where, path)
            refuse_control_text(value, where, f"{path}.{key}" if path else str(key))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            refuse_control_text(value, where, f"{path}[{index}]")
    elif isinstance(data, str):
        field = path or "(top level)"
        for position, char in enumerate(data):
            if "\udc80" <= char <= "\udcff":
                raise ProfileError(f"{where}: {field} holds the byte 0x{ord(char) - 0xdc00:02x} at position "
                                   f"{position}, which is not UTF-8 text: write the value in UTF-8")
            if char not in "\t\n" and unicodedata.category(char) in ("Cc", "Cs"):
                raise ProfileError(f"{where}: {field} holds the control character U+{ord(char):04X} at position "
                                   f"{position}: {_excerpt(ascii(data))}; remove it")
        if data.endswith("\n"):
            raise ProfileError(f"{where}: {field} ends in a newline ({_excerpt(ascii(data))}); remove it (a YAML "
                               "block scalar `|` adds one: write `|-`)")


def _expanded_size(node: yaml.Node, sizes: dict[int, int]) -> int:
    """Values under `node` with every alias expanded, counted once per shared node (memoised by identity)."""
    known = sizes.get(id(node))
    if known is not None:
        return known
    sizes[id(node)] = MAX_YAML_NODES + 1  # a node inside itself (a recursive alias) is over any limit
    total = 1
    if isinstance(node, yaml.SequenceNode):
        total += sum(_expanded_size(child, sizes) for child in node.value)
    elif isinstance(node, yaml.MappingNode):
        total += sum(_expanded_size(key, sizes) + _expanded_size(value, sizes) for key, value in node.value)
    sizes[id(node)] = min(total, MAX_YAML_NODES + 1)
    return sizes[id(node)]


def _excerpt(text: str, limit: int = MAX_SHOWN_CHARS) -> str:
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


def validate_profile(data: Mapping[str, Any], where: str = "profile") -> Profile:
    try:
        return Profile.model_validate(data)
    except ValidationError as exc:
        problems = field_problems(exc, data)
        raise ProfileError(f"{where} is not a valid profile:\n" + "\n".join(f"  - {p}" for p in problems)) from exc


def field_problems(exc: ValidationError, data: Mapping[str, Any], root: type[BaseModel] = Profile) -> list[str]:
    """One line per bad field of `data` validated as `root`: the key path, the value and what is allowed, with
    the closest known key for a typo (a fleet file's errors read as a profile's)."""
    return [_describe(error, data, root) for error in exc.errors()]


def apply_override(data: dict[str, Any], item: str) -> None:
    """Set ``a.b.c=value`` in place; the value is read as YAML (8192 -> int, true -> bool, [a, b] -> list)."""
    key, sep, raw = item.partition("=")
    if not sep or not key or any(not part for part in key.split(".")):
        raise ProfileError(f"override '{item}' must look like section.field=value, e.g. serve.max_context=8192")
    refuse_control_text({key: raw}, "override")  # before YAML reads it (its own error is obscure)
    value = parse_yaml(raw, f"override '{_excerpt(item)}'") if raw else ""
    node = data
    parts = key.split(".")
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ProfileError(f"override '{item}': '{part}' is a value, not a section")
        node = child
    node[parts[-1]] = value


def _describe(error: Mapping[str, Any], data: Mapping[str, Any], root: type[BaseModel]) -> str:
    loc = tuple(part for part in error["loc"] if not _is_union_tag(part))
    path = ".".join(str(part) for part in loc) or "(top level)"
    kind = error["type"]
    if kind == "extra_forbidden":
        kind = _engine_kind(data) if root is Profile else None
        known = _known_fields(loc[:-1], kind, root)
        close = difflib.get_close_matches(str(loc[-1]), known, n=1, cutoff=0.5)
        hint = f"did you mean '{close[0]}'? " if close else ""
        if len(loc) == 2 and loc[0] == "serve" and kind is not None:
            owners = [other for other in KINDS if other != kind and str(loc[1]) in serve_section(other).model_fields]
            if owners:
                hint = f"an option of {' and '.join(owners)}, not of {kind}; "
        return f"{path}: unknown field; {hint}allowed: {', '.join(sorted(known))}"
    if kind == "missing":
        return f"{path}: required field is missing"
    given = error.get("input")
    if kind == "string_pattern_mismatch" and (form := _form(loc, data, root)) is not None:
        return f"{path} = {_excerpt(repr(given))}: must be {form}"
    message = str(error["msg"]).removeprefix("Value error, ")
    if loc and kind != "value_error":
        return f"{path} = {_excerpt(repr(given))}: {_excerpt(message, 400)}"
    return f"{path}: {_excerpt(message, 400)}"


def _is_union_tag(part: object) -> bool:
    # pydantic puts union member names such as 'int' or "literal['auto']" into the location.
    scalar_tags = {"int", "str", "float", "bool"}
    return isinstance(part, str) and (part in scalar_tags or part.startswith(("literal[", "function-")))


def _engine_kind(data: Mapping[str, Any]) -> str | None:
    engine = data.get("engine")
    kind = engine.get("kind") if isinstance(engine, Mapping) else None
    return kind if kind in KINDS else None


def _known_fields(loc: tuple[Any, ...], engine_kind: str | None, root: type[BaseModel]) -> list[str]:
    model = _model_at(loc, engine_kind, root)
    return [] if model is None else list(model.model_fields)


def _form(loc: tuple[Any, ...], data: Mapping[str, Any], root: type[BaseModel]) -> str | None:
    """The rule in words (`base.shaped`) of the text field at `loc`: a value of the wrong form is told what the
    right one looks like, not shown a regex."""
    fields = [part for part in loc if not isinstance(part, int)]
    if not fields:
        return None
    model = _model_at(loc[:loc.index(fields[-1])], _engine_kind(data) if root is Profile else None, root)
    info = None if model is None else model.model_fields.get(str(fields[-1]))
    extra = getattr(info, "json_schema_extra", None)
    form = extra.get("form") if isinstance(extra, dict) else None
    return form if isinstance(form, str) else None


def _model_at(loc: tuple[Any, ...], engine_kind: str | None, root: type[BaseModel]) -> type[BaseModel] | None:
    model: type[BaseModel] = root
    for index, part in enumerate(loc):
        if isinstance(part, int):
            continue
        if index == 0 and part == "serve" and engine_kind is not None:
            model = serve_section(engine_kind)  # the engine's own serve options
            continue
        info = model.model_fields.get(str(part))
        nested = _model_in(getattr(info, "annotation", None))
        if nested is None:
            return None
        model = nested
    return model


def _model_in(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def yaml_comments(text: str) -> dict[str, str]:
    """Map each key path to the comment written on its line (``max_context: 131072  # why``), with the comment
    lines that continue it: those right below whose ``#`` stands right of the key (a comment at the key's own
    column or left of it is about what follows).

    The reasons operators write beside flags are part of the pinned recipe the write-up publishes. ruamel.yaml
    keeps each comment attached to the key it follows; the reader by indentation it replaces dropped
    continuation lines (the published reason for llama-server's ``-t`` stopped mid-sentence) and took a
    quoted ``#`` for a comment. Give it text load_profile has read (MAX_PROFILE_BYTES, UTF-8).
    """
    try:
        document = YAML(typ="rt", pure=True).load(text)
    except RuamelYAMLError as exc:
        raise ProfileError(f"the profile's comments could not be read: not valid YAML: {_excerpt(str(exc), 400)}") \
            from None
    comments: dict[str, str] = {}
    if isinstance(document, CommentedMap):
        _collect_comments(document, "", comments)
    return comments


def _collect_comments(mapping: CommentedMap, prefix: str, into: dict[str, str]) -> None:
    for key, value in mapping.items():
        path = f"{prefix}{key}"
        line, column = mapping.lc.key(key)
        attached: list[Any] = mapping.ca.items.get(key) or []  # [.., .., the comment after the value, ..]
        token = attached[2] if len(attached) > 2 else None
        if token is not None and token.start_mark.line == line and token.value.startswith("#"):
            reason = _comment_lines(token.value, column)
            if reason:
                into[path] = reason
        if isinstance(value, CommentedMap):
            _collect_comments(value, f"{path}.", into)


def _comment_lines(text: str, key_column: int) -> str:
    """The comment on a key's line joined with its continuation lines, ``#`` and spaces stripped."""
    first, *rest = text.splitlines()
    parts = [first.lstrip("#").strip()]
    for line in rest:
        stripped = line.lstrip(" ")
        if not stripped.startswith("#") or len(line) - len(stripped) <= key_column:
            break
        parts.append(stripped.lstrip("#").strip())
    return " ".join(part for part in parts if part)
