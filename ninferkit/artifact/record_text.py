"""An artifact record for people: a few lines (`describe`) and its checks as a table (01_artifact_verify shows both)."""

from __future__ import annotations

import pandas as pd

from ninferkit.rundir.records import ArtifactRecord


def describe(record: ArtifactRecord) -> str:
    """A few lines for people: what was checked, where it came from, how fast it hashed."""
    source = record.source
    origin = source["url"] or {
        "local": "already in place (no source to fetch it from)",
        "package": f"{source.get('filename')} inside the wheel of {source.get('package')} (wheel sha256 "
                   f"{source.get('package_sha256')}, required by pip)",
    }.get(source["kind"], "generated locally")
    if source.get("revision"):
        origin += f" (revision {source['revision']}, {'pinned' if source['pinned'] else 'NOT pinned'})"
    rate = record.verification["sha256_bytes_per_s"]
    files = record.files or []
    lines = [
        f"artifact   {record.path}",
        f"source     {origin}",
        f"size       {record.size_bytes:,} bytes" + (f" in {len(files)} files" if files else ""),
        f"sha256     {record.sha256}" + (f"  ({rate / 2**20:,.0f} MiB/s)" if rate else "")
        if not files else f"sha256     per file ({sum(1 for f in files if f['ok'])} of {len(files)} as pinned)",
        "container  " + (f"v{record.container_version}" if record.container_version else "not a .ninfer file"),
    ]
    tarball = record.engine_tarball
    if tarball:
        lines.append(f"engine     {tarball['path']}: sha256 {tarball['sha256']}"
                     + (" (as pinned)" if tarball["ok"] and tarball["expected_sha256"] else ""))
    lines += [f"warning    {text}" for text in record.warnings]
    lines.append("verdict    " + ("all checks passed" if record.ok else "; ".join(record.problems)))
    return "\n".join(lines)


def verification_table(record: ArtifactRecord) -> pd.DataFrame:
    """Each check of the file as a row: name, expected, actual, ok."""
    return pd.DataFrame([check.model_dump() for check in record.checks], columns=["name", "expected", "actual", "ok"])
