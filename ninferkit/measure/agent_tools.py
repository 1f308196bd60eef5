"""The agent sweep's tools: small, deterministic and local, so a loop's time in the tools is the client's
own and its results are the same on every run and engine.

A workspace of two files (the shipped document as `record.md`, and `notes.txt`), and three tools:
`read_file` (a file's text, cut to READ_CHARS), `search_document` (the document's paragraphs holding every
word of the query, else any, at most three, each cut to PASSAGE_CHARS) and `calculate` (arithmetic on
numbers only, read with `ast`, never `eval`). A call the loop cannot run (arguments that are not a JSON
object, an unknown tool, a missing or mistyped argument) is a parse failure: its result says why, and is
sent back to the model as the tool's answer, as an agent harness does.

A model writes the calls, so a call is hostile input (issue 40): `((9**64)**64)**64` never ended and 100,000
`+` terms raised RecursionError on the event loop, killing the sweep. `run_calls` runs them off the event loop
under a deadline (TOOL_SECONDS), `calculate` refuses an expression over EXPRESSION_CHARS or NESTING deep and
a number over VALUE_BITS before computing it, and any failure of a tool is that tool's answer ("error: ..."),
the model's turn's outcome, never the sweep's.
"""

from __future__ import annotations

import ast
import asyncio
import json
import math
import operator
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ninferkit.bounded import loads_json
from ninferkit.measure.client import StreamedCall
from ninferkit.measure.workloads import document

READ_CHARS = 2000
EXPRESSION_CHARS = 1000
"""The longest expression `calculate` reads: arithmetic a model needs is a line."""
NESTING = 50
"""The deepest expression `calculate` evaluates (operators inside operators), checked before evaluating."""
VALUE_BITS = 1024
"""The largest integer `calculate` computes (about 308 digits, a float's range), refused before it is computed."""
TOOL_SECONDS = 5.0
"""A round trip's tools together: each of them runs in microseconds; past this, each call's answer says so."""
PASSAGE_CHARS = 400
NOTES = ("Operations notes. Night-flow readings are taken between 02:00 and 04:00. Leakage is reported in "
         "megalitres per day. Meter replacements are logged by district.")
"""notes.txt: written for this project."""


def _function(name: str, description: str, argument: str, words: str) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object", "properties": {argument: {"type": "string", "description": words}},
        "required": [argument]}}}


TOOLS: tuple[dict[str, Any], ...] = (
    _function("read_file", "The text of a file of the workspace (record.md, notes.txt).", "path", "the file name"),
    _function("search_document", "Passages of record.md that mention the query's words.", "query", "words to find"),
    _function("calculate", "Evaluates an arithmetic expression (+ - * / ** and parentheses).", "expression",
              "e.g. 17.4 / 0.19"),
)
"""The Chat Completions definitions; `messages_tools` gives the Anthropic Messages form of the same."""


def messages_tools() -> list[dict[str, Any]]:
    """The tools as Anthropic Messages takes them (`name`, `description`, `input_schema`)."""
    return [{"name": t["function"]["name"], "description": t["function"]["description"],
             "input_schema": t["function"]["parameters"]} for t in TOOLS]


@dataclass(frozen=True)
class ToolRun:
    """One call run: whether it could be (`parsed`), the result sent back and the seconds it took."""

    name: str
    parsed: bool
    result: str
    seconds: float


async def run_calls(calls: list[StreamedCall]) -> list[ToolRun]:
    """A round trip's calls, in a thread so the event loop keeps measuring the other sessions, for at most
    TOOL_SECONDS; past it each call's answer is a timeout (the thread's work is bounded, so it ends soon)."""
    if not calls:
        return []
    start = time.perf_counter()
    try:
        return await asyncio.wait_for(asyncio.to_thread(lambda: [run_call(call) for call in calls]), TOOL_SECONDS)
    except TimeoutError:
        spent = time.perf_counter() - start
        return [ToolRun(call.name, True, f"error: the tool did not answer within {TOOL_SECONDS:g} s", spent)
                for call in calls]


