"""Where ninferkit keeps what outlives a run: builds, packages, models, engine facts ($NINFERKIT_CACHE, default
~/.cache/ninferkit). A leaf, so an engine adapter can cache what it learned without importing the build step."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    return Path(os.environ.get("NINFERKIT_CACHE", Path.home() / ".cache" / "ninferkit")).expanduser()
