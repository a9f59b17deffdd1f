"""Named random streams: every draw of a run is seeded by the parts that name it (seed, iteration, purpose,
global sample position), so a new draw never shifts another's, and a resumed or re-sharded run repeats them."""

from __future__ import annotations

import random


def seed_of(*parts: object) -> int:
    """A 63-bit seed for the stream named by ``parts``."""
    return random.Random(":".join(map(str, parts))).getrandbits(63)
