"""Sharded evaluation: one part of a benchmark, chosen by each pair's id, so several processes (or machines) can
judge one evaluation into a shared store and its parts merge into the report one process would have written.

    shard = parse_shard("2/3")                  # Shard(index=2, count=3)
    mine = [p for p in pairs if shard.holds(p.id)]

A pair's shard is a hash of its id modulo the count: it depends neither on the pairs' order nor on which other
shards run, so a rerun, a resume or another machine picks the same pairs. Every pair's judgment is seeded by its
content (`reflectrm.pipeline`), never by its place in a batch, so a pair judged in any shard is judged alike.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from reflectrm.errors import InputError

MAX_SHARDS = 10_000
"""The most shards one evaluation may be split into (more would leave most of them empty)."""


@dataclass(frozen=True, slots=True)
class Shard:
    """Shard `index` of `count` (1-based: "1/3", "2/3", "3/3").

    Attributes:
        index: which shard, from 1 to `count`.
        count: how many shards the evaluation is split into, from 1 to `MAX_SHARDS`.
    """

    index: int
    count: int

    def __post_init__(self) -> None:
        if not 1 <= self.count <= MAX_SHARDS:
            raise InputError(f"--shard {self.index}/{self.count}: the count N must be from 1 to {MAX_SHARDS}: "
                             "give K/N, e.g. 1/3")
        if not 1 <= self.index <= self.count:
            raise InputError(f"--shard {self.index}/{self.count}: K must be from 1 to N={self.count}: "
                             f"give 1/{self.count} to {self.count}/{self.count}")

    def holds(self, item_id: str) -> bool:
        """Whether the pair with this id belongs to this shard."""
        return shard_of(item_id, self.count) == self.index

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def shard_of(item_id: str, count: int) -> int:
    """The shard (1 to `count`) a pair id falls in: a sha256 of the id, modulo `count`."""
    digest = hashlib.sha256(item_id.encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:8], "big") % count + 1


def parse_shard(text: str) -> Shard:
    """`"K/N"` -> Shard(K, N); anything else refused in one line that says what to give."""
    parts = text.strip().split("/")
    numbers = [p.strip() for p in parts]
    if len(parts) != 2 or not all(n.isascii() and n.isdigit() and len(n) <= 6 for n in numbers):
        raise InputError(f"--shard {text[:40]!r} is not K/N: give this shard's number and the number of shards, "
                         f"e.g. --shard 1/3 (N up to {MAX_SHARDS})")
    return Shard(int(numbers[0]), int(numbers[1]))
