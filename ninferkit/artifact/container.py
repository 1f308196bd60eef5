"""The `.ninfer` container header: magic, version, JSON directory, identity, split parts.

Only the header and the JSON directory are read (kilobytes), never the tensors, so a wrong file is
caught in milliseconds instead of at load time. Layouts per version (reference section 6):

    v1, v2   magic NINFER\\0\\x01 / \\x02, u64 LE json_bytes                 JSON at 16
    v3       magic NINFER\\0\\x03, u64 LE json_bytes, 16-byte artifact_id     JSON at 32
    payload  align_up(header + json_bytes, 4096); object offsets are payload-relative
    v3 parts sibling files named in files[1:], header NINPRT\\0\\x03 + u64 LE index + artifact_id,
             payload at 4096

A damaged, truncated or foreign file is described by `problems`, never by an exception: the caller
(verify) decides what is fatal.
"""

from __future__ import annotations

import json
import struct
import uuid
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

MAGIC_PREFIX = b"NINFER\x00"
PART_MAGIC = b"NINPRT\x00\x03"
PAYLOAD_ALIGNMENT = 4096
MAX_JSON_BYTES = 256 * 1024 * 1024
"""Far above any published directory (372,704 bytes for a v3 27B); a larger value means a damaged header."""
HEADER_BYTES = {1: 16, 2: 16, 3: 32}
_PREFIX = struct.Struct("<8sQ")
_V3_HEADER = struct.Struct("<8sQ16s")
ROOT_MEMBERS: dict[int, tuple[frozenset[str], frozenset[str]]] = {
    1: (frozenset({"model_id", "objects"}), frozenset()),
    2: (frozenset({"identity", "objects"}), frozenset()),
    3: (frozenset({"components", "objects", "bindings", "uses", "files"}), frozenset({"metadata", "provenance"})),
}


def align_up(value: int, alignment: int) -> int:
    return (value + alignment - 1) // alignment * alignment


@dataclass
class PartInfo:
    """One v3 continuation file as found beside the entry file."""

    index: int
    path: str
    expected_bytes: int
    size: int | None = None
    problems: list[str] = field(default_factory=list)


@dataclass
class ContainerInfo:
    """What the header says. `version` is None when the file is not an NInfer container at all."""

    path: str
    file_bytes: int
    magic_hex: str
    version: int | None = None
    json_bytes: int | None = None
    artifact_id: str | None = None
    payload_offset: int | None = None
    identity: dict[str, Any] = field(default_factory=dict)
    object_count: int | None = None
    tensor_formats: dict[str, int] = field(default_factory=dict)
    payload_bytes_needed: int | None = None
    parts: list[PartInfo] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def is_ninfer(self) -> bool:
        return self.version is not None

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["is_ninfer"] = self.is_ninfer
        return data


def read_container(path: Path) -> ContainerInfo:
    """Read the header and JSON directory of `path`; every defect becomes a line in `problems`.

    Example: ``read_container(Path("qwen3_8_27b.ninfer")).version  # 2``
    """
    file_bytes = path.stat().st_size
    with path.open("rb") as handle:
        head = handle.read(32)
        info = ContainerInfo(str(path), file_bytes, head[:8].hex())
        if len(head) < 8 or head[:7] != MAGIC_PREFIX:
            return info
        version = head[7]
        if version not in HEADER_BYTES:
            info.problems.append(f"unknown NInfer container version {version} (known: 1, 2, 3)")
            return info
        info.version = version
        header_bytes = HEADER_BYTES[version]
        if file_bytes < header_bytes:
            info.problems.append(
                f"truncated: {file_bytes} bytes, shorter than the {header_bytes}-byte v{version} header")
            return info
        if version == 3:
            _, json_bytes, artifact_id = _V3_HEADER.unpack(head[:32])
            info.artifact_id = str(uuid.UUID(bytes=artifact_id))
        else:
            _, json_bytes = _PREFIX.unpack(head[:16])
        info.json_bytes = json_bytes
        if not 0 < json_bytes <= MAX_JSON_BYTES:
            info.problems.append(f"json_bytes {json_bytes} is not a plausible directory size (1..{MAX_JSON_BYTES})")
            return info
        json_end = header_bytes + json_bytes
        if json_end > file_bytes:
            info.problems.append(
                f"truncated: the header declares JSON up to byte {json_end}, the file has {file_bytes} bytes")
            return info
        info.payload_offset = align_up(json_end, PAYLOAD_ALIGNMENT)
        handle.seek(header_bytes)
        raw = handle.read(json_bytes)
    directory = _parse_json(raw, info)
    if directory is not None:
        _read_directory(directory, info, path)
    return info


