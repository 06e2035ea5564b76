"""Vectors with known angles between them: records on a plane, and its first axis, so
that similarities are exact cosines."""

from __future__ import annotations

import numpy as np

DIM = 384

ANGLES = [i * 10.0 for i in range(10)]
GEO_IDS = [f"g{i}" for i in range(10)]


def plane_vectors(angles_deg: list[float], dim: int = DIM) -> np.ndarray:
    out = np.zeros((len(angles_deg), dim), dtype=np.float32)
    rad = np.radians(angles_deg)
    out[:, 0] = np.cos(rad)
    out[:, 1] = np.sin(rad)
    return out


def axis(dim: int = DIM) -> np.ndarray:
    e0 = np.zeros(dim, dtype=np.float32)
    e0[0] = 1.0
    return e0
