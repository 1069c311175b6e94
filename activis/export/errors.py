"""The one error of exporting: a view or dashboard that cannot become a page as asked."""

from __future__ import annotations


class ExportError(ValueError):
    """An export that cannot be written as asked: a widget a page cannot draw, a bad path or size."""
