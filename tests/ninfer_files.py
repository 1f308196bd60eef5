"""Small but real `.ninfer` containers (v1, v2, v3 with continuation parts), built per reference §6.

Header, JSON directory and payload alignment follow the published writers: upstream G0
tools/artifact/container.py (v1: ``<8sQ`` prefix, JSON at 16, payload at align_up(16+json, 4096),
payload-relative object offsets, file truncated after the last object) and zhongpei/ninfer-4090
tools/artifact/{framing,schema}.py (v3: ``<8sQ16s`` header, ``files[0].path`` null, continuation
parts ``NINPRT\\0\\x03`` + index + artifact_id with payload at 4096). The tensor bytes are random:
nothing here loads them, the point is the framing.
"""

from __future__ import annotations

import json
import random
import struct
import uuid
from pathlib import Path
from typing import Any

PAGE = 4096


def _align(value: int, alignment: int = PAGE) -> int:
    return (value + alignment - 1) // alignment * alignment


def _objects(v3: bool, tensor_bytes: int, count: int) -> list[dict[str, Any]]:
    objects: list[dict[str, Any]] = []
    offset = 0
    for index in range(count):
        fmt, layout = ("bf16", "contiguous_le_v1") if v3 else ("BF16", "contiguous-le-v1")
        key = {"id": f"weight/{index:06d}"} if v3 else {"name": f"layers.{index}.weight"}
        objects.append({**key, "kind": "tensor", "shape": [tensor_bytes // 2], "format": fmt, "layout": layout,
                        "offset": offset, "bytes": tensor_bytes})
        offset = _align(offset + tensor_bytes, 256)
    return objects


def _payload(size: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(size)


def write_v1_v2(path: Path, version: int, tensor_bytes: int = 6000, count: int = 3, seed: int = 0) -> Path:
    objects = _objects(False, tensor_bytes, count)
    root: dict[str, Any] = (
        {"model_id": "qwen3.6-27b", "objects": objects} if version == 1
        else {"identity": {"model_id": "qwen3.8-27b", "weights_id": "groupwise-int"}, "objects": objects}
    )
    directory = json.dumps(root, separators=(",", ":")).encode()
    payload_offset = _align(16 + len(directory))
    end = objects[-1]["offset"] + objects[-1]["bytes"]
    with path.open("wb") as handle:
        handle.write(struct.pack("<8sQ", b"NINFER\x00" + bytes([version]), len(directory)))
        handle.write(directory)
        handle.write(b"\x00" * (payload_offset - 16 - len(directory)))
        handle.write(_payload(end, seed))
    return path


def write_v3(path: Path, tensor_bytes: int = 6000, count: int = 3, parts: int = 0, seed: int = 0) -> Path:
    """A v3 entry; with parts > 0 the payload is split into the entry plus that many continuation files."""
    objects = _objects(True, tensor_bytes, count)
    total = objects[-1]["offset"] + objects[-1]["bytes"]
    cuts = [total * (i + 1) // (parts + 1) for i in range(parts + 1)]
    sizes = [cut - prev for prev, cut in zip([0] + cuts[:-1], cuts, strict=True)]
    files = [{"path": None if i == 0 else f"{path.name}.part-{i:04d}", "payload_bytes": size}
             for i, size in enumerate(sizes)]
    root = {
        "components": {"text": {"config": {"architecture": "qwen3_8"}}},
        "objects": objects,
        "bindings": {f"p{i}": {"object": obj["id"]} for i, obj in enumerate(objects)},
        "uses": [],
        "files": files,
        "metadata": {"name": "qwen3.8-27b"},
        "provenance": {"recipe": "groupwise_int"},
    }
    directory = json.dumps(root, separators=(",", ":")).encode() + b"    "  # space padding, as sanitize tools do
    artifact_id = uuid.UUID(int=random.Random(seed).getrandbits(128), version=4).bytes
    payload = _payload(total, seed)
    payload_offset = _align(32 + len(directory))
    with path.open("wb") as handle:
        handle.write(struct.pack("<8sQ16s", b"NINFER\x00\x03", len(directory), artifact_id))
        handle.write(directory)
        handle.write(b"\x00" * (payload_offset - 32 - len(directory)))
        handle.write(payload[: sizes[0]])
    start = sizes[0]
    for index, record in enumerate(files[1:], start=1):
        with (path.parent / record["path"]).open("wb") as handle:
            handle.write(struct.pack("<8sQ16s", b"NINPRT\x00\x03", index, artifact_id))
            handle.write(b"\x00" * (PAGE - 32))
            handle.write(payload[start : start + record["payload_bytes"]])
        start += record["payload_bytes"]
    return path
