"""Artifacts: the model file of a profile, obtained from a pinned source and verified.

    paths        where the file lives (generated, or pinned and downloaded)
    source       the download URL (hub resolve layout, mirror, direct URL) and the pin policy
    fetch        resumable, hashed-as-it-arrives download, renamed into place only when it matches
    verify       size, sha256 and header checks of any file, as rows of expected vs actual
    container    the `.ninfer` header (v1/v2/v3) and v3 continuation parts
    compat       container version vs what the engine build reads, with the revision to pin
    record_text  an artifact record for people, `describe` and `verification_table` (the 01_artifact_verify
                 step, ninferkit/steps/verify.py, writes the record)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ninferkit.artifact.compat import check_container_compatibility
    from ninferkit.artifact.container import ContainerInfo, read_container
    from ninferkit.artifact.fetch import DownloadResult, download
    from ninferkit.artifact.paths import local_dir, model_path, planned_path
    from ninferkit.artifact.record_text import describe, verification_table
    from ninferkit.artifact.source import ArtifactSource, UnpinnedArtifactWarning, check_pin, resolve_source
    from ninferkit.artifact.verify import FileReport, verify_file
    from ninferkit.rundir.hashing import Sha256Result, sha256_file

_HOMES = {
    "ninferkit.artifact.compat": ("check_container_compatibility",),
    "ninferkit.artifact.container": ("ContainerInfo", "read_container"),
    "ninferkit.artifact.record_text": ("describe", "verification_table"),
    "ninferkit.artifact.fetch": ("DownloadResult", "download"),
    "ninferkit.artifact.paths": ("local_dir", "model_path", "planned_path"),
    "ninferkit.artifact.source": ("ArtifactSource", "UnpinnedArtifactWarning", "check_pin", "resolve_source"),
    "ninferkit.artifact.verify": ("FileReport", "verify_file"),
    "ninferkit.rundir.hashing": ("Sha256Result", "sha256_file"),
}
_HOME = {name: module for module, names in _HOMES.items() for name in names}
"""Each name this package gives and the module that defines it, imported on first use (PEP 562): `ninferkit
verify --file` needs only `verify`, while `describe` brings pandas and `paths` the engines and the profile
models (issue 43: the command took 3.4 s for a 1 GiB file that sha256sum read in 1.0 s, most of it imports).
No module here is named as one of these names: importing it would set the package's attribute to the module."""


def __getattr__(name: str) -> Any:
    module = _HOME.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "ArtifactSource",
    "ContainerInfo",
    "DownloadResult",
    "FileReport",
    "Sha256Result",
    "UnpinnedArtifactWarning",
    "check_container_compatibility",
    "check_pin",
    "describe",
    "download",
    "local_dir",
    "model_path",
    "planned_path",
    "read_container",
    "resolve_source",
    "sha256_file",
    "verification_table",
    "verify_file",
]
