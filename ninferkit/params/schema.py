"""The profile's JSON Schema, made from the same pydantic models that validate it, so an editor (VS Code's or
JupyterLab's YAML support, through yaml-language-server) flags a wrong field as the user types it.

`serve` is the one section whose fields depend on another's value: each engine has its own options (its
`options.Serve`), so the schema takes the engine's section where `engine.kind` names it (JSON Schema's if/then),
as the loader does. docs/profile.schema.json is this schema, committed; params/*.yaml name it on their first line.
"""

from __future__ import annotations

from typing import Any

from pydantic.json_schema import models_json_schema

from ninferkit.params.kinds import KINDS, serve_section
from ninferkit.params.profile import Profile

SCHEMA_URI = "https://json-schema.org/draft/2020-12/schema"


def profile_schema() -> dict[str, Any]:
    """The schema of a profile file: the whole profile, with `serve` checked against the named engine's options."""
    sections = {kind: serve_section(kind) for kind in KINDS}
    keys, schema = models_json_schema([(Profile, "validation"), *((section, "validation")
                                                                  for section in sections.values())])
    profile = dict(schema["$defs"].pop(Profile.__name__))
    profile["properties"] = {**profile["properties"],
                             "serve": {"type": "object", "description": "the engine's own options (engine.kind)"}}
    profile["allOf"] = [
        {"if": {"properties": {"engine": {"properties": {"kind": {"const": kind}}, "required": ["kind"]}}},
         "then": {"properties": {"serve": keys[(section, "validation")]}}}
        for kind, section in sections.items()]
    return {"$schema": SCHEMA_URI, "title": "ninferkit profile", **profile, "$defs": schema["$defs"]}
