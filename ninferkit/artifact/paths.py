"""Where the model file of a profile lives on disk (generated, or pinned and downloaded).

The file always lands inside local_dir: the profile refuses a filename that leaves it (`..`, an
absolute path), and a direct URL whose last path segment, decoded, is not a plain file name.
"""

from __future__ import annotations

from pathlib import Path

from ninferkit.cache import cache_dir
from ninferkit.engines.llama_server.embedded import generate_model, model_file_name
from ninferkit.errors import ArtifactError, ProfileError
from ninferkit.params.profile import Profile, url_file_name


def local_dir(profile: Profile) -> Path:
    """artifact.local_dir, or the models folder of the cache ($NINFERKIT_CACHE, default ~/.cache/ninferkit)."""
    configured = profile.artifact.local_dir
    return Path(configured).expanduser() if configured else cache_dir() / "models"


def planned_path(profile: Profile) -> Path:
    """Where the model file is or will be, without creating it; ProfileError for a running server's model."""
    artifact = profile.artifact
    if artifact.served:
        raise ProfileError("artifact.served: true: the model is a running server's, so there is no model file here "
                           "and nothing to launch; measure that server with --url (ninferkit sweep --url URL)")
    if artifact.generate is not None:
        return local_dir(profile) / model_file_name(artifact.generate)
    return local_dir(profile) / (artifact.filename or url_file_name(artifact.url or ""))


def model_path(profile: Profile) -> Path:
    """The model file the server loads: generated on first use, or a pinned file already downloaded."""
    artifact = profile.artifact
    if artifact.generate is not None:
        return generate_model(artifact.generate, local_dir(profile))
    path = planned_path(profile)
    if not path.exists():
        raise ArtifactError(f"{path} does not exist; run the verify step (01_artifact_verify) to download it")
    return path