def run_call(call: StreamedCall) -> ToolRun:
    """Run a streamed call; a call that cannot run is a parse failure whose result says why, and a tool that
    fails answers with its error."""
    start = time.perf_counter()
    try:
        arguments = loads_json(call.arguments or "{}")
    except ValueError as exc:
        return ToolRun(call.name, False, f"error: the arguments are not JSON ({exc})", time.perf_counter() - start)
    tool, required = _RUN.get(call.name), _ARGUMENT.get(call.name)
    if tool is None or required is None:
        known = ", ".join(_RUN)
        return ToolRun(call.name, False, f"error: no tool named {call.name!r} (tools: {known})",
                       time.perf_counter() - start)
    if not isinstance(arguments, dict) or not isinstance(arguments.get(required), str):
        return ToolRun(call.name, False, f"error: {call.name} takes a string argument {required!r}",
                       time.perf_counter() - start)
    try:
        result = tool(arguments[required])
    except Exception as exc:  # a tool's failure is its answer to the model, never the sweep's
        result = f"error: {type(exc).__name__}: {exc}"[:READ_CHARS]
    return ToolRun(call.name, True, result, time.perf_counter() - start)


def read_file(path: str) -> str:
    files = {"record.md": document(), "notes.txt": NOTES}
    if path not in files:
        return f"error: no file {path!r} (files: {', '.join(files)})"
    return files[path][:READ_CHARS]


def search_document(query: str) -> str:
    words = [w for w in query.lower().split() if w]
    paragraphs = [p.strip() for p in document().split("\n\n") if p.strip()]
    found = [p for p in paragraphs if words and all(w in p.lower() for w in words)] or \
        [p for p in paragraphs if any(w in p.lower() for w in words)]
    return "\n\n".join(p[:PASSAGE_CHARS] for p in found[:3]) or "No passages matched."


_OPERATORS: dict[type, Callable[..., Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.Pow: operator.pow, ast.USub: operator.neg, ast.UAdd: operator.pos}


def calculate(expression: str) -> str:
    """The expression's value, or why it has none; bounded in length, nesting and size before computing."""
    if len(expression) > EXPRESSION_CHARS:
        return f"error: the expression is over {EXPRESSION_CHARS} characters"
    try:
        tree = ast.parse(expression, mode="eval").body
        if _depth(tree) > NESTING:
            return f"error: the expression is nested over {NESTING} deep"
        value = _evaluate(tree)
    except (SyntaxError, ValueError, ZeroDivisionError, OverflowError, TypeError, RecursionError,
            MemoryError) as exc:
        return f"error: {type(exc).__name__}: {exc}"
    return json.dumps({"result": value})


def _depth(tree: ast.AST) -> int:
    """How deep the expression nests, walked without recursion (a deep one would overflow the stack)."""
    deepest, stack = 0, [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        stack += [(child, depth + 1) for child in ast.iter_child_nodes(node)]
    return deepest


def _bits(value: float | int) -> float:
    """An upper bound of a value's size in bits (a float's is its exponent's, which cannot grow past 1,024)."""
    return value.bit_length() if isinstance(value, int) else math.frexp(value)[1] if math.isfinite(value) else 0


def _refuse_large(op: ast.operator, left: float | int, right: float | int) -> None:
    """Refuse an integer power or product over VALUE_BITS before computing it (floats overflow by themselves)."""
    if not (isinstance(left, int) and isinstance(right, int)):
        return
    bits = _bits(left) * right if isinstance(op, ast.Pow) and right > 0 and abs(left) > 1 else \
        _bits(left) + _bits(right) if isinstance(op, ast.Mult) else 0
    if bits > VALUE_BITS:
        raise ValueError(f"the result would be over {VALUE_BITS} bits")


def _evaluate(node: ast.AST) -> float | int:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        if _bits(node.value) > VALUE_BITS:
            raise ValueError(f"a number over {VALUE_BITS} bits")
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        left, right = _evaluate(node.left), _evaluate(node.right)
        _refuse_large(node.op, left, right)
        result = _OPERATORS[type(node.op)](left, right)
        if not isinstance(result, (int, float)):
            raise ValueError(f"the result is not a real number: {result!r}"[:200])
        return result
    if isinstance(node, ast.UnaryOp) and type(node.op) in _OPERATORS:
        unary: float | int = _OPERATORS[type(node.op)](_evaluate(node.operand))
        return unary
    raise ValueError(f"not arithmetic: {ast.dump(node)[:80]}")


_RUN: dict[str, Callable[[str], str]] = {"read_file": read_file, "search_document": search_document,
                                         "calculate": calculate}
_ARGUMENT = {t["function"]["name"]: t["function"]["parameters"]["required"][0] for t in TOOLS}
"""Each tool's one argument."""
