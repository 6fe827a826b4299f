"""Reporters: they turn ModelReports into text, JSON, ...; they never see the graph."""

from netlint.report.json_report import SCHEMA_VERSION, json_pieces, to_json
from netlint.report.text import render_text

__all__ = ["SCHEMA_VERSION", "json_pieces", "render_text", "to_json"]
