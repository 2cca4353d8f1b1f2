"""Markdown text: the tables of every summary.md (the sweep report's, a tuning study's
selection, the ESGD study's)."""

from __future__ import annotations

import pandas as pd


def markdown_table(frame: pd.DataFrame, index: bool = True) -> str:
    """A GitHub-flavoured Markdown table (no tabulate dependency)."""
    if index:
        frame = frame.reset_index()
    header = [str(c) for c in frame.columns]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    for row in frame.itertuples(index=False):
        cells = [str(v).replace("|", "\\|") for v in row]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
