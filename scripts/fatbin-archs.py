#!/usr/bin/env python3
"""The GPU architectures a shared object carries kernels for, read from its CUDA fatbins without a GPU or the CUDA
toolkit (cuobjdump's `-lelf`/`-lptx` in short): every fatbin header (magic 0xBA55ED50) and each of its entries'
headers, whose kind says cubin (ELF, machine code for one sm_XX) or PTX (compute_XX, compiled by the driver at load).
A vLLM or torch wheel with no sm_70 cubin and no PTX at or below compute_70 has no kernel a V100 can run.

    scripts/fatbin-archs.py LIB.so...      one line per file: its cubin and PTX architectures
"""

from __future__ import annotations

import mmap
import struct
import sys

MAGIC = b"\x50\xed\x55\xba"
KINDS = {1: "compute", 2: "sm"}
"""Entry kinds of a fatbin: 1 PTX, 2 ELF cubin."""


def archs(path: str) -> dict[str, set[int]]:
    """{"sm": cubin architectures, "compute": PTX architectures} of the fatbins in `path`."""
    found: dict[str, set[int]] = {"sm": set(), "compute": set()}
    with open(path, "rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
        at = data.find(MAGIC)
        while at != -1:
            version, header_size, body = struct.unpack_from("<HHQ", data, at + 4)
            if version != 1 or header_size != 16 or not 0 < body < len(data) - at:
                at = data.find(MAGIC, at + 4)  # the magic's bytes inside something else
                continue
            entry, end = at + header_size, at + header_size + body
            while entry + 32 <= end:
                kind, _, entry_header, size = struct.unpack_from("<HHIQ", data, entry)
                if kind not in KINDS or entry_header < 32:
                    break
                found[KINDS[kind]].add(struct.unpack_from("<I", data, entry + 28)[0])
                entry += entry_header + size
            at = data.find(MAGIC, end)
    return found


if __name__ == "__main__":
    for name in sys.argv[1:]:
        found = archs(name)
        print(f"{name}: cubin {' '.join(f'sm_{a}' for a in sorted(found['sm'])) or 'none'}; "
              f"PTX {' '.join(f'compute_{a}' for a in sorted(found['compute'])) or 'none'}")
