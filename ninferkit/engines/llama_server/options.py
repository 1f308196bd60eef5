"""The `serve` section of a llama-server profile."""

from __future__ import annotations

from pydantic import Field, field_validator

from ninferkit.params.base import Section, shaped
from ninferkit.params.history import Upgrade
from ninferkit.params.serve import ServeSection

HAS_BUILD = True
"""engine.build says how llama-server is built (llama.cpp's source, the CPU or CUDA backend)."""
RECORDED_UPGRADES: tuple[Upgrade, ...] = ()
"""Fields of this engine's profile an older ninferkit recorded (params/history.py): the shared rules read them."""



class Spec(Section):
    """Speculative decoding: `--spec-type` and its own options. Which types and options exist is read from the
    binary's `--help` at launch, so a build that lacks one is refused by name before the server starts."""

    method: str | None = Field(None, **shaped(r"^[a-z0-9][a-z0-9-]*$",
                                              "a --spec-type name: lowercase letters, digits and '-'"),
                               description="--spec-type: ngram-mod, ngram-simple, ngram-map-k, ngram-map-k4v, "
                               "ngram-cache (no draft model), or a draft-* type (a draft model or draft heads); "
                               "null: off")
    options: dict[str, int | float | str] = Field(
        default_factory=dict, description="the method's options by their flag name after --spec-<ngram type>- or "
        "--spec-draft- (ngram-mod: n-min, n-max, n-match; ngram-simple: size-n, size-m, min-hits; draft-*: n-max, "
        "n-min, p-min, model)")

    @field_validator("options")
    @classmethod
    def _option_names(cls, value: dict[str, int | float | str]) -> dict[str, int | float | str]:
        bad = [name for name in value if not name.replace("-", "").isalnum() or name.startswith("-")]
        if bad:
            raise ValueError(f"keys are option names such as n-max (the flag without --spec-<method>-); got {bad}")
        return value


class Serve(ServeSection):
    threads: int | None = Field(None, ge=1, le=1024, description="-t: CPU threads for generation")
    spec: Spec = Spec()

    def speculation(self) -> tuple[str | None, int | None]:
        drafted = self.spec.options.get("n-max")
        return self.spec.method, drafted if isinstance(drafted, int) else None
