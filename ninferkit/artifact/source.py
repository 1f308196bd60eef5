"""Where an artifact is downloaded from, and the pin policy: a commit, never a moving branch.

Hub files are fetched from ``{endpoint}/{repo}/resolve/{revision}/{filename}`` (the Hugging Face
"resolve" layout that mirrors also serve). The endpoint is the profile's, else ``HF_ENDPOINT``, else
the public hub. A revision is pinned when it is a full 40-hex commit hash: a branch such as ``main``
can be replaced under the same name (a v2 file became v3 on 2026-09-15 and every v1/v2 engine
refused it), so it is refused unless the profile sets ``artifact.allow_branch``, and then warned.
"""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import quote

from ninferkit.errors import ArtifactError
from ninferkit.params.profile import ArtifactSection

PUBLIC_HUB = "https://huggingface.co"
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_RESOLVE = re.compile(r"/resolve/([^/]+)/")


class UnpinnedArtifactWarning(UserWarning):
    """The artifact comes from a branch (allowed by the profile): its bytes may change under it."""


def is_commit_hash(revision: str) -> bool:
    return bool(_COMMIT.match(revision))


@dataclass(frozen=True)
class ArtifactSource:
    """A resolved download source; `revision` is None for a direct URL without a hub layout."""

    url: str
    kind: str  # hub | url
    repo: str | None = None
    revision: str | None = None
    filename: str | None = None
    endpoint: str | None = None

    @property
    def pinned(self) -> bool:
        return self.revision is not None and is_commit_hash(self.revision)

    def sibling(self, name: str) -> str:
        """URL of another file of the same revision (v3 continuation parts)."""
        return self.url.rsplit("/", 1)[0] + "/" + quote(name)

    def file_url(self, path: str) -> str:
        """URL of one file of a checkpoint folder, whose `url` is the revision's resolve prefix."""
        return f"{self.url}/{quote(path)}"


def resolve_source(artifact: ArtifactSection, environ: Mapping[str, str] = os.environ) -> ArtifactSource:
    """The URL to fetch for a hub or URL artifact; raise ArtifactError for a generated one."""
    if artifact.url is not None:
        found = _RESOLVE.search(artifact.url)
        return ArtifactSource(artifact.url, "url", revision=found[1] if found else None)
    if artifact.repo is None or artifact.revision is None or artifact.filename is None:
        raise ArtifactError("this artifact is generated or already local; there is nothing to download")
    endpoint = (artifact.endpoint or environ.get("HF_ENDPOINT") or PUBLIC_HUB).rstrip("/")
    url = f"{endpoint}/{artifact.repo}/resolve/{quote(artifact.revision, safe='')}"
    if not artifact.files:  # one file; a folder's files are at the repo's root (file_url), filename names it here
        url += f"/{quote(artifact.filename)}"
    return ArtifactSource(url, "hub", artifact.repo, artifact.revision, artifact.filename, endpoint)


def check_pin(source: ArtifactSource, allow_branch: bool) -> list[str]:
    """Refuse a branch-like revision unless allowed; when allowed, warn and return the warning text.

    A direct URL without a ``/resolve/<revision>/`` segment cannot be judged; its sha256 is its pin.
    """
    if source.revision is None or source.pinned:
        return []
    if not allow_branch:
        raise ArtifactError(
            f"artifact revision '{source.revision}' is not a commit hash (40 hex digits): a branch or tag can "
            f"be replaced under the same name (a hub's main switched v2 files to v3, which v1/v2 engines refuse). "
            f"Pin the commit: look it up on the repo's 'Files and versions' page and set artifact.revision, "
            f"or set artifact.allow_branch: true to accept a moving target")
    message = (f"artifact revision '{source.revision}' is a branch, not a commit (allowed by "
               f"artifact.allow_branch): the bytes may change; pin artifact.sha256 to notice")
    warnings.warn(message, UnpinnedArtifactWarning, stacklevel=2)
    return [message]
