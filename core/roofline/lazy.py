"""Mixing real tensors with meta ("lazy") ones: creating large tensors on meta, which device an op's arguments are
on, random data in place of meta tensors where code needs values, matmul results shaped on meta instead of
computed."""

from __future__ import annotations

import contextlib
import math
from typing import Iterable

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten, tree_map


def bind(schema_args, args, kwargs):
    """(schema argument or None, value) for every argument passed."""
    for i, value in enumerate(args):
        yield (schema_args[i] if i < len(schema_args) else None), value
    by_name = {a.name: a for a in schema_args}
    for key, value in kwargs.items():
        yield by_name.get(key), value


def tensors_in(value) -> Iterable[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
        return
    leaves, _ = tree_flatten(value)
    for leaf in leaves:
        if isinstance(leaf, torch.Tensor):
            yield leaf


def devices_of(args, kwargs) -> tuple[torch.device | None, bool]:
    """(the first non-meta device among the tensor arguments, whether any is on meta). A 0-dim CPU tensor next to
    meta tensors acts as a scalar and does not count as real data."""
    real, meta, scalar_cpu = None, False, None
    for t in tensors_in((args, kwargs)):
        if t.device.type == "meta":
            meta = True
        elif t.dim() == 0 and t.device.type == "cpu":
            scalar_cpu = scalar_cpu or t.device
        elif real is None:
            real = t.device
    if real is None and not meta:
        real = scalar_cpu
    return real, meta


def random_like(x: torch.Tensor, device) -> torch.Tensor:
    """A tensor shaped (and where possible strided) like ``x`` on ``device``, holding random data of its dtype:
    normal floats, fp8 within +-2, random bytes for fp4 and uint8, zeros for other integers and bools (safe as
    indices)."""
    dtype = x.dtype
    if dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        base = torch.randn(x.shape, device=device).clamp_(-2, 2).to(dtype)
    elif dtype.is_floating_point and x.element_size() >= 2:
        base = torch.randn(x.shape, device=device, dtype=dtype)
    elif dtype == torch.uint8 or x.element_size() == 1 and dtype.is_floating_point:  # uint8, packed fp4
        base = torch.randint(0, 256, x.shape, device=device, dtype=torch.uint8).view(dtype)
    else:
        base = torch.zeros(x.shape, device=device, dtype=dtype)
    if base.stride() == x.stride():
        return base
    try:
        out = torch.empty_strided(x.shape, x.stride(), dtype=dtype, device=device)
        out.copy_(base)
        return out
    except RuntimeError:  # overlapping (expanded) strides: contiguous will do
        return base


def materialize(value, device):
    return tree_map(lambda x: random_like(x, device) if isinstance(x, torch.Tensor) and x.device.type == "meta"
                    else x, value)


def to_meta(value):
    return tree_map(lambda x: x.to("meta") if isinstance(x, torch.Tensor) else x, value)


def meta_call(func, args, kwargs):
    return func(*to_meta(args), **to_meta(kwargs))


def fake_call(func, args, kwargs, device, lazy_above_bytes: int | None = None):
    """The op's result shaped on meta, filled with random data on ``device`` (random rather than zeros, so that
    code routing on it, such as top-k expert selection, behaves as it would on real data). A floating-point
    result above ``lazy_above_bytes`` stays on meta (lazy) instead."""
    shaped = meta_call(func, args, kwargs)

    def place(x):
        if not isinstance(x, torch.Tensor):
            return x
        if lazy_above_bytes is not None and x.dtype.is_floating_point and \
                x.numel() * x.element_size() > lazy_above_bytes:
            return x
        return random_like(x, device)

    return tree_map(place, shaped)


def mask_indices_to_positions(args):
    """For advanced indexing (``aten.index``): real boolean masks replaced by the positions they select, so the
    op can be shaped on meta (a k-dim mask becomes k index tensors, as indexing semantics say)."""
    if len(args) < 2 or not isinstance(args[1], (list, tuple)):
        return args
    indices = []
    for idx in args[1]:
        if isinstance(idx, torch.Tensor) and idx.dtype == torch.bool and idx.device.type != "meta":
            indices.extend(idx.nonzero(as_tuple=True))
        else:
            indices.append(idx)
    return (args[0], indices, *args[2:])


def written_meta(func, args, kwargs) -> torch.Tensor | None:
    """The first meta tensor the op writes into (in-place self or out=), if any."""
    for arg, value in bind(func._schema.arguments, args, kwargs):
        if arg is not None and arg.alias_info is not None and arg.alias_info.is_write:
            for t in tensors_in(value):
                if t.device.type == "meta":
                    return t
    return None


@contextlib.contextmanager
def lazy_factories(above_bytes: int):
    """Create floating-point tensors larger than ``above_bytes`` on the meta device (torch.randn, zeros, empty, ...)."""
    factories = {torch.randn, torch.rand, torch.empty, torch.zeros, torch.ones, torch.full}

    def size_of(func, args, kwargs):
        if "size" in kwargs:
            size = kwargs["size"]
        elif args and isinstance(args[0], (tuple, list, torch.Size)):
            size = args[0]
        else:
            size = [a for a in args if isinstance(a, int)] if func is not torch.full else None
        if size is None:
            return None
        try:
            return math.prod(int(d) for d in size)
        except (TypeError, ValueError):
            return None

    class Lazy(TorchFunctionMode):
        def __torch_function__(self, func, types_, args=(), kwargs=None):
            kwargs = dict(kwargs or {})
            if func in factories and kwargs.get("out") is None:
                dtype = kwargs.get("dtype") or torch.get_default_dtype()
                numel = size_of(func, args, kwargs)
                device = torch.device(kwargs.get("device") or "cpu")
                if dtype.is_floating_point and numel is not None and device.type == "cpu" \
                        and numel * torch.empty(0, dtype=dtype).element_size() > above_bytes:
                    kwargs["device"] = torch.device("meta")
                    kwargs.pop("generator", None)
                    kwargs.pop("pin_memory", None)
            return func(*args, **kwargs)

    with Lazy():
        yield


__all__ = ["bind", "devices_of", "fake_call", "lazy_factories", "mask_indices_to_positions", "materialize", "meta_call",
           "random_like", "tensors_in", "to_meta", "written_meta"]
