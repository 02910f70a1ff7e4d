"""What a method needs to know about the data to build its networks (shapes, classes, client sizes)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DataInfo:
    """What a method needs to know about the data to build its networks."""

    num_classes: int
    in_channels: int  # 0 for vector data
    input_size: int  # image side, 0 for vector data
    num_features: int  # numbers per sample (C*H*W or d)
    is_image: bool
    min_client_size: int = 0  # samples of the smallest client (0: not partitioned yet)
    has_labels: bool = True  # False: num_classes is 0 and nothing can default to it (a user's unlabelled data)
