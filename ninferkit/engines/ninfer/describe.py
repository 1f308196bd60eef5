"""What a NInfer log says about the server that printed it, beyond its ledger and failures.

For `ninferkit diagnose` on a server someone started by hand: which builds of the table print such a
log (its line format, the containers its reader accepts when it refused a file, the options its
usage text lists, an option it did not know), every line read and the ones that were not, and one
row per request.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from ninferkit.engines.ninfer.builds import BUILDS, Build, containers_from_log, detect_build
from ninferkit.engines.ninfer.diagnoses import UNKNOWN_ARGUMENT
from ninferkit.engines.ninfer.logs import Line, log_format_of, read_log, requests_from_lines
from ninferkit.engines.ninfer.reading import LOG_FORMATS, LogFormat


def _log_format(log_text: str, lines: list[Line]) -> tuple[LogFormat | None, str | None]:
    """The format of the log's lines and how it was told: by their prefix, or (for bare messages, as the
    field reports quote them) by their pipe shape, which only one format has."""
    fmt = log_format_of(log_text)
    if fmt is not None:
        return fmt, "the lines' prefix"
    readers = {line.reader for line in lines if line.reader is not None}
    if readers == {"pipe"}:
        return "pipe", "the messages' `what | value` shape (printed without their prefix)"
    return None, None


def _options(lines: list[Line]) -> frozenset[str] | None:
    usage = "\n".join(line.text for line in lines if line.kind == "usage")
    return detect_build(usage).options if "--max-context" in usage else None


def matching_builds(log_text: str, lines: list[Line]) -> dict[str, Any]:
    """The table's builds that print a log like this one, and the facts that chose them."""
    fmt, told_by = _log_format(log_text, lines)
    containers = containers_from_log(log_text)
    options = _options(lines)
    refused = {found["arg"] for found in re.finditer(UNKNOWN_ARGUMENT, log_text) if found["arg"].startswith("--")}
    evidence = []
    if fmt is not None:
        evidence.append(f"log format {fmt}: {LOG_FORMATS[fmt]}, told by {told_by}")
    if containers is not None:
        evidence.append(f"its reader refused a file and accepts container "
                        f"{' or '.join(f'v{v}' for v in sorted(containers))}")
    if options is not None:
        evidence.append(f"its usage text lists {len(options)} options")
    if refused:
        evidence.append(f"it does not know {', '.join(sorted(refused))}")
    names = [name for name, build in BUILDS.items()
             if (fmt is None or build.log_format == fmt)
             and (containers is None or build.containers == containers)
             and (options is None or build.options == options)
             and not refused & build.options]
    return {"log_format": fmt, "containers_read": sorted(containers) if containers is not None else None,
            "usage_options": sorted(options) if options is not None else None,
            "unknown_options": sorted(refused), "builds": names, "evidence": evidence}


def _differences(build: Build, found: dict[str, Any]) -> list[str]:
    """How the profile's build (its table row) differs from what the log shows."""
    out = []
    if found["log_format"] is not None and build.log_format != found["log_format"]:
        out.append(f"its row prints {build.log_format} lines; the log's are {found['log_format']}")
    containers = found["containers_read"]
    if containers is not None and sorted(build.containers or ()) != containers:
        out.append(f"its row reads containers {sorted(build.containers or ())}; the log's reader accepts "
                   f"{containers}")
    if found["usage_options"] is not None and build.options != frozenset(found["usage_options"]):
        missing = sorted(set(found["usage_options"]) - build.options)
        extra = sorted(build.options - set(found["usage_options"]))
        out.append(f"its row's options differ from the usage text's (not in the row: {', '.join(missing) or '-'}; "
                   f"not in the usage text: {', '.join(extra) or '-'})")
    if known := sorted(set(found["unknown_options"]) & build.options):
        out.append(f"its row has {', '.join(known)}, which the log's build did not know")
    return out


def describe(log_text: str, build: Build | None = None) -> dict[str, Any]:
    """build: the matching table builds (and, given the profile's build, whether it is one of them and how
    it differs); lines: how many of each kind; unread: every line or part of one no rule read; error_lines:
    the numbers of the lines that report a failure; requests: one row per request (logs.requests_from_lines)."""
    lines = read_log(log_text)
    found = matching_builds(log_text, lines)
    if build is not None:
        found.update(profile_build=build.name, profile_build_matches=build.name in found["builds"],
                     profile_build_differences=_differences(build, found))
    return {
        "build": found,
        "lines": dict(Counter(line.kind for line in lines)),
        "unread": [{"line": line.number, "text": line.text, "unread": list(line.unread)}
                   for line in lines if line.unread],
        "error_lines": [line.number for line in lines if line.kind == "error"],
        "requests": requests_from_lines(lines),
    }
