"""The root of every part of an engine adapter: which engine it is.

An engine adapter is five parts (launcher.py, log_reader.py, api_dialect.py, capacity_rules.py,
setup_rules.py), so a function names the part it needs; each part knows its engine's kind, the
`engine.kind` a profile names and every record carries.
"""

from __future__ import annotations

from typing import ClassVar


class EnginePart:
    """A part of an engine adapter; `kind` is the engine it belongs to, `name` the engine as a reader knows it
    (a post's title names it)."""

    kind: ClassVar[str]
    name: ClassVar[str]
