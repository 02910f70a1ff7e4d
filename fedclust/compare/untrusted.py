"""Reading a run folder's files as untrusted input: a folder may be copied from elsewhere, cut short by a full
disk, edited by hand or still being written. Every file the dashboard reads goes through `read` (and a CSV of
numbers through `read_table`), so a file that cannot be read or is not what it should be becomes one note,
"NAME cannot be read (why): left out" or "NAME is not WHAT (why): left out", the page goes on without it, and
the rows of a table that can be read stay.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Callable, Collection
from pathlib import Path
from typing import TypeVar

import yaml

T = TypeVar("T")

# the text is not what the file should hold (json's decode error is a ValueError; a deeply nested one recurses)
NOT_PARSED = (ValueError, csv.Error, yaml.YAMLError, RecursionError)


def read(path: Path, notes: list[str], what: str, parse: Callable[[str], T]) -> T | None:
    """`parse` of the file's text; None when there is no such file, or, with a note, when it cannot be read as
    UTF-8 text or `parse` raises ValueError (or a CSV, YAML or recursion error) on it."""
    if not path.exists():
        return None
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:  # a folder, no permission, binary bytes
        notes.append(f"{path.name} cannot be read ({reason(error)}): left out")
        return None
    try:
        return parse(text)
    except NOT_PARSED as error:
        notes.append(f"{path.name} is not {what} ({reason(error)}): left out")
        return None


def read_table(path: Path, notes: list[str], what: str, columns: Collection[str] | None = None
               ) -> list[dict[str, float]]:
    """The rows of a CSV of numbers with a `round` column, each as {"round": ..., column: number} for the
    columns named in `columns` (None: every column); an empty cell is nan (not computed). A row with a cell
    that is not a number, or cut short, or with cells beyond the header, is left out, and one note counts them."""
    left_out = []

    def parse(text: str) -> list[dict[str, float]]:
        reader = csv.DictReader(io.StringIO(text))
        names = reader.fieldnames or []
        kept = [name for name in names if name != "round" and (columns is None or name in columns)]
        if "round" not in names or not kept:
            raise ValueError("it needs a round column and " + ("another column" if columns is None else
                                                               "one of the known columns"))
        rows = []
        for row in reader:
            try:
                rows.append(_numbers(row, kept))
            except ValueError:
                left_out.append(row)
        return rows

    rows = read(path, notes, what, parse)
    if rows is None:
        return []
    if left_out:
        notes.append(f"{path.name}: {len(left_out)} of {len(left_out) + len(rows)} rows are not rows of numbers and "
                     "were left out")
    return rows


def _numbers(row: dict, kept: list[str]) -> dict[str, float]:
    if None in row or None in row.values():  # a row cut short, or one with extra cells
        raise ValueError(row)
    parsed = {"round": number(row["round"]), **{name: number(row[name]) for name in kept}}
    if math.isnan(parsed["round"]):
        raise ValueError(row["round"])
    return parsed


def number(value) -> float:
    """A CSV cell or JSON value as a float: empty or null is nan (not computed), anything else not a number
    raises ValueError; infinities are nan (nothing the page draws is infinite)."""
    if value is None or value == "":
        return math.nan
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError(f"{value!r} is not a number")
    try:
        result = float(value)
    except ValueError:
        raise ValueError(f"{value!r} is not a number") from None
    return result if math.isfinite(result) else math.nan


def reason(error: BaseException) -> str:
    """An error's message on one short line, for a note."""
    return " ".join(str(error).split())[:120] or type(error).__name__
