"""Tables of measured rows as fixed-width text and as Markdown. Columns are ``(key, header, format)`` triples,
e.g. ``("busbw", "busbw (GB/s)", "{:.2f}")``; rows are dicts or have ``as_dict()``."""

import unicodedata


def as_dict(row) -> dict:
    """A row as a dict: measured rows are dataclasses with ``as_dict()``, or dicts already."""
    return row.as_dict() if hasattr(row, "as_dict") else dict(row)


def cell_text(value, fmt: str) -> str:
    """``fmt.format(value)``; "-" for None; ``str(value)`` when the format does not fit the value."""
    if value is None:
        return "-"
    try:
        return fmt.format(value)
    except (ValueError, TypeError):
        return str(value)


def _width(text: str) -> int:
    """Columns ``text`` takes in a terminal: a CJK character takes two."""
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def format_table(rows, columns, sep: str = "  ", title: str = "", left=()) -> str:
    """A fixed-width text table under ``title``: a header line, a rule, one line per row; the first column and
    those whose key is in ``left`` left-aligned, the others right-aligned."""
    cells = [[cell_text(as_dict(r).get(k), f) for k, _, f in columns] for r in rows]
    heads = [h for _, h, _ in columns]
    widths = [max(_width(v) for v in [h] + [line[i] for line in cells]) for i, h in enumerate(heads)]

    def line(values):
        pads = [" " * (w - _width(v)) for v, w in zip(values, widths)]
        return sep.join(
            v + pad if i == 0 or columns[i][0] in left else pad + v for i, (v, pad) in enumerate(zip(values, pads))
        ).rstrip()

    head = line(heads)
    return "\n".join(([title] if title else []) + [head, "-" * _width(head)] + [line(c) for c in cells])


def markdown_table(rows, columns) -> str:
    """A Markdown table (pipes and line breaks inside values are escaped)."""
    lines = [[h for _, h, _ in columns], ["---"] * len(columns)]
    escaped = lambda r, k, f: cell_text(as_dict(r).get(k), f).replace("|", "\\|").replace("\n", " ")
    lines += [[escaped(r, k, f) for k, _, f in columns] for r in rows]
    return "\n".join("| " + " | ".join(line) + " |" for line in lines)
