"""A cell of a sweep plan, and the planner that makes one as the profile's engine can run it.

A cell is one point of a table (a prompt length, a task at a depth, a concurrency level, an offered
request rate, a prefix scenario). Its id is a hash of its kind's name and its parameters only, so a rerun
finds the cells it already finished and an A/B pairs the same cell across two profiles (parameters are what
was asked, the same on every engine). The parameters are each kind's own frozen dataclass (sweeps/kinds/);
`CellParams.as_dict` is the record the id hashes, and the rows and the ledger carry.

What the engine does not serve is decided here, from the engine adapter: a cell that needs an API or a
request field the engine does not read is planned as skipped, with the reason; a measuring condition it
does not read (`reasoning_effort`) is left out of its requests and the cell's notes say so; a size its
protocol refuses (Responses: `max_output_tokens` below 16) is raised, and the notes say so.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from ninferkit.engines.api_dialect import ApiDialect
from ninferkit.errors import ProfileError
from ninferkit.measure.client import RESPONSES_MIN_OUTPUT_TOKENS, SEED_APIS
from ninferkit.params.profile import Profile
from ninferkit.params.sweeps import Api
from ninferkit.rundir.servings import VARIANT

TOOLS_NOTE = ("with tools an engine may hold text back until generation ends (NInfer does, IF §4), so the "
              "client's TTFT and decode rate can be the whole request's; the server columns are the measure")


@dataclass(frozen=True, kw_only=True)
class CellParams:
    """What every request of a cell is sent with; a kind's parameters add what its cells vary.

    `as_dict` is the cell's record (its id is the hash of it): every field, except a field named in
    OMITTED_WHEN_NONE while it is None, so a parameter added to a kind keeps the ids of the cells without it,
    and `repeat` while it is 0, so the first repeat of a cell is the cell a run without repeats measured."""

    output_tokens: int
    api: Api
    pin_output: bool
    temperature: float | None
    """None: no temperature sent, the engine's default sampling (`sweeps.temperature: null`)."""
    seed: int | None
    reasoning_effort: str | None = None
    repeat: int = 0
    """Which run of the cell (`sweeps.repeats`), from 0: each repeat is a cell of its own in the ledger and the
    rows (`cell.repeat`), and the tables put the repeats of one cell together (`first_repeat_id`)."""
    variant: str | None = None
    """The profile's variant the cell is measured under (`variants`, issue 39); None: the profile's own serving.
    Left out of the record while None, so a cell of the base keeps the id it had before variants."""

    OMITTED_WHEN_NONE: ClassVar[frozenset[str]] = frozenset()

    def as_dict(self) -> dict[str, Any]:
        return {name: value for name, value in asdict(self).items()
                if not (value is None and (name in self.OMITTED_WHEN_NONE or name == VARIANT))
                and not (name == REPEAT and value == 0)}

    @classmethod
    def recorded(cls, params: dict[str, Any]) -> CellParams:
        """The parameters a ledger entry or a row recorded (`as_dict`'s record), typed again."""
        names = {f.name for f in fields(cls)}
        return cls(**{name: value for name, value in params.items() if name in names})


P = TypeVar("P", bound=CellParams)
REPEAT = "repeat"
"""The parameter that numbers a cell's repeats; absent from a recorded cell for the first (0)."""


def repeat_of(recorded: dict[str, Any]) -> int:
    """A recorded cell's repeat index (0: the first, or a run without repeats)."""
    return int(recorded.get(REPEAT, 0))


def without_repeat(recorded: dict[str, Any]) -> dict[str, Any]:
    """A recorded cell's parameters without its repeat index: what its repeats share."""
    return {name: value for name, value in recorded.items() if name != REPEAT}


def cell_id_of(sweep: str, recorded: dict[str, Any]) -> str:
    """The id of a cell of that kind and recorded parameters: the hash of both."""
    canonical = json.dumps({"sweep": sweep, **recorded}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:12]


def first_repeat_id(sweep: str | None, recorded: dict[str, Any] | None, cell_id: str | None) -> str:
    """The id of a row's cell as a table names it: its first repeat's (the cell's own id without repeats)."""
    if not recorded or REPEAT not in recorded or sweep is None:
        return str(cell_id)
    return cell_id_of(sweep, without_repeat(recorded))


@dataclass(frozen=True)
class Label:
    """A cell parameter in words ('1,024 prompt tokens'); `one` where a value of 1 reads otherwise ('1 client'; "":
    unsaid, the usual value, as a task sent one request at a time).
    Each names a cell in the short label of the write-up's caveats and `compare` too (report.headline's
    `params_label`), so two cells of a sweep never share one."""

    key: str
    words: str = "{}"
    one: str | None = None


class CellKind(Protocol):
    """What a planned cell knows of its kind (a SweepKind, sweeps/kinds/base.py): its name, the parameters that
    name a cell, and how to run one. The runner's arguments are execute.py's, which imports this module."""

    @property
    def name(self) -> str: ...

    @property
    def labels(self) -> tuple[Label, ...]: ...

    def run(self, ctx: Any, cell: Any, record: Any) -> Awaitable[None]: ...


