"""A small image data set made on the spot: noisy 16x16 drawings of four shapes
(chapter 3.3's images).

Each image is one outline drawn in grey on black, at a random place and size, with a
random stroke width and brightness, then Gaussian noise: a ring, a square, a plus-shaped
cross and an X-shaped cross. The two crosses share their strokes' count and length and
differ in angle; the ring and the square differ only at the corners; so the classes are
told apart by local patterns of edges, what a convolution looks for, and not by how
many pixels are lit. Nothing is downloaded: a seed fixes every image.

Example:
    >>> from sitp.data.shapes import CLASSES, make_shapes
    >>> X, y = make_shapes(8, seed=0)
    >>> X.shape, X.dtype, y.shape, CLASSES
    ((8, 1, 16, 16), dtype('float32'), (8,), ('ring', 'square', 'plus', 'x'))
"""

from __future__ import annotations

import numpy as np

CLASSES = ("ring", "square", "plus", "x")


def _draw(kind: str, size: int, rng: np.random.Generator) -> np.ndarray:
    """One (size, size) drawing of ``kind``: values in [0, 1] before noise."""
    r = rng.uniform(0.22, 0.4) * size  # half the shape's extent, in pixels
    cy, cx = rng.uniform(r + 0.5, size - 0.5 - r, 2)  # the whole shape stays inside
    width = rng.uniform(0.9, 1.8)  # stroke width, in pixels
    yy, xx = np.mgrid[0:size, 0:size] + 0.5  # pixel centres
    dy, dx = yy - cy, xx - cx
    if kind == "ring":
        dist = np.abs(np.hypot(dy, dx) - r)
    elif kind == "square":  # distance to the outline of the square of half-side r
        dist = np.abs(np.maximum(np.abs(dy), np.abs(dx)) - r)
    elif kind == "plus":
        dist = np.where(
            np.maximum(np.abs(dy), np.abs(dx)) <= r, np.minimum(np.abs(dy), np.abs(dx)), np.inf
        )
    elif kind == "x":
        u, v = (dy + dx) / np.sqrt(2), (dy - dx) / np.sqrt(2)  # the diagonals' frame
        dist = np.where(
            np.maximum(np.abs(u), np.abs(v)) <= r, np.minimum(np.abs(u), np.abs(v)), np.inf
        )
    else:
        raise ValueError(f"unknown shape {kind!r}; the shapes are {CLASSES}")
    # a soft stroke: 1 within half the width of the curve, falling to 0 over a pixel
    return np.clip(width / 2 + 0.5 - dist, 0.0, 1.0)


def make_shapes(
    n: int, size: int = 16, noise: float = 0.35, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """``n`` images and their labels, balanced over :data:`CLASSES` in a random order.

    Args:
        n: how many images.
        size: their side in pixels.
        noise: standard deviation of the Gaussian noise added to every pixel (the
            strokes' brightness is drawn from 0.6 to 1).
        seed: fixes everything; two calls with one seed return the same arrays.

    Returns:
        ``X`` (n, 1, size, size) float32 and ``y`` (n,) int64, class indices into
        :data:`CLASSES`.
    """
    rng = np.random.default_rng(seed)
    y = rng.permutation(np.arange(n) % len(CLASSES)).astype(np.int64)
    X = np.empty((n, 1, size, size), np.float32)
    for i, c in enumerate(y):
        img = _draw(CLASSES[c], size, rng) * rng.uniform(0.6, 1.0)
        X[i, 0] = img + rng.normal(0.0, noise, (size, size))
    return X, y
