"""An OSError as a sentence: the path, what ninferkit was doing with it, the fix; the traceback kept in the run.

On the H200 the sweeps step failed after writing every table with a bare `[Errno 2] No such file or directory`:
no file name, no traceback kept, "fix: —" in the post (issue 29). An OSError is the operating system's answer
to one call; the call's frame says what ninferkit was doing. So every step (steps/notebook.py) and every command
(cli/) turns an OSError into FileProblem: the step or command, the ninferkit function that met it (file and
line), the OS's words with the path it named (or that it named none), a fix by errno, and where the
traceback went (the run's logs/ninferkit-errors.log, else a temporary file). A FileProblem is a
NinferkitError, so a notebook shows its message alone and the runner records it, fix included, for the
post's "Errors met".
"""

from __future__ import annotations

import errno
import os
import re
import tempfile
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType

from ninferkit.errors import NinferkitError
from ninferkit.redaction import scrub

ERRORS_LOG = "ninferkit-errors.log"
"""The file under a run's logs/ that keeps the tracebacks of the errors its steps and commands met."""
_PACKAGE = Path(__file__).resolve().parent


class FileProblem(NinferkitError):
    """An OSError a step or command met, named (path, action, fix) and with its traceback kept."""

    def __init__(self, message: str, path: str | None, traceback_file: Path) -> None:
        super().__init__(message)
        self.path = path
        self.traceback_file = traceback_file


def os_error_words(exc: OSError) -> str:
    """An OSError as one line that names its file, or says the OS named none (a bare `[Errno 2]` from a
    program that was not found, say), so "fix: —" is never all a reader gets."""
    words = exc.strerror or str(exc)
    if exc.filename is None:
        return f"{words} (errno {exc.errno}; the OS named no file)"
    both = f"{exc.filename} -> {exc.filename2}" if exc.filename2 is not None else str(exc.filename)
    return f"{words}: {both}"


def met_in(trace: TracebackType | None) -> str | None:
    """The innermost ninferkit function of a traceback, as `name (ninferkit/x.py:LINE)`: what ninferkit was
    doing when the OS refused (None when no frame is ninferkit's)."""
    found = None
    for frame in traceback.extract_tb(trace):
        path = Path(frame.filename)
        if path.is_relative_to(_PACKAGE) and path.name != "os_errors.py":
            found = f"{frame.name} (ninferkit/{path.relative_to(_PACKAGE).as_posix()}:{frame.lineno})"
    return found


def fix_for(exc: OSError) -> str:
    """What to do about an OSError, by its errno."""
    path = exc.filename
    if exc.errno == errno.ENOENT:
        if path is None:
            return ("the OS named no file: a program ninferkit starts is not installed, or the working directory "
                    "was removed; the traceback says which call")
        return f"{path} (or a folder above it) does not exist now; was it moved or removed while the step ran? " \
               "Run the step again"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return f"check the owner and mode of {path or 'the file'} (ls -l); run as the user who owns the run directory"
    if exc.errno == errno.EROFS:
        return f"{path or 'the file'} is on a read-only file system: give a run directory on a writable one"
    if exc.errno == errno.EEXIST:
        return f"{path} already exists where ninferkit makes a folder or a new file: move it aside or remove it"
    if exc.errno == errno.ENAMETOOLONG:
        return "a name in the path is over 255 bytes (or the path over 4,096): give a shorter one"
    if exc.errno in (errno.ENOTDIR, errno.EISDIR):
        return f"a file stands where a folder belongs, or a folder where a file belongs: {path}; remove it"
    return "see the traceback"


BARE_OS_ERROR = re.compile(r"\[Errno (\d+)\] ([^:\n]+)")
"""An OSError as str() writes one that names no file, the whole of a recorded step error: what a ninferkit
before FileProblem recorded (the H200 run of 2026-12-02's sweeps step: "[Errno 2] No such file or directory")."""


def recorded_bare(error: str, steps: str, run_dir_name: str) -> tuple[str, str] | None:
    """(the error in words, what to do) for a step error recorded as a bare OSError (`BARE_OS_ERROR`), which names
    no file and kept no traceback; None for any other error. Nothing in the run can name the file now, so the
    fix is to run `steps` (the failed step and those its failure left unrun) again with a ninferkit that names it
    (FileProblem)."""
    if BARE_OS_ERROR.fullmatch(error.strip()) is None:
        return None
    return (f"{error.strip()}: the OS named no file, and the ninferkit that made this run recorded no file and no "
            "traceback",
            f"run the steps left again with this ninferkit (`ninferkit run PROFILE --run-dir {run_dir_name} --steps "
            f"{steps}`): it names the file and the call that met it, and keeps the traceback in logs/{ERRORS_LOG}")


def keep_traceback(run_dir: Path | None, error: BaseException) -> Path:
    """Append `error`'s traceback (scrubbed of secrets) to the run's logs/ninferkit-errors.log, else to a new
    temporary file; the file it went to. Never written through a symbolic link planted there."""
    text = scrub("".join(traceback.format_exception(error)))
    if run_dir is not None:
        folder = run_dir / "logs"
        try:  # the run's path itself may be what fails (a name over 255 bytes: issue 40), is_dir included
            if run_dir.is_dir() and not folder.is_symlink():
                folder.mkdir(exist_ok=True)
                path = folder / ERRORS_LOG
                fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)
                with os.fdopen(fd, "w") as handle:
                    handle.write(text)
                return path
        except OSError:
            pass  # the run's folder is what failed: a temporary file keeps it
    fd, name = tempfile.mkstemp(prefix="ninferkit-error-", suffix=".log")
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    return Path(name)


def named(exc: OSError, doing: str, run_dir: Path | None) -> FileProblem:
    """`exc` as a FileProblem: `doing` (the step or command), where ninferkit met it, the OS's words and path,
    the fix, and the file its traceback was kept in."""
    kept = keep_traceback(run_dir, exc)
    where = met_in(exc.__traceback__)
    return FileProblem(f"{doing}{f', in {where}' if where else ''}: {os_error_words(exc)}. Fix: {fix_for(exc)}; "
                       f"the traceback is in {kept}", None if exc.filename is None else str(exc.filename), kept)


@contextmanager
def os_errors_named(doing: str, run_dir: Path | None) -> Iterator[None]:
    """Within the block, an OSError becomes FileProblem (`named`)."""
    try:
        yield
    except OSError as exc:
        raise named(exc, doing, run_dir) from exc
