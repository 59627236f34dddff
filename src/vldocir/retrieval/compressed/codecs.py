"""How the compressed pages code their vectors: a faiss ``index_factory`` codec through its
standalone interface (``sa_encode`` / ``sa_decode``), or ``float16``; and an 8- or 4-bit scalar
quantizer read as the affine map per dimension it is (:class:`AffineCodec`), so that MaxSim over
coded vectors needs no decoded copy.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

FLOAT16 = "float16"
"""The ``codec`` that stores vectors as the page store does, in float16, with no faiss codec."""
MEAN_CODEC = "SQ8"
"""How bag means are coded with ``coded=residuals``: 8 bits a dimension, one vector a bag entry."""
PARSE_DIM = 3840
"""A dimension that every usual codec divides (2^8 x 3 x 5), to check a codec string before the page
dimension is known; the build checks it again with the real one."""


def codec_index(codec: str, dim: int):
    """The untrained faiss index of ``codec`` for ``dim``-dimensional vectors; a string faiss cannot parse,
    or a codec that cannot code this dimension, is a one-line ``ValueError``."""
    import faiss

    try:
        return faiss.index_factory(dim, codec, faiss.METRIC_INNER_PRODUCT)
    except RuntimeError as error:
        first = str(error).strip().splitlines()[-1] if str(error).strip() else "unknown"
        if dim != PARSE_DIM:
            try:
                faiss.index_factory(PARSE_DIM, codec, faiss.METRIC_INNER_PRODUCT)
            except RuntimeError:
                pass
            else:  # a codec faiss knows, for another dimension (PQ64x8 needs a multiple of 64)
                raise ValueError(
                    f"codec {codec!r} cannot code the pages' {dim}-dimensional vectors ({first})"
                ) from None
        raise ValueError(f"codec {codec!r} is not a faiss index_factory codec ({first})") from None


@dataclass
class AffineCodec:
    """A faiss scalar quantizer of 8 or 4 bits read as what it is, an affine map per dimension:
    component d decodes to ``vmin[d] + (level[d] + 1/2) * step[d]`` (``step = vdiff / (2^bits - 1)``).
    A query token's product with a coded vector is then a constant plus a product with the
    vector's levels, so MaxSim needs no decoded copy: the levels of a 4-bit code are its bytes
    (low nibble plus 16 x high) and their high nibbles, weighted so that the two products add up
    to the nibbles' (faiss codes the even dimension of a byte in its low nibble)."""

    bits: int
    vmin: torch.Tensor
    step: torch.Tensor
    code_bytes: int

    @classmethod
    def of(cls, codec) -> AffineCodec | None:
        """The affine reading of ``codec``, or None when it is not an 8- or 4-bit scalar quantizer."""
        import faiss

        index = faiss.downcast_index(codec)
        if not isinstance(index, faiss.IndexScalarQuantizer):
            return None
        types = faiss.ScalarQuantizer
        bits = {types.QT_8bit: 8, types.QT_8bit_uniform: 8, types.QT_4bit: 4, types.QT_4bit_uniform: 4}
        if index.sq.qtype not in bits:
            return None
        dim, trained = index.sq.d, faiss.vector_to_array(index.sq.trained).astype(np.float32)
        vmin, vdiff = (
            (trained[:dim], trained[dim : 2 * dim]) if len(trained) == 2 * dim else (trained[:1], trained[1:2])
        )
        levels = (1 << bits[index.sq.qtype]) - 1
        vmin, step = np.broadcast_to(vmin, dim).copy(), np.broadcast_to(vdiff / levels, dim).copy()
        return cls(bits[index.sq.qtype], torch.from_numpy(vmin), torch.from_numpy(step), int(index.sa_code_size()))

    def products(self, tokens: torch.Tensor, codes: torch.Tensor) -> torch.Tensor:
        """``tokens`` (n, dim) fp32 times the vectors coded in ``codes`` (m, code_bytes) uint8: (n, m)."""
        weights = tokens * self.step
        constant = (tokens @ self.vmin + 0.5 * weights.sum(dim=1))[:, None]
        if self.bits == 8:
            return torch.addmm(constant, weights, codes.T.float())
        low = weights[:, 0::2]
        high = torch.zeros_like(low)
        high[:, : weights.shape[1] // 2] = weights[:, 1::2]
        levels = torch.empty((len(codes), 2 * self.code_bytes))
        levels[:, : self.code_bytes] = codes
        levels[:, self.code_bytes :] = codes >> 4
        return torch.addmm(constant, torch.cat([low, high - 16 * low], dim=1), levels.T)


def code_size(codec: str, dim: int) -> int:
    """Bytes per stored vector."""
    return 2 * dim if codec == FLOAT16 else int(codec_index(codec, dim).sa_code_size())