@dataclass(frozen=True)
class Cell(Generic[P]):
    """One measured point: its kind and its parameters (its id); `skip` says why it will not run,
    `request` holds the engine extensions every request of the cell carries, and `notes` what the cell
    sends differently from what was asked, and why."""

    kind: CellKind
    params: P
    skip: str | None = None
    request: dict[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    cell_id: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "cell_id", cell_id_of(self.sweep, self.params.as_dict()))

    @property
    def sweep(self) -> str:
        return self.kind.name

    @property
    def label(self) -> str:
        keys = {label.key for label in self.kind.labels}
        recorded = self.params.as_dict()
        shown = {k: v for k, v in recorded.items() if k in keys}
        for extra in (REPEAT, VARIANT):
            if extra in recorded:
                shown[extra] = recorded[extra]
        return f"{self.sweep} " + " ".join(f"{k}={v}" for k, v in shown.items())

    def as_dict(self) -> dict[str, Any]:
        """The cell as plan.json records it."""
        return {"sweep": self.sweep, "params": self.params.as_dict(), "skip": self.skip, "request": self.request,
                "notes": self.notes, "cell_id": self.cell_id}


def of_variant(cell: Cell[P], variant: str) -> Cell[P]:
    """The cell measured under the profile's variant `variant`: the same requests, its own id."""
    return Cell(cell.kind, replace(cell.params, variant=variant), cell.skip, cell.request, cell.notes)


def repeated(cell: Cell[P], repeat: int) -> Cell[P]:
    """The cell's `repeat`-th run: the same requests, its own id."""
    return Cell(cell.kind, replace(cell.params, repeat=repeat), cell.skip, cell.request, cell.notes)


def sent_output_tokens(api: str, asked: int) -> int:
    """The output length a cell sends: what was asked, raised to the Responses API's floor there."""
    return max(asked, RESPONSES_MIN_OUTPUT_TOKENS) if api == "responses" else asked


class Planner:
    """What the profile's engine serves and reads, asked of its adapter once per plan; `cell` makes a kind's
    cell as this engine can run it (see the module docstring)."""

    def __init__(self, adapter: ApiDialect, profile: Profile, served: dict[str, Any] | None) -> None:
        self.profile = profile
        self.kind = adapter.kind
        self.who = adapter.kind + (f" build {profile.engine.fork}" if profile.engine.fork else "")
        self.apis = adapter.served_apis(profile)
        self.reads = adapter.request_extensions(profile, served)
        self.source = f" (as its {adapter.request_extensions_path} says)" if adapter.request_extensions_path else ""
        sweeps = profile.sweeps
        self.common: dict[str, Any] = {"temperature": sweeps.temperature, "seed": sweeps.seed,
                                       "reasoning_effort": sweeps.reasoning_effort}
        """The sampling every cell is sent with (a kind may override a field: a task's own reasoning_effort)."""

    def fits(self, field_path: str, prompt: int, output: int) -> None:
        """Raises ProfileError, naming the profile field, when a request would not fit the served context."""
        max_context = self.profile.serve.max_context
        if prompt + output > max_context:
            raise ProfileError(f"{field_path}: {prompt} prompt + {output} output tokens exceed serve.max_context "
                               f"= {max_context}; allowed: prompt + output <= {max_context}")

    def cell(self, kind: CellKind, params: P, needs: str | None = None) -> Cell[P]:
        """The cell of `params` as this engine can run it; `needs` is the request field it measures ("tools":
        the agent task's), without which it is skipped."""
        api, notes, request = params.api, [], {}
        sent = sent_output_tokens(api, params.output_tokens)
        if sent != params.output_tokens:
            notes.append(f"output_tokens {params.output_tokens} raised to {sent}: the Responses API refuses "
                         f"max_output_tokens below {RESPONSES_MIN_OUTPUT_TOKENS}")
            params = replace(params, output_tokens=sent)
        if params.seed is not None and api not in SEED_APIS:
            notes.append(f"seed not sent: the {api} API has no seed field")
        effort = params.reasoning_effort
        if effort is not None:
            if api == "chat" and "reasoning_effort" in self.reads:
                request["reasoning_effort"] = effort
            else:
                notes.append(f"reasoning_effort {effort!r} not sent: " + (
                    f"{self.who} does not read it" if api == "chat" else "it is sent on the chat API only"))
        if needs == "tools":
            notes.append(TOOLS_NOTE)
        return Cell(kind, params, self._skip(api, needs), request, tuple(notes))

    def _skip(self, api: str, needs: str | None) -> str | None:
        if api not in self.apis:
            return f"engine {self.kind} does not serve the {api} API (it serves: {', '.join(sorted(self.apis))})"
        if needs == "tools" and api != "chat":
            return f"the agent task is sent with tools on the chat API only, not {api}"
        if needs is not None and needs not in self.reads:
            read = ", ".join(sorted(self.reads)) or "none of them"
            return (f"{self.who} does not read the request field {needs}{self.source}; of the fields ninferkit "
                    f"can measure it reads: {read}")
        return None
