"""ninferkit's own errors in a notebook: the message with its fix, as the command line prints it.

A typo in a notebook's parameters cell raised a ProfileError whose message says what is wrong and what is
allowed, but a cell showed it at the end of a 70-line chained traceback (pydantic's validation error and
four ninferkit frames first). An error of the NinferkitError family is raised on purpose, with the next step
in its message, so a cell shows that message alone; any other exception (a bug) keeps IPython's traceback.
The whole chain stays reachable: ``%tb`` in the next cell prints it (the shell's last exception is set, as
IPython's own handler sets it).
"""

from __future__ import annotations

import sys
from types import TracebackType
from typing import Any

from ninferkit.errors import NinferkitError

FULL_TRACEBACK_HINT = "(a ninferkit error: the message says what to do; %tb shows the full traceback)"


def show_short_errors() -> None:
    """In an IPython shell (a notebook's kernel), show NinferkitError as its message from now on; elsewhere
    nothing. IPython's custom exception hook (`set_custom_exc`): the notebooks' first ninferkit call installs
    it, so no notebook carries a cell for it. It replaces another custom hook the shell had."""
    if "IPython" not in sys.modules:  # a plain process that never imported IPython has no shell
        return
    from IPython import get_ipython

    shell = get_ipython()
    if shell is not None:
        shell.set_custom_exc((NinferkitError,), _show_message)


def short_traceback(error: BaseException) -> list[str]:
    """The lines a cell shows for `error`: its class and message, then where the full traceback is."""
    return [*f"{type(error).__name__}: {error}".splitlines(), FULL_TRACEBACK_HINT]


def _show_message(shell: Any, kind: type[BaseException], error: BaseException, traceback: TracebackType | None,
                  tb_offset: int | None = None) -> list[str]:
    sys.last_type, sys.last_value, sys.last_traceback = kind, error, traceback  # what %tb prints
    lines = short_traceback(error)
    shell._showtraceback(kind, error, lines)  # the kernel sends it as the cell's error output
    return lines
