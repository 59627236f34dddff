"""Embeddings in memory: :class:`RaggedVectors` (variable-length vector sequences stored flat) and
:func:`resolve_device` (``"auto"`` -> CUDA when present).

Shared by the encoders that produce vectors, the embedding store that writes and memory-maps them,
document-context vectors, and exact search that scores them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch


def concatenated_ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """``concatenate([arange(s, s + n) for s, n in zip(starts, lengths)])`` (int64), without the loop."""
    lengths = np.asarray(lengths, dtype=np.int64)
    before = np.cumsum(lengths) - lengths
    return np.repeat(np.asarray(starts, dtype=np.int64) - before, lengths) + np.arange(int(lengths.sum()))


@dataclass
class RaggedVectors:
    """Variable-length vector sequences stored flat: item ``i`` is ``vectors[offsets[i]:offsets[i+1]]``.

    Attributes:
        vectors: (n_tokens, dim), float16 / float32, or uint16 holding bfloat16 bit patterns
            (numpy has no bfloat16); may be a read-only memory map.
        offsets: (n_items + 1,) int64, starting at 0.
        bfloat16: ``vectors`` holds bfloat16 bits in uint16.
        first_index: global index of item 0 (a shard's position in the corpus).
        source: where the vectors were read from (a shard directory), for error messages.
    """

    vectors: np.ndarray
    offsets: np.ndarray
    bfloat16: bool = False
    first_index: int = 0
    source: str = ""

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @property
    def dim(self) -> int:
        return int(self.vectors.shape[1])

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def item(self, i: int) -> np.ndarray:
        return self.vectors[self.offsets[i] : self.offsets[i + 1]]

    @classmethod
    def from_list(cls, items: Sequence[np.ndarray], first_index: int = 0) -> RaggedVectors:
        """Pack ``items`` (each (n_i, dim)) into one flat float32 array."""
        offsets = np.zeros(len(items) + 1, dtype=np.int64)
        np.cumsum([len(x) for x in items], out=offsets[1:])
        dim = next((x.shape[1] for x in items if len(x)), 0)
        vectors = (
            np.concatenate([np.asarray(x, dtype=np.float32).reshape(-1, dim) for x in items])
            if len(items)
            else np.zeros((0, dim), np.float32)
        )
        return cls(vectors, offsets, False, first_index)

    def subset(self, items: np.ndarray) -> RaggedVectors:
        """The given items (in that order) as a new, in-memory RaggedVectors."""
        starts, stops = self.offsets[items], self.offsets[np.asarray(items) + 1]
        offsets = np.zeros(len(starts) + 1, dtype=np.int64)
        np.cumsum(stops - starts, out=offsets[1:])
        rows = concatenated_ranges(starts, stops - starts)
        return RaggedVectors(np.asarray(self.vectors[rows]), offsets, self.bfloat16, source=self.source)

    def fp32(self, rows: np.ndarray | slice = slice(None), device: torch.device | str = "cpu") -> torch.Tensor:
        """Rows of ``vectors`` upcast to a float32 tensor (16-bit arithmetic on CPU is slow)."""
        block = self.vectors[rows]  # a slice of a read-only map is read-only: torch takes a copy of it
        block = torch.from_numpy(np.ascontiguousarray(block) if block.flags.writeable else np.array(block))
        if self.bfloat16:
            block = block.view(torch.bfloat16)
        return block.to(device=device, non_blocking=True).float()

    def fp32_into(self, rows: np.ndarray, out: torch.Tensor) -> torch.Tensor:
        """Rows of ``vectors`` upcast into ``out`` ((len(rows), dim) float32, on any device); returns ``out``.

        For buffers reused across shards: filling an existing tensor costs a third of allocating
        a new one of a few hundred MB (no page faults). The rows travel in 16 bits and are upcast
        on ``out``'s device.
        """
        block = torch.from_numpy(np.take(self.vectors, rows, axis=0))
        if self.bfloat16:
            block = block.view(torch.bfloat16)
        return out.copy_(block.to(out.device, non_blocking=True))

    def padded_rows(self, items: np.ndarray) -> tuple[np.ndarray, int]:
        """Where the given items' tokens lie when laid out padded to their longest item.

        Returns (``rows``, ``width``): ``rows`` (len(items) * width,) int64 indices into
        ``vectors``, item by item, each item's row list filled up to ``width`` with its own last
        token (a MaxSim no-op on the page side). An item with no tokens gets arbitrary rows, which
        the caller zeroes. Needs at least one vector in ``vectors``.
        """
        items = np.asarray(items, dtype=np.int64)
        lengths = self.lengths[items]
        width = max(int(lengths.max(initial=0)), 1)
        steps = np.minimum(np.arange(width)[None, :], np.maximum(lengths, 1)[:, None] - 1)
        rows = np.clip(self.offsets[items][:, None] + steps, 0, len(self.vectors) - 1)
        return rows.reshape(-1), width

    def padded_fp32(self, items: np.ndarray, device: torch.device, pad: str = "repeat") -> torch.Tensor:
        """The given items as one fp32 tensor of shape (len(items), max_len, dim) on ``device``.

        ``pad="repeat"`` fills each item up to ``max_len`` with copies of its own last token (a
        MaxSim no-op on the page side); ``pad="zero"`` fills with zero vectors (a no-op on the
        query side). Items with no tokens come out as zero rows. The 16-bit upcast happens here,
        per block: CPU arithmetic in bf16/fp16 is slow, fp32 matrix products are fast.
        """
        items = np.asarray(items, dtype=np.int64)
        lengths = self.lengths[items]
        width = max(int(lengths.max(initial=0)), 1)
        if len(self.vectors) == 0 or len(items) == 0:
            return torch.zeros((len(items), width, self.dim), device=device)
        rows, width = self.padded_rows(items)
        block = self.fp32(rows, device).view(len(items), width, self.dim)
        if pad == "zero":
            block *= torch.from_numpy(np.arange(width)[None, :, None] < lengths[:, None, None]).to(device)
        elif (lengths == 0).any():
            block[torch.from_numpy(lengths == 0).to(device)] = 0
        return block


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)
