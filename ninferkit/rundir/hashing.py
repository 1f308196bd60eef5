"""sha256 of large files at the disk's pace: the artifact, its parts, the engine's binaries.

A leaf: the launch hashes the binary it starts and the artifact step every file it verifies, and neither
should import the other for it.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ninferkit.progress import track

HASH_BLOCK_BYTES = 16 * 1024 * 1024
"""Read size for hashing: large blocks keep per-call overhead negligible next to the hash itself."""


@dataclass(frozen=True)
class Sha256Result:
    hexdigest: str
    bytes: int
    seconds: float

    @property
    def bytes_per_s(self) -> float:
        return self.bytes / self.seconds if self.seconds > 0 else float("inf")


def sha256_file(path: Path, block_bytes: int = HASH_BLOCK_BYTES, progress: bool = False) -> Sha256Result:
    """sha256 of a whole file, with its rate; see `hash_file_into` for how it reads.

    Example: ``sha256_file(Path("model.gguf")).hexdigest``
    """
    digest = hashlib.sha256()
    started = time.perf_counter()
    with track(f"sha256 {path.name}", path.stat().st_size, byte_counts=True, enabled=progress) as shown:
        total = hash_file_into(digest, path, block_bytes, shown.update)
    return Sha256Result(digest.hexdigest(), total, time.perf_counter() - started)


def hash_file_into(
    digest: Any, path: Path, block_bytes: int = HASH_BLOCK_BYTES, on_block: Callable[[int], Any] | None = None
) -> int:
    """Feed a file into `digest`, reading the next block in a helper thread while this one hashes.

    Both `readinto` and `hashlib.update` release the GIL, so reading and hashing overlap and the rate
    approaches the slower of disk and hash instead of their sum; two reused buffers, no allocation
    per block. Returns the byte count.
    """
    buffers = (bytearray(block_bytes), bytearray(block_bytes))
    total = 0
    with path.open("rb", buffering=0) as handle, ThreadPoolExecutor(1, "sha256-read") as reader:
        turn = 0
        pending = reader.submit(handle.readinto, buffers[turn])
        while True:
            count = pending.result()
            if not count:
                return total
            current = buffers[turn]
            turn ^= 1
            pending = reader.submit(handle.readinto, buffers[turn])
            digest.update(memoryview(current)[:count])
            total += count
            if on_block is not None:
                on_block(count)
