"""The comparison dashboard: `fedclust compare RUN_DIR...` -> one self-contained HTML page."""

from fedclust.compare.page import compare, compare_parser

__all__ = ["compare", "compare_parser"]
