"""The one refusal of non-finite features, numpy only: the run (own_data.feature_matrix) and the command line's
torch-free first pass (fedclust/precheck/features_file.py) both call it, so a file holding NaN reads the same both
ways."""

from __future__ import annotations

import numpy as np

from fedclust.errors import DataFileError


def refuse_non_finite(blocks: dict[str, np.ndarray], source: str) -> None:
    """DataFileError naming the first column (in the given order) holding NaN, infinity or a value beyond float32."""
    for name, block in blocks.items():
        with np.errstate(over="ignore"):  # a value beyond float32 becomes inf, refused here by name
            bad = np.flatnonzero(~np.isfinite(block.astype(np.float32)).all(axis=1))
        if len(bad):
            raise DataFileError(f"{source}: column {name!r} holds NaN (missing), infinite or too large values "
                                f"({len(bad)} rows, the first is row {int(bad[0])}); features must be finite "
                                "numbers: drop or fill those rows")
