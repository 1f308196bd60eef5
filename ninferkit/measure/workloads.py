"""Prompts of an exact token length, counted by the server's own tokenizer, and the task suite.

Every prompt is cut from one fixed document shipped with ninferkit (`data/tasks/document.md`),
repeated as often as the target needs, as the field reports do. A cold prompt starts with a unique
salt, so no prefix cache can serve any of it. Lengths are counted by the server (the adapter's
tokenizer endpoint) and the achieved count is returned beside the target: it is recorded, never
assumed. The chat template adds a few tokens around the content; the server's `usage.prompt_tokens`
of each request records the total.

    tokenizer = Tokenizer(url, adapter)
    prompt = exact_prompt(tokenizer, 1024, salt=new_salt())
    prompt.content_tokens  # 1024, as counted by the server

A task is an instruction after the document; the agent task is a conversation instead (system prompt,
tool definitions, earlier tool calls whose results carry the document, then the question), sent with
`tools` (`task_request` builds either).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any, Literal, TypeVar

import httpx
import yaml

from ninferkit import bounded
from ninferkit.engines.api_dialect import ApiDialect
from ninferkit.errors import ProfileError, RequestFailed
from ninferkit.redaction import scrub
from ninferkit.transports import proxy_note, uses_proxy

TASK_NAMES = ("coding", "json_extraction", "summarization", "translation", "reasoning", "bug_root_cause",
              "chit_chat", "fiction", "agent")
TASK_SEPARATOR = "\n\n---\n\n"
NO_MATCH = "No passages matched."


@dataclass(frozen=True)
class ToolCall:
    """An earlier assistant turn of the agent task: the call, and what the tool returned (`record`: a part
    of the document, so the results carry the cell's context depth)."""

    name: str
    arguments: dict[str, Any]
    returns: str


@dataclass(frozen=True)
class Task:
    """One task of the suite, written for this project: its instruction, natural output length, expected
    character and the reasoning effort it is measured at when it names one (the reasoning task: xhigh, seed
    000 §2.3). The agent task adds a system prompt, tool definitions, a first request and the tool calls
    before it. The character is what speculative decoding without a draft model depends on: a `repetitive`
    answer copies text from its prompt or from itself, which an n-gram drafter proposes; a `creative` one
    writes text found in neither (the field reports' acceptance: coding and JSON extraction high, fiction low)."""

    name: str
    instruction: str
    output_tokens: int
    character: Literal["repetitive", "creative"]
    reasoning_effort: str | None = None
    system: str | None = None
    tools: tuple[dict[str, Any], ...] = ()
    request: str | None = None
    calls: tuple[ToolCall, ...] = field(default=())


@dataclass(frozen=True)
class TaskRequest:
    """What a task sends: the messages, the tool definitions (None for a plain task) and the prompt's
    length; for the agent task `prompt.text` is every text it carries, joined, as the server counted it."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    prompt: Prompt


@dataclass(frozen=True)
class Prompt:
    """A prompt's text with the target length and the length the server's tokenizer counted."""

    text: str
    target_tokens: int
    content_tokens: int
    salt: str


def _data(name: str) -> str:
    return resources.files("ninferkit").joinpath("data", "tasks", name).read_text(encoding="utf-8")


@cache
def document() -> str:
    """The fixed source document every prompt is cut from."""
    return _data("document.md")


def load_task(name: str) -> Task:
    """A task of the suite by name; ProfileError for an unknown name, listing the known ones."""
    if name not in TASK_NAMES:
        raise ProfileError(f"task '{name}' is not in the suite; allowed: {', '.join(TASK_NAMES)}")
    data = yaml.safe_load(_data(f"{name}.yaml"))
    calls = tuple(ToolCall(c["name"], dict(c["arguments"]), str(c["returns"])) for c in data.get("calls") or ())
    return Task(data["name"], data["instruction"].strip(), int(data["output_tokens"]), data["character"],
                data.get("reasoning_effort"),
                (data.get("system") or "").strip() or None, tuple(data.get("tools") or ()),
                (data.get("request") or "").strip() or None, calls)


def new_salt() -> str:
    """A unique marker for the front of a prompt: nothing after it can come from a prefix cache."""
    return f"[session {uuid.uuid4().hex[:16]}]\n"


class Tokenizer:
    """Counts tokens with the server's own tokenizer (the adapter names the endpoint).

    Raises RequestFailed when the server does not answer.
    """

    def __init__(self, base_url: str, adapter: ApiDialect, headers: dict[str, str] | None = None,
                 timeout_s: float = 120.0) -> None:
        self.adapter = adapter
        self._http = httpx.Client(base_url=base_url, headers=headers or {}, timeout=timeout_s,
                                  trust_env=uses_proxy(base_url))  # the engine on loopback: never a lab's proxy
        self._deadline_s = 2 * timeout_s
        self._cuts: dict[int, int] = {}

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Tokenizer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def count(self, text: str) -> int:
        """The server's token count of `text`; RequestFailed when it does not answer, or answers without
        a count (a body that is not JSON, or lacks the field the adapter reads)."""
        path, body = self.adapter.tokenize_request(text)
        try:
            with self._http.stream("POST", path, json=body) as streamed:
                answer = bounded.read_body(streamed, bounded.ANSWER_BYTES, self._deadline_s)
            # the answer as read (decoded, capped): what a caller reads of a refusal (status, text)
            httpx.Response(streamed.status_code, content=answer.data, request=streamed.request).raise_for_status()
        except httpx.HTTPError as exc:
            raise RequestFailed(f"counting tokens at {path} failed: {type(exc).__name__}: {exc}"
                                f"{proxy_note(str(self._http.base_url))}; is the server running?") from exc
        if answer.cut is not None:
            raise RequestFailed(f"the tokenizer at {path} answered more than a token count: {answer.cut}")
        try:
            count = self.adapter.token_count(json.loads(answer.data))
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
            raise RequestFailed(f"the tokenizer at {path} answered without a token count ({type(exc).__name__}: "
                                f"{exc}): {scrub(answer.text()[:200])}") from None
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise RequestFailed(f"the tokenizer at {path} answered {count!r}, not a token count")
        return count

    def counts(self, texts: Sequence[str]) -> list[int]:
        """The counts of many texts, each distinct text asked once, TOKENIZE_CONCURRENCY at a time."""
        distinct = list(dict.fromkeys(texts))
        found = dict(zip(distinct, concurrently(self.count, distinct), strict=True))
        return [found[text] for text in texts]

    def body_cut(self, body: str, target: int) -> int:
        """The longest prefix of `body` (in characters) that is at most `target` tokens (memoised)."""
        if target not in self._cuts:
            self._cuts[target] = _longest_prefix(self, body, target)
        return self._cuts[target]


_T = TypeVar("_T")
_R = TypeVar("_R")
TOKENIZE_CONCURRENCY = 8
"""Tokenizer round trips in flight at once when many texts are planned together (a trace's blocks): one at a
time, a 100,000-request trace's 21,675 round trips took 240 s before one request was sent (issue 40)."""


def concurrently(work: Callable[[_T], _R], items: Iterable[_T]) -> list[_R]:
    """`work` over `items` in TOKENIZE_CONCURRENCY threads (each is tokenizer round trips: waiting on the
    server, not the GIL), in order; the first failure is raised."""
    with ThreadPoolExecutor(TOKENIZE_CONCURRENCY) as pool:
        return list(pool.map(work, items))


def _filler(chars: int) -> str:
    """The document repeated, with numbered parts, to at least `chars` characters."""
    doc = document()
    parts = [doc]
    while sum(len(p) for p in parts) < chars:
        parts.append(f"\n\n# Part {len(parts) + 1}\n\n{doc}")
    return "".join(parts)


def _longest_prefix(tokenizer: Tokenizer, text: str, target: int) -> int:
    lo, hi = 0, len(text)
    if tokenizer.count(text) <= target:
        return hi
    while hi - lo > 1:  # invariant: count(text[:lo]) <= target < count(text[:hi])
        mid = (lo + hi) // 2
        if tokenizer.count(text[:mid]) <= target:
            lo = mid
        else:
            hi = mid
    return lo


def exact_text(tokenizer: Tokenizer, target_tokens: int, salt: str = "") -> Prompt:
    """`salt` followed by the document cut so the whole text is `target_tokens` by the server's count.

    The cut for the document alone is searched once per length and reused; the salted text is
    counted again, and searched afresh only when the salt's boundary changes the count.
    """
    if target_tokens < 1:
        raise ProfileError(f"target_tokens = {target_tokens}: must be at least 1")
    salt_tokens = tokenizer.count(salt) if salt else 0
    if salt_tokens >= target_tokens:
        raise ProfileError(f"target_tokens = {target_tokens}: shorter than the salt ({salt_tokens} tokens)")
    body = _filler(target_tokens * 8)
    cut = tokenizer.body_cut(body, target_tokens - salt_tokens)
    text = salt + body[:cut]
    achieved = tokenizer.count(text)
    if achieved != target_tokens:
        full = salt + body
        cut = _longest_prefix(tokenizer, full, target_tokens)
        text = full[:cut]
        achieved = tokenizer.count(text)
    return Prompt(text, target_tokens, achieved, salt)


def exact_prompt(tokenizer: Tokenizer, target_tokens: int, salt: str | None = None) -> Prompt:
    """A cold prompt of `target_tokens`: a fresh salt unless one is given ("" for none)."""
    return exact_text(tokenizer, target_tokens, new_salt() if salt is None else salt)


def task_prompt(tokenizer: Tokenizer, task: Task, context_depth: int, salt: str | None = None) -> Prompt:
    """The task's instruction after `context_depth` tokens of the document (0: the instruction alone).

    `target_tokens` is the depth; `content_tokens` is the server's count of the whole text.
    """
    salt = new_salt() if salt is None else salt
    context = exact_text(tokenizer, context_depth, salt).text if context_depth > 0 else salt
    text = context + TASK_SEPARATOR + task.instruction
    return Prompt(text, context_depth, tokenizer.count(text), salt)


def task_request(tokenizer: Tokenizer, task: Task, context_depth: int, salt: str | None = None) -> TaskRequest:
    """The task at `context_depth` document tokens: a plain task as one user message (`task_prompt`), the
    agent task as its conversation (`agent_conversation`)."""
    if task.tools:
        return agent_conversation(tokenizer, task, context_depth, salt)
    prompt = task_prompt(tokenizer, task, context_depth, salt)
    return TaskRequest(user_messages(prompt.text), None, prompt)


def agent_conversation(tokenizer: Tokenizer, task: Task, context_depth: int, salt: str | None = None) -> TaskRequest:
    """System prompt (salt first: nothing can come from a prefix cache), the first request, each earlier
    tool call with its result, then the question. The document, cut to `context_depth` tokens, is split at
    paragraph breaks over the calls that return `record`."""
    salt = new_salt() if salt is None else salt
    record_calls = [call for call in task.calls if call.returns == "record"]
    record = exact_text(tokenizer, context_depth).text if context_depth > 0 and record_calls else ""
    parts = iter(_split(record, len(record_calls)))
    messages: list[dict[str, Any]] = [{"role": "system", "content": salt + (task.system or "")},
                                      {"role": "user", "content": task.request or ""}]
    texts = [messages[0]["content"], messages[1]["content"]]
    for number, call in enumerate(task.calls, 1):
        arguments = json.dumps(call.arguments)
        result = (next(parts) or NO_MATCH) if call.returns == "record" else call.returns
        messages += [{"role": "assistant", "content": "",
                      "tool_calls": [{"id": f"call_{number}", "type": "function",
                                      "function": {"name": call.name, "arguments": arguments}}]},
                     {"role": "tool", "tool_call_id": f"call_{number}", "content": result}]
        texts += [arguments, result]
    messages.append({"role": "user", "content": task.instruction})
    text = "\n".join([*texts, task.instruction])
    return TaskRequest(messages, [dict(tool) for tool in task.tools],
                       Prompt(text, context_depth, tokenizer.count(text), salt))


def _split(text: str, parts: int) -> list[str]:
    """`text` in `parts` pieces of about equal length, each cut after a paragraph break where there is one."""
    bounds = [0]
    for k in range(1, parts):
        target = len(text) * k // parts
        at = text.rfind("\n\n", bounds[-1], target)
        bounds.append(at + 2 if at >= 0 else target)
    bounds.append(len(text))
    return [text[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]


def user_messages(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]
