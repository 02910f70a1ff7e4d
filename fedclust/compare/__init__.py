"""The comparison dashboard: `fedclust compare RUN_DIR...` -> one self-contained HTML page."""

from fedclust.compare.page import compare

__all__ = ["compare"]
