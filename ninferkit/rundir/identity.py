"""What was measured: the serving identity a row, a ledger line and a table row are kept, resumed and pooled by.

A result depends on the engine and its build, the model's bytes and the serve options that change behaviour;
it does not depend on the port, the host, a path, the run directory, a key variable's name or a timeout. The
whole profile's hash (params/load.py) changes with all of those, so results keyed by it were re-measured on a
new port and never pooled across a fleet (issue 37). A `ServingIdentity` holds only what affects the numbers,
as flat dotted keys (`serve.kv.dtype`), and only the values known: a launched server's are facts (`proven`),
a `--url` server's or an imported run's are what it said of itself.

Ids may drift when the profile schema gains a field with a default, so equality goes field by field
(`same_serving`), the id being only the fast path. A path-valued option (`serve.request_log_jsonl`) becomes
"on": whether the engine writes a file can cost time, where it writes it cannot. `serve.extra_args` is kept
verbatim, so a path inside it changes the identity.

Old ledger lines and rows carry no `serving_id`: `entry_serving_id` maps them through the manifest (the
recorded profile hash to its identity, `profile_history` entries to theirs), else to `legacy-<hash>`, an
identity comparable only with itself.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ninferkit.errors import ProfileError
from ninferkit.params.load import apply_override, validate_profile
from ninferkit.params.profile import Profile
from ninferkit.params.variants import Variant
from ninferkit.redaction import scrub
from ninferkit.rundir.recorded import recorded_profile

EXCLUDED_SERVE = frozenset({"host", "port", "container_port", "api_key_env", "startup_timeout_s", "gpu_devices",
                            "model_id", "checkpoint_quantization"})
"""Serve options that never change a number: where it listens, the key's variable, how long it may take to
start, which device ids it gets (the card is the host's), the model's public id (`model.id` states it) and what
the profile states of the checkpoint's quantization (no flag: its bytes, `model.sha256`, are the checkpoint)."""
PATH_SUFFIXES = ("_jsonl", "_path", "_dir", "_file")
ENGINE_KEYS = ("fork", "docker_image", "version")
BUILD_KEYS = ("source", "commit", "backend", "cuda_arch")
SHORT = {"serve.kv.dtype": "kv", "serve.kv.capacity": "kv pool", "serve.spec.method": "speculation",
         "serve.spec.draft_tokens": "draft tokens", "engine.binary_sha256": "binary", "model.sha256": "model",
         "model.id": "model id", "engine.version": "engine version", "engine.kind": "engine"}
"""Readable names of the fields messages name; others are shown without their `serve.` prefix."""
UNSET = "unset"
"""How a field a launched serving does not set reads beside one that sets it."""
UNPROVEN_BASIS = ("engine.kind", "engine.version", "model.id", "serve.max_context")
"""What a server ninferkit did not launch tells of itself, and what two such runs are compared on."""


@dataclass(frozen=True)
class ServingIdentity:
    """The fields of a serving that affect its numbers (flat dotted keys, known values only)."""

    fields: dict[str, Any]
    proven: bool = True
    """ninferkit launched the server: its build and model bytes are facts, not what a server said."""
    source: str = "launch"
    """launch | url | import | legacy."""
    legacy_of: str | None = field(default=None, compare=False)
    """For a legacy identity: the profile hash it stands for; for an import: the run's id."""

    @property
    def id(self) -> str:
        if self.source in ("legacy", "import") and self.legacy_of:
            return f"{self.source}-{self.legacy_of}"
        text = json.dumps(self.fields, sort_keys=True, separators=(",", ":"), default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    def differences(self, other: ServingIdentity) -> list[str]:
        """What differs, readable: ["kv: f16 vs q8_0"]. Between two launched servings a field only one has is
        one the other left unset ("speculation: ngram-mod vs unset"); otherwise only fields both know count."""
        both = self.proven and other.proven
        keys = self.fields.keys() | other.fields.keys() if both else self.fields.keys() & other.fields.keys()
        return [f"{_name(key)}: {_shown(self.fields.get(key, UNSET))} vs {_shown(other.fields.get(key, UNSET))}"
                for key in sorted(keys) if self.fields.get(key, UNSET) != other.fields.get(key, UNSET)]

    def unknown_in(self, other: ServingIdentity) -> list[str]:
        """The readable names of fields one side knows and the other does not (none between launched servings:
        there an absent field is unset, a difference)."""
        if self.proven and other.proven:
            return []
        return [_name(key) for key in sorted(self.fields.keys() ^ other.fields.keys())]

    def as_record(self) -> dict[str, Any]:
        record: dict[str, Any] = {"id": self.id, "fields": self.fields, "proven": self.proven, "source": self.source}
        if self.legacy_of:
            record["legacy_of"] = self.legacy_of
        return record

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> ServingIdentity:
        return cls(dict(record.get("fields") or {}), bool(record.get("proven", True)),
                   str(record.get("source") or "launch"), record.get("legacy_of"))

    def describe(self) -> str:
        """One line naming the fields a reader checks first."""
        known = [f"{_name(key)} {_shown(self.fields[key])}" for key in
                 ("engine.kind", "engine.version", "model.id", "serve.kv.dtype", "serve.spec.method")
                 if key in self.fields]
        return f"serving {self.id} ({', '.join(known) or 'nothing known'})"


def legacy(profile_hash: str) -> ServingIdentity:
    """The identity of rows of a profile this run no longer records: comparable only with itself."""
    return ServingIdentity({}, proven=False, source="legacy", legacy_of=profile_hash)


def imported(run_id: str, model_id: str | None = None) -> ServingIdentity:
    """The identity of a run imported from another tool's files (interop/): they name no build, model bytes or
    serve options, only the model id the tool requested, so it is comparable on that (with the rest unknown, and
    said), and without one only on the user's word (`--same-serving`)."""
    return ServingIdentity({"model.id": model_id} if model_id else {}, proven=False, source="import",
                           legacy_of=run_id)


def serving_identity(profile: Profile, artifact_sha256: str | None,
                     server: Mapping[str, Any] | None) -> ServingIdentity:
    """The identity of `profile` served by `server` (server.json's fields; None: not launched yet), its model
    file hashed as `artifact_sha256` (artifact.json; None: the profile's pin)."""
    server = server or {}
    engine = profile.engine
    fields: dict[str, Any] = {"engine.kind": engine.kind}
    for key in ENGINE_KEYS:
        fields[f"engine.{key}"] = getattr(engine, key)
    if not fields["engine.version"]:
        fields["engine.version"] = server.get("engine_version")
    if engine.build is not None:
        for key in BUILD_KEYS:
            value = getattr(engine.build, key)
            fields[f"engine.build.{key}"] = scrub(value) if isinstance(value, str) else value
    if engine.binary or engine.build is None or engine.build.source is None:
        # a binary the profile names (or one of no pinned source) is known by its bytes; a build ninferkit made
        # from a pinned source is known by that source, as every host of a fleet compiles its own copy of it
        fields["engine.binary_sha256"] = server.get("binary_sha256")
    external = bool(server.get("external"))
    artifact = profile.artifact
    fields["model.sha256"] = None if external else (artifact_sha256 or artifact.sha256)
    if not fields["model.sha256"] and not external:
        ref = "@".join(filter(None, (artifact.repo or artifact.package or artifact.url, artifact.revision)))
        fields["model.ref"] = "/".join(filter(None, (ref, artifact.filename))) or None
    fields["model.id"] = server.get("model_id") or profile.serve.model_id
    if external:
        fields["serve.max_context"] = profile.serve.max_context
        served = server.get("served_pool") or {}
        fields["serve.kv.capacity"] = served.get("tokens") if isinstance(served, dict) else None
    else:
        fields.update(_serve_fields(profile.serve.model_dump(mode="json")))
    fields["gpu.power_limit_w"] = profile.gpu.power_limit_w
    known = {key: value for key, value in fields.items() if value is not None and value != [] and value != {}}
    return ServingIdentity(known, proven=not external, source="url" if external else "launch")


def _serve_fields(serve: Mapping[str, Any], prefix: str = "serve") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in serve.items():
        if prefix == "serve" and key in EXCLUDED_SERVE:
            continue
        name = f"{prefix}.{key}"
        if isinstance(value, dict) and value and key not in ("docker_env", "options"):
            out.update(_serve_fields(value, name))
        elif key.endswith(PATH_SUFFIXES):
            out[name] = "on" if value else None
        else:
            out[name] = value
    return out


def same_serving(a: ServingIdentity, b: ServingIdentity, *, stated: bool = False) -> tuple[bool, list[str], list[str]]:
    """(pool them?, the fields that differ, the fields only one side knows). Two identities pool when every field
    both know is equal and, where either is unproven, they share the basis an unproven run tells of itself
    (UNPROVEN_BASIS as far as both know it); a legacy identity pools only with itself. `stated`: the user said
    they serve one configuration (`--same-serving`): they pool, and the differences are still returned."""
    differing = a.differences(b)
    unknown = a.unknown_in(b)
    if stated:
        return True, differing, unknown
    if a.source == "legacy" or b.source == "legacy":
        return a.id == b.id, differing, unknown
    if a.proven and b.proven:
        return not differing and not unknown, differing, unknown
    shared = [key for key in UNPROVEN_BASIS if key in a.fields and key in b.fields]
    return not differing and bool(shared), differing, unknown


def manifest_servings(manifest: Mapping[str, Any]) -> dict[str, ServingIdentity]:
    """The identities a run has recorded (`servings` in manifest.json), by id."""
    return {str(key): ServingIdentity.from_record(value)
            for key, value in (manifest.get("servings") or {}).items() if isinstance(value, dict)}


def recorded_identity(manifest: Mapping[str, Any], artifact: Mapping[str, Any] | None,
                      server: Mapping[str, Any] | None) -> ServingIdentity | None:
    """The identity of the profile a manifest records (upgraded to today's schema, rundir/recorded.py), served as
    server.json says; None when a field of that profile cannot be upgraded: its rows then read as legacy."""
    profile = recorded_profile(manifest)
    return None if profile is None else serving_identity(profile, (artifact or {}).get("sha256"), server)


def spec_off_profile(profile: Profile) -> Profile:
    """The profile with speculative decoding off: what the speculation A/B's second server serves."""
    data = profile.model_dump(mode="json")
    apply_override(data, "serve.spec={}")
    return validate_profile(data)


def variant_profile(profile: Profile, variant: Variant) -> Profile:
    """The profile a variant launches: `profile` with the variant's fields set (no variants or objective of its own).
    Raises ProfileError naming the variant and the field when the result is no valid profile (a field the engine
    does not have, a value out of range)."""
    data = profile.model_dump(mode="json")
    where = f"variant {variant.name!r}"
    for item in variant.launch_overrides():
        try:
            apply_override(data, item)
        except ProfileError as exc:
            raise ProfileError(f"{where}: {exc}") from None
    return validate_profile(data, where=where)


def entry_serving_id(line: Mapping[str, Any], manifest: Mapping[str, Any], current: ServingIdentity | None) -> str:
    """The serving id of a ledger line or row: its own; else, for the manifest's recorded profile hash, the
    identity of the manifest's profile (`current`); else a `profile_history` entry's; else legacy."""
    own = line.get("serving_id")
    if isinstance(own, str) and own:
        return own
    profile_hash = line.get("profile_hash")
    if profile_hash and profile_hash == manifest.get("profile_hash") and current is not None:
        return current.id
    for entry in manifest.get("profile_history") or []:
        if isinstance(entry, dict) and entry.get("hash") == profile_hash and entry.get("serving_id"):
            return str(entry["serving_id"])
    return legacy(str(profile_hash or "unknown")).id


def _name(key: str) -> str:
    return SHORT.get(key, key.removeprefix("serve."))


def _shown(value: Any) -> str:
    if isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value):
        return value[:12]
    return json.dumps(value) if isinstance(value, (list, dict, bool)) else str(value)
