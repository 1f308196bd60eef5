"""What a command prints for a person or a log: tables and long lines fitted to 100 columns, plain text.

Tables are rich's: it measures each column and wraps the widest cells at word boundaries until the table fits the
width, and it renders to a string, so what is printed holds no colour code, no cursor move and no carriage return
whether stdout is a terminal, a pipe or a Jupyter kernel (whose FORCE_COLOR would otherwise turn colour on).
The width is the terminal's where it is narrower than 100 columns, else 100.
"""

from __future__ import annotations

import io
import shutil
import textwrap
from collections.abc import Collection, Sequence

WIDTH = 100
"""The most columns a line of a command's answer takes: a log viewer, a phone or half a screen shows it whole."""


def width() -> int:
    """WIDTH, or the terminal's columns where fewer (`COLUMNS` where set; WIDTH in a pipe)."""
    return min(WIDTH, shutil.get_terminal_size((WIDTH, 24)).columns)


def table(header: Sequence[str], rows: Sequence[Sequence[str]], *, right: Collection[int] = (),
          no_wrap: Collection[int] = (), spaced: bool = False) -> str:
    """`rows` under `header` as aligned plain text that fits `width()`: the columns numbered in `right` are
    right-aligned (numbers), those in `no_wrap` are never wrapped (a short number a wrap would split);
    the others wrap at word boundaries where the table is too wide. `spaced`: a blank line between rows, for
    rows of several lines."""
    from rich import box
    from rich.console import Console
    from rich.table import Table

    shown = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, header_style="", expand=False,
                  leading=int(spaced))
    for index, name in enumerate(header):
        shown.add_column(name, justify="right" if index in right else "left", no_wrap=index in no_wrap,
                         overflow="fold")
    for row in rows:
        shown.add_row(*row)
    out = io.StringIO()
    Console(file=out, width=width(), color_system=None, force_terminal=False, force_jupyter=False,
            no_color=True, highlight=False, emoji=False, markup=False).print(shown)
    return "\n".join(line.rstrip() for line in out.getvalue().splitlines())


def wrapped(text: str, indent: str = "  ") -> str:
    """A long line (a formula, a reason) wrapped to `width()`, its continuation lines indented by `indent`."""
    return textwrap.fill(text, width(), subsequent_indent=indent, break_long_words=False, break_on_hyphens=False)
