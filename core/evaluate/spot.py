"""Which elements of a timed call's outputs the judge spot-checks.

After the timing, each input buffer's last outputs are compared with the reference of the inputs they were made
from (a candidate that caches across calls returns stale outputs there). Writing every element of them to the
exchange file doubled a large workload's hand-over, so the judge checks a sample: ``SPOT_SAMPLES`` elements of
each output, at indices drawn from a seed that reaches the candidate's process only once the timing is over (so
no timed call can know them), the whole output where it is smaller. Both processes draw the same indices from
the seed.
"""

from __future__ import annotations

from typing import Any

SPOT_SAMPLES = 1 << 16


def sample_indices(numel: int, seed: int) -> Any:
    """``SPOT_SAMPLES`` indices below ``numel`` (with repeats) drawn from ``seed`` on the CPU, or every index where
    ``numel`` is no larger; an int64 tensor."""
    import torch

    if numel <= SPOT_SAMPLES:
        return torch.arange(numel, dtype=torch.int64)
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, numel, (SPOT_SAMPLES,), generator=generator, dtype=torch.int64)


def sampled(value: Any, shape: tuple[int, ...], seed: int) -> Any:
    """A tensor output of the expected ``shape`` reduced to its sampled elements (1-D); anything else as it is, so
    that the comparison still sees a wrong shape or type."""
    import torch

    if not isinstance(value, torch.Tensor) or tuple(value.shape) != tuple(shape):
        return value
    indices = sample_indices(value.numel(), seed).to(value.device)
    flat = value.reshape(-1)
    bits = _SAME_SIZE_INTEGER.get(flat.element_size())
    if bits is None or flat.dtype.is_complex:
        return flat.index_select(0, indices)
    # Gathered as integers of the same size: index_select is not implemented for every dtype (the float8 ones).
    return flat.view(getattr(torch, bits)).index_select(0, indices).view(flat.dtype)


_SAME_SIZE_INTEGER = {1: "uint8", 2: "int16", 4: "int32", 8: "int64"}
