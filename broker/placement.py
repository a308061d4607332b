"""Weighted rendezvous (highest random weight) hashing: where a key lives among nodes.

score(node) = -weight / ln(h(key, node)), with h uniform in (0, 1) from a hash of the key and
the node; the ``k`` highest scores win. Anyone who knows the nodes and weights computes the
same answer, and adding a node moves only the keys that it now wins.
"""

from __future__ import annotations

import hashlib
import math
import struct
from collections.abc import Mapping

_TWO_64 = float(1 << 64)


def _unit(key: bytes, node: object) -> float:
    """A hash of (key, node) mapped to the open interval (0, 1)."""
    digest = hashlib.blake2b(key + b"\x00" + str(node).encode(), digest_size=8).digest()
    return (struct.unpack(">Q", digest)[0] + 0.5) / _TWO_64


def score(key: str | bytes, node: object, weight: float = 1.0) -> float:
    raw = key.encode() if isinstance(key, str) else bytes(key)
    return -weight / math.log(_unit(raw, node))


def rendezvous(key: str | bytes, nodes: Mapping[object, float], k: int = 1) -> list:
    """The ``k`` nodes with the highest scores for ``key``, best first (ties by node order)."""
    ranked = sorted(
        (n for n, w in nodes.items() if w > 0), key=lambda n: score(key, n, nodes[n]), reverse=True
    )
    return ranked[:k]


__all__ = ["rendezvous", "score"]
