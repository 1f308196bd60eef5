"""Artifacts: the model file of a profile, obtained from a pinned source and verified.

    paths      where the file lives (generated, or pinned and downloaded)
    source     the download URL (hub resolve layout, mirror, direct URL) and the pin policy
    fetch      resumable, hashed-as-it-arrives download, renamed into place only when it matches
    verify     size, sha256 and header checks of any file, as rows of expected vs actual
    container  the `.ninfer` header (v1/v2/v3) and v3 continuation parts
    compat     container version vs what the engine build reads, with the revision to pin
    describe   an artifact record for people (the 01_artifact_verify step, ninferkit/steps/verify.py, writes it)
"""

from ninferkit.artifact.compat import check_container_compatibility
from ninferkit.artifact.container import ContainerInfo, read_container
from ninferkit.artifact.describe import describe, verification_table
from ninferkit.artifact.fetch import DownloadResult, download
from ninferkit.artifact.paths import local_dir, model_path, planned_path
from ninferkit.artifact.source import ArtifactSource, UnpinnedArtifactWarning, check_pin, resolve_source
from ninferkit.artifact.verify import FileReport, verify_file
from ninferkit.rundir.hashing import Sha256Result, sha256_file

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
