"""Which engine a server someone else started is, from what it answers.

`--url` runs measure a server ninferkit did not launch, so there is no profile to say its engine: the
engine is read from the server's own answers (`/v1/models` owned_by, llama-server's `/props`, the
/metrics name prefixes, the `Server` header), each engine's `ApiDialect.served_signs` saying which of them
are its own, so a new engine adds its signs in its own adapter and nothing here. `--engine` names it
instead; a named engine the answers contradict is refused, as are answers that name two engines or none.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx

from ninferkit import bounded
from ninferkit.engines import get_adapter
from ninferkit.errors import BadInput
from ninferkit.params.kinds import KINDS
from ninferkit.transports import uses_proxy


@dataclass
class Answers:
    """What a server answered at the paths that name an engine; None where it did not answer (with why in
    `notes`), never an empty stand-in."""

    url: str
    models: dict[str, Any] | None = None
    props: dict[str, Any] | None = None
    metrics: str | None = None
    server_header: str | None = None
    health_status: int | None = None
    notes: dict[str, str] = field(default_factory=dict)

    def model_ids(self) -> list[str]:
        return [str(model["id"]) for model in (self.models or {}).get("data") or []
                if isinstance(model, dict) and "id" in model]


@dataclass
class Detection:
    """The engine of a server, and the signs each engine found in its answers."""

    kind: str
    signs: dict[str, list[str]]
    given: bool
    version: str | None


def checked_url(url: str) -> str:
    """The server's base URL (scheme, host, port) from what a user typed, with a trailing `/` or `/v1` dropped;
    BadInput for anything that is not an http(s) URL of a host."""
    parts = urlsplit(url.strip())
    path = parts.path.rstrip("/")
    path = path.removesuffix("/v1")
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
        raise BadInput(f"--url {url!r} is not a server's URL; give http(s)://HOST:PORT, e.g. http://127.0.0.1:8000")
    if parts.username or parts.password:
        raise BadInput("--url must not carry credentials; put the API key in an environment variable and name it "
                       "with --api-key-env")
    return f"{parts.scheme}://{parts.netloc}{path}"


def ask(url: str, headers: dict[str, str], key_env: str | None = None) -> Answers:
    """GET /health, /v1/models, /props and /metrics of `url` (each answer bounded, no redirect followed);
    BadInput when the server answers none of them, or refuses the credentials (the key in `key_env`, or none)."""
    answers = Answers(url)
    with httpx.Client(base_url=url, timeout=10.0, headers=headers, trust_env=uses_proxy(url)) as client:
        for path in ("/health", "/v1/models", "/props", "/metrics"):
            try:
                with client.stream("GET", path) as response:
                    status = response.status_code
                    answers.server_header = answers.server_header or response.headers.get("server")
                    body = bounded.read_body(response, bounded.METRICS_BYTES, 10.0)
            except httpx.HTTPError as exc:
                answers.notes[path] = f"{type(exc).__name__}: {exc}"
                continue
            if status in (401, 403):
                raise BadInput(_refused(f"{url}{path}", status, key_env))
            if path == "/health":
                answers.health_status = status
            if 300 <= status < 400:
                where = response.headers.get("location") or "nowhere said"
                answers.notes[path] = f"HTTP {status}, a redirect to {where[:200]} (not followed: give that URL)"
                continue
            if status >= 400 or body.cut:
                answers.notes[path] = f"HTTP {status}" if status >= 400 else f"the answer was {body.cut}"
                continue
            _keep(answers, path, body.text())
    if answers.health_status is None and answers.models is None:
        said = "; ".join(dict.fromkeys(answers.notes.values()))
        raise BadInput(f"{url} does not answer /health or /v1/models ({said}); is the server running, and is that "
                       "its address?")
    return answers


def _refused(where: str, status: int, key_env: str | None) -> str:
    """A 401/403's cause: the key given was refused, or none was given (before issue 40 both read as the second)."""
    if key_env is not None:
        return (f"{where} answered HTTP {status}: the server refused the key in {key_env}; check its value (and that "
                "it is this server's key)")
    return f"{where} answered HTTP {status}: the server wants an API key; export it in a variable and name that " \
           "with --api-key-env"


def _keep(answers: Answers, path: str, text: str) -> None:
    if path == "/metrics":
        answers.metrics = text
        return
    if path == "/health":
        return
    try:
        found = bounded.loads_json(text)
    except ValueError as exc:
        answers.notes[path] = f"not JSON ({exc})"
        return
    if not isinstance(found, dict):
        answers.notes[path] = "not a JSON object"
    elif path == "/v1/models":
        answers.models = found
    else:
        answers.props = found


def signs(answers: Answers) -> dict[str, list[str]]:
    """Each engine's signs in the answers (engines with none left out)."""
    found = {kind: get_adapter(kind).served_signs(answers.models, answers.props, answers.metrics,
                                                  answers.server_header) for kind in KINDS}
    return {kind: phrases for kind, phrases in found.items() if phrases}


def detect(answers: Answers, given: str | None = None) -> Detection:
    """The server's engine: `given` (checked against the signs) or the one engine the signs name."""
    found = signs(answers)
    said = "; ".join(f"{kind}: {', '.join(phrases)}" for kind, phrases in found.items()) or "no engine's signs"
    if given is not None:
        if given not in KINDS:
            raise BadInput(f"--engine {given!r} is not an engine ninferkit drives; allowed: {', '.join(KINDS)}")
        others = [kind for kind in found if kind != given]
        if others and given not in found:
            raise BadInput(f"--engine {given}, but {answers.url} answers as {', '.join(others)} ({said}); "
                           "drop --engine to use what the server says")
        kind = given
    elif len(found) == 1:
        kind = next(iter(found))
    else:
        raise BadInput(f"cannot tell which engine serves {answers.url} ({said}); name it with --engine "
                       f"({', '.join(KINDS)})")
    return Detection(kind, found, given is not None, get_adapter(kind).served_version(answers.props))
