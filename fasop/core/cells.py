"""Text that leaves fasop for a spreadsheet: CSV cells made safe, and read back.

A cell that starts like a formula (`=`, `+`, `-`, `@`, TAB, CR) is run by a spreadsheet that
opens the CSV (`=cmd|' /C calc'!A1`); OWASP's CSV-injection rule is a leading single quote, which
makes it text. fasop writes every text cell through `spreadsheet_safe` (fasop.report.results) and
reads results CSVs back through `spreadsheet_text` (fasop.plans.rowplan), so a name like `-x`
round-trips. Numbers (a float, or text that is a number such as `-1.5`) stay as they are.
"""

from __future__ import annotations

FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
"""First characters that make a spreadsheet read a cell as a formula (OWASP, "CSV Injection")."""


def spreadsheet_safe(text: str) -> str:
    """`text`, with a leading single quote where it starts like a formula and is not a number."""
    if not text.startswith(FORMULA_START) or _is_number(text):
        return text
    return "'" + text


def spreadsheet_text(cell: str) -> str:
    """The text `spreadsheet_safe` was given: the quote it added taken off."""
    if cell.startswith("'") and cell[1:].startswith(FORMULA_START) and not _is_number(cell[1:]):
        return cell[1:]
    return cell


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def one_line(text: str) -> str:
    """`text` with every character that is not printable (a newline, CR, an escape, U+2028)
    written as its Python escape: text for a comment line of a script fasop writes (a file name
    holding a newline and `$(...)` stays inside the comment), or a one-line message."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def counted(n: int, singular: str, plural: str | None = None) -> str:
    """`1 micro-batch`, `2 micro-batches`: a count with its noun in the right number."""
    return f"{n:,} {singular if n == 1 else plural or singular + ('es' if singular.endswith(('h', 's')) else 's')}"
