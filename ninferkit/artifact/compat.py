"""Engine compatibility: does the engine build read this container version, and what to pin if not.

Which versions an engine reads is engine knowledge (the adapter's `accepted_container_versions`);
which hub revision carries which container version is artifact knowledge (the profile's
`artifact.container_revisions`). This module only joins the two into advice.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping


def check_container_compatibility(
    container_version: int | None,
    accepted_versions: Collection[int] | None,
    pins: Mapping[int, str] | None = None,
) -> list[str]:
    """Problems (empty when compatible) for a file of `container_version` and an engine that reads
    `accepted_versions` (None: the engine has no container format, nothing to check).

    `pins` maps container version -> hub revision that carries it; when one of the accepted versions
    has a pin the problem names that revision, newest accepted version first.

    Example: ``check_container_compatibility(3, {1, 2}, {2: "c8b8c1c0..."})`` ->
    ``["container v3 is not readable by this engine build (it reads v1, v2); pin revision c8b8c1c0...
    (container v2) instead"]``
    """
    if container_version is None or accepted_versions is None or container_version in accepted_versions:
        return []
    reads = ", ".join(f"v{v}" for v in sorted(accepted_versions)) or "no container version"
    problem = f"container v{container_version} is not readable by this engine build (it reads {reads})"
    pinned = [(version, pins[version]) for version in sorted(accepted_versions, reverse=True)
              if pins and version in pins]
    if pinned:
        version, revision = pinned[0]
        return [f"{problem}; pin revision {revision} (container v{version}) instead"]
    wanted = " or ".join(f"v{v}" for v in sorted(accepted_versions, reverse=True))
    return [f"{problem}; pin a revision of the repo that carries container {wanted} "
            "(record it in artifact.container_revisions), or use an engine build that reads "
            f"v{container_version}"]