def _parse_json(raw: bytes, info: ContainerInfo) -> dict[str, Any] | None:
    try:
        value = json.loads(raw.decode("utf-8"))  # v3 JSON may be space-padded; json.loads allows that
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        info.problems.append(f"invalid JSON directory: {exc}")
        return None
    if not isinstance(value, dict):
        info.problems.append("invalid JSON directory: the root is not an object")
        return None
    assert info.version is not None
    required, optional = ROOT_MEMBERS[info.version]
    missing, extra = required - value.keys(), value.keys() - required - optional
    if missing or extra:
        info.problems.append(
            f"directory root has missing {sorted(missing)} or extra {sorted(extra)} members for v{info.version}")
    return value


def _read_directory(directory: dict[str, Any], info: ContainerInfo, path: Path) -> None:
    objects = directory.get("objects")
    if not isinstance(objects, list) or not objects:
        info.problems.append("objects must be a non-empty array")
        return
    info.object_count = len(objects)
    formats: Counter[str] = Counter()
    end = 0
    for index, obj in enumerate(objects):
        offset, size = (obj.get("offset"), obj.get("bytes")) if isinstance(obj, dict) else (None, None)
        if type(offset) is not int or type(size) is not int or offset < 0 or size <= 0:
            info.problems.append(f"object #{index} has no valid offset/bytes")
            return
        if obj.get("kind") == "tensor":
            formats[str(obj.get("format"))] += 1
        end = max(end, offset + size)
    info.tensor_formats = dict(formats)
    info.payload_bytes_needed = end
    info.identity = _identity(directory, info.version, formats)
    assert info.payload_offset is not None
    if info.version == 3:
        _check_v3_files(directory, info, path)
    elif info.payload_offset + end > info.file_bytes:
        info.problems.append(
            f"truncated: the objects need {info.payload_offset + end} bytes, the file has {info.file_bytes}")


def _identity(directory: dict[str, Any], version: int | None, formats: Counter[str]) -> dict[str, Any]:
    """Model and weights identity as each version stores it (v3 derives weights_id, see reference)."""
    if version == 1:
        return {"model_id": directory.get("model_id")}
    if version == 2:
        identity = _mapping(directory.get("identity"))
        return {"model_id": identity.get("model_id"), "weights_id": identity.get("weights_id")}
    metadata = _mapping(directory.get("metadata"))
    recipe = str(_mapping(directory.get("provenance")).get("recipe", ""))
    weights = "nvfp4" if recipe.endswith("_nvfp4") or formats.get("nvfp4") else "groupwise-int"
    ranks = _mapping(metadata.get("tensor_parallel")).get("ranks")
    if ranks:
        weights += f"-tp{ranks}"
    return {"name": metadata.get("name"), "weights_id": weights, "weights_id_derived": True}


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _check_v3_files(directory: dict[str, Any], info: ContainerInfo, path: Path) -> None:
    files = directory.get("files")
    if not isinstance(files, list) or not files or not all(
        isinstance(f, dict) and type(f.get("payload_bytes")) is int for f in files
    ):
        info.problems.append("files must be a non-empty array of {path, payload_bytes}")
        return
    assert info.payload_offset is not None and info.payload_bytes_needed is not None
    declared = sum(f["payload_bytes"] for f in files)
    if info.payload_bytes_needed > declared:
        info.problems.append(f"objects need {info.payload_bytes_needed} payload bytes, files declare {declared}")
    entry_bytes = info.payload_offset + files[0]["payload_bytes"]
    if info.file_bytes != entry_bytes:
        state = "truncated" if info.file_bytes < entry_bytes else "too long"
        info.problems.append(f"{state}: the entry should be {entry_bytes} bytes, the file has {info.file_bytes}")
    for index, record in enumerate(files[1:], start=1):
        info.parts.append(_check_part(path.parent, index, record, info.artifact_id))


def _check_part(folder: Path, index: int, record: dict[str, Any], artifact_id: str | None) -> PartInfo:
    name = record.get("path")
    part = PartInfo(index, str(name), PAYLOAD_ALIGNMENT + record["payload_bytes"])
    if not isinstance(name, str) or not name or "/" in name or name in (".", ".."):
        part.problems.append(f"files[{index}].path {name!r} is not a sibling file name")
        return part
    where = folder / name
    if not where.is_file():
        part.problems.append(f"continuation file {where} is missing")
        return part
    part.size = where.stat().st_size
    with where.open("rb") as handle:
        head = handle.read(32)
    if len(head) < 32:
        part.problems.append(f"{where}: truncated continuation header ({len(head)} bytes)")
        return part
    magic, actual_index, part_id = _V3_HEADER.unpack(head)
    if magic != PART_MAGIC or actual_index != index or str(uuid.UUID(bytes=part_id)) != artifact_id:
        part.problems.append(f"{where}: continuation header does not belong to this entry "
                             f"(magic {magic.hex()}, index {actual_index}, artifact_id {uuid.UUID(bytes=part_id)})")
    if part.size != part.expected_bytes:
        state = "truncated" if part.size < part.expected_bytes else "too long"
        part.problems.append(f"{where}: {state}: expected {part.expected_bytes} bytes, the file has {part.size}")
    return part


def all_problems(info: ContainerInfo) -> list[str]:
    return info.problems + [problem for part in info.parts for problem in part.problems]
