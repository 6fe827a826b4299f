"""Reporters: they turn ModelReports into text, JSON, ...; they never see the graph."""

from netlint.report.json_report import SCHEMA_VERSION, to_json
from netlint.report.text import render_text

__all__ = ["SCHEMA_VERSION", "render_text", "to_json"]
