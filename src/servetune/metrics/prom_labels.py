"""Reading the parts of one exposition line: a label block ``{k="v",…}`` (the fast path for
the common case, the careful one for escapes, spacing and quoted UTF-8 metric names) and a
sample value (``NaN``, ``+Inf``, ``-Inf``); shared by the full parser and the reducer."""

from __future__ import annotations

Labels = dict[str, str]


def parse_float(text: str) -> float | None:
    """A sample value or ``le``: Go-style floats, ``NaN``, ``+Inf``, ``-Inf`` (any case)."""
    try:
        return float(text)
    except ValueError:
        return None


def unescape(text: str) -> str:
    if "\\" not in text:
        return text
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "\\" and i + 1 < n:
            nxt = text[i + 1]
            out.append("\n" if nxt == "n" else nxt)
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def fast_labels(line: str, brace: int) -> tuple[Labels, int]:
    """The common case in a few C-level string calls: no backslash, ``k="v"`` pairs joined by
    ``,`` with no spaces. Anything else returns index -1 and takes the careful path."""
    if "\\" in line:
        return {}, -1
    end = line.find('"}', brace)
    if end < 0:
        return {}, -1
    labels: Labels = {}
    for part in line[brace + 1 : end].split('",'):
        key, sep, val = part.partition('="')
        if not sep or not key or '"' in key or "=" in key or " " in key or "," in key:
            return {}, -1
        labels[key] = val
    return labels, end + 2


def parse_labels(text: str, start: int) -> tuple[Labels, str | None, int]:
    """Parse ``{...}`` from ``text[start] == '{'``. Returns (labels, quoted metric name or None,
    index after ``}``); index -1 when the block is malformed."""
    labels: Labels = {}
    qname: str | None = None
    i = start + 1
    n = len(text)
    while True:
        while i < n and text[i] in " \t,":
            i += 1
        if i >= n:
            return labels, qname, -1
        if text[i] == "}":
            return labels, qname, i + 1
        # label name: bare, or quoted (UTF-8 names, Prometheus 3)
        if text[i] == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            if j >= n:
                return labels, qname, -1
            key = unescape(text[i + 1 : j])
            i = j + 1
            while i < n and text[i] in " \t":
                i += 1
            if i < n and text[i] in ",}":
                # a lone quoted string is the metric name
                qname = key
                continue
        else:
            j = i
            while j < n and text[j] not in "= \t":
                j += 1
            key = text[i:j]
            i = j
            while i < n and text[i] in " \t":
                i += 1
        if i >= n or text[i] != "=" or not key:
            return labels, qname, -1
        i += 1
        while i < n and text[i] in " \t":
            i += 1
        if i >= n or text[i] != '"':
            return labels, qname, -1
        j = i + 1
        has_escape = False
        while j < n and text[j] != '"':
            if text[j] == "\\":
                has_escape = True
                j += 2
            else:
                j += 1
        if j >= n:
            return labels, qname, -1
        raw = text[i + 1 : j]
        labels[key] = unescape(raw) if has_escape else raw
        i = j + 1
