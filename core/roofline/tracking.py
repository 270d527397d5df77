"""A torch dispatch mode that counts a reference's work as it runs: matmul FLOPs by dtype, other arithmetic, and
the fewest bytes the inputs and outputs force a kernel to move.

FLOPs. Matmul-like ops (mm, bmm, addmm, convolution, scaled-dot-product attention, ``_scaled_mm``, ...) are counted
with the formulas of ``torch.utils.flop_counter`` (the ones FlopCounterMode uses), plus a few it lacks (CPU flash
attention, ``_int_mm``, grouped mm, mv). Each is recorded twice: under the dtype its operands have when the
reference runs it (``actual``) and under the narrowest precision the operand data passed through (``effective``):
a bf16 input upcast to fp32 before a matmul is still bf16 data, and a tensor quantised to fp8 inside the reference
and dequantised (cast up, multiplied by a broadcast scale) is fp8 data. The effective precision of a tensor is
carried along casts, views, copies, gathers, sign/clamp and multiplications by smaller (broadcast) scales; any other
arithmetic resets it to the result's dtype. Every other op counts as SIMT arithmetic, approximately: one flop per
output element of a pointwise op, one per input element of a reduction, a few per element for softmax and
normalisations, nothing for pure data movement (copies, casts, views, gathers, concatenation, fills).

Bytes. Only the tensors passed in as inputs and returned as outputs are counted; intermediates are assumed fused
away. Storage is what costs, not shapes: an expanded (stride-0) view costs the storage under it, two tensors sharing
a storage cost it once, and a view with gaps (one slot of a cache, a column) costs its contiguous runs rounded up
to 32-byte sectors. An input is charged for what the reference actually touches of it: the union of the views it
reads, and for gathers (index_select, embedding, advanced indexing, gather) at most the bytes gathered. An output
is charged for its views, once per storage; an output that is an input updated in place (a cache returned whole) is
charged only for the bytes the reference wrote into it.
"""
from __future__ import annotations

from collections import Counter, defaultdict
from typing import Iterable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.weak import WeakIdKeyDictionary

from core.roofline.footprint import (
    Accesses,
    StorageUse,
    accumulates,
    footprint,
    gathered_bytes,
    scatter_bytes,
    storage_key,
    tensor_span,
)
from core.roofline.lazy import (
    bind,
    devices_of,
    fake_call,
    mask_indices_to_positions,
    materialize,
    meta_call,
    random_like,
    tensors_in,
    to_meta,
    written_meta,
)
from core.roofline.ops import (
    ATTENTION,
    FORMULAS,
    GATHERS,
    GRID_PRESERVING,
    NO_ARITHMETIC,
    OPERANDS,
    REDUCTIONS,
    SHAPE_ONLY,
    WRITE_ONLY,
    numel_of,
)
from core.roofline.precision import dtype_name, narrower, wider


class WorkTracker(TorchDispatchMode):
    """Count work while a reference runs. Construct with the input tensors, run the reference inside ``with``,
    then call ``finish(outputs)``.

    ``fake_matmuls_above``: on a real device, matmul-like ops whose FLOPs exceed this are not computed; their result
    is a random tensor of the right shape (shaped on the meta device), so a large workload counts in seconds. Ops
    that fail on the device (e.g. fp4 ``_scaled_mm`` on the CPU) are faked the same way where meta can shape them.

    Inputs may mix real tensors with meta ones (large inputs created lazily, see ``core.roofline.counting``). A
    matmul-like op that meets a meta operand is faked (a faked floating-point result above ``lazy_above_bytes``
    stays on meta); an op updating a meta tensor runs on meta, or is dropped where meta cannot run it; any other
    op that meets meta data next to real data, or that fails on meta alone (``.item()``, ``nonzero``) while
    ``materialize_on`` is set, gets random data of the right shape on that device in place of the meta tensors.
    """

    def __init__(self, inputs: Iterable[torch.Tensor], *, fake_matmuls_above: float | None = None,
                 materialize_on: str | torch.device | None = None, lazy_above_bytes: int | None = None):
        super().__init__()
        self.fake_matmuls_above = fake_matmuls_above
        self.materialize_on = torch.device(materialize_on) if materialize_on is not None else None
        self.lazy_above_bytes = lazy_above_bytes
        self.materialized: Counter[str] = Counter()
        self.skipped: Counter[str] = Counter()
        self.matmul_actual: dict[str, float] = defaultdict(float)
        self.matmul_effective: dict[str, float] = defaultdict(float)
        self.simt_flops = 0.0
        self.op_counts: Counter[str] = Counter()
        self.faked: Counter[str] = Counter()
        self._tags = WeakIdKeyDictionary()
        self._inputs: dict[int, StorageUse] = {}
        for t in inputs:
            key = storage_key(t)
            if key is not None and key not in self._inputs:
                self._inputs[key] = StorageUse(nbytes=t.untyped_storage().nbytes())

    # -- precision tags
    def tag(self, t: torch.Tensor) -> str:
        return self._tags.get(t) or dtype_name(t.dtype)

    def _set_tag(self, t: torch.Tensor, tag: str) -> None:
        try:
            self._tags[t] = tag
        except TypeError:  # not weak-referenceable
            pass

    # -- dispatch
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        packet = func._overloadpacket
        name = packet.__name__
        if packet not in FORMULAS and not func.is_view:
            with self:
                decomposed = func.decompose(*args, **kwargs)
            if decomposed is not NotImplemented:
                return decomposed
        self.op_counts[name] += 1
        if not func.is_view:
            self._record_access(func, name, args, kwargs)
        out = self._execute(func, packet, args, kwargs)
        self._record_work(func, packet, name, args, kwargs, out)
        self._propagate_tags(func, name, args, kwargs, out)
        return out

    def _execute(self, func, packet, args, kwargs):
        heavy = packet in FORMULAS
        real, meta = devices_of(args, kwargs)
        if meta and real is not None:  # a lazily created (meta) input meets real data
            return self._execute_mixed(func, packet, heavy, args, kwargs, real)
        if heavy and real is not None and self.fake_matmuls_above is not None:
            try:
                flops = FORMULAS[packet](*args, **kwargs, out_val=meta_call(func, args, kwargs))
            except Exception:
                flops = None
            if flops is not None and flops > self.fake_matmuls_above:
                return self._fake(func, packet, args, kwargs, real)
        try:
            return func(*args, **kwargs)
        except (RuntimeError, NotImplementedError, ValueError, TypeError, IndexError):
            if heavy and real is not None:
                # No kernel for this dtype on this device (fp4 / block-scaled _scaled_mm on the CPU): shape it on meta.
                return self._fake(func, packet, args, kwargs, real)
            if meta and real is None and self.materialize_on is not None:
                # Data-dependent code on a lazy tensor (.item(), nonzero, a boolean mask): give it values.
                return self._off_meta(func, packet, args, kwargs, self.materialize_on)
            raise

    def _execute_mixed(self, func, packet, heavy, args, kwargs, real: torch.device):
        if heavy:
            return self._fake(func, packet, args, kwargs, real)
        if written_meta(func, args, kwargs) is not None:  # updates a lazy tensor: stay on meta
            try:
                return func(*to_meta(args), **to_meta(kwargs))
            except (RuntimeError, NotImplementedError, ValueError, IndexError):
                return self._off_meta(func, packet, args, kwargs, real)
        source = next((a for a in args if isinstance(a, torch.Tensor)), None)
        if packet.__name__ in GATHERS and source is not None and source.device.type == "meta":
            try:  # rows gathered from a lazy table: shape them on meta rather than filling the whole table
                return func(*to_meta(mask_indices_to_positions(args)), **to_meta(kwargs))
            except (RuntimeError, NotImplementedError, IndexError):
                pass
        lazy_bytes = sum(t.numel() * t.element_size() for t in tensors_in((args, kwargs)) if t.device.type == "meta")
        if self.lazy_above_bytes is not None and lazy_bytes > self.lazy_above_bytes:
            try:  # large lazy data meets small real data: the result stays lazy too
                return func(*to_meta(args), **to_meta(kwargs))
            except (RuntimeError, NotImplementedError, ValueError, IndexError):
                pass
        return self._off_meta(func, packet, args, kwargs, real)

    def _off_meta(self, func, packet, args, kwargs, device):
        """Run an op that meta cannot run. An update of a lazy tensor is dropped (its values never matter and
        its bytes are already recorded); anything else gets random data in place of its meta tensors."""
        written = written_meta(func, args, kwargs)
        if written is not None:
            self.skipped[packet.__name__] += 1
            return written
        self.materialized[packet.__name__] += 1
        return func(*materialize(args, device), **materialize(kwargs, device))

    def _fake(self, func, packet, args, kwargs, device):
        self.faked[packet.__name__] += 1
        return fake_call(func, args, kwargs, device, self.lazy_above_bytes)

    # -- bytes
    def _record_access(self, func, name, args, kwargs) -> None:
        if not self._inputs or name in SHAPE_ONLY:
            return
        schema_args = func._schema.arguments
        gather_source = next((a for a in args if isinstance(a, torch.Tensor)), None) if name in GATHERS else None
        for arg_schema, value in bind(schema_args, args, kwargs):
            for t in tensors_in(value):
                use = self._inputs.get(storage_key(t))  # type: ignore[arg-type]
                if use is None:
                    continue
                alias = arg_schema.alias_info if arg_schema is not None else None
                written = alias is not None and alias.is_write
                if written:
                    amount = scatter_bytes(name, args, kwargs, t)
                    if amount is None:
                        use.writes.add(footprint(t))
                    else:
                        use.writes.sparse += amount
                    if name in WRITE_ONLY or arg_schema.name == "out" or (
                            name in ("index_put_", "_index_put_impl_") and not accumulates(args, kwargs)) or (
                            name == "scatter_" and "reduce" not in kwargs and len(args) < 5):
                        continue
                    if amount is not None:  # accumulating scatter: reads what it updates
                        use.reads.sparse += amount
                        continue
                if t is gather_source:
                    use.reads.sparse += gathered_bytes(func, args, kwargs, t)
                else:
                    use.reads.add(footprint(t))

    # -- flops
    def _record_work(self, func, packet, name, args, kwargs, out) -> None:
        if func.is_view:
            return
        formula = FORMULAS.get(packet)
        if formula is not None:
            try:
                flops = float(formula(*args, **kwargs, out_val=out))
            except Exception:
                flops = 0.0
            operands = [args[i] for i in OPERANDS.get(name, ()) if i < len(args) and isinstance(args[i], torch.Tensor)]
            if not operands:
                operands = [a for a in args if isinstance(a, torch.Tensor)][:3]
            if operands:
                actual = wider(dtype_name(t.dtype) for t in operands) or dtype_name(operands[0].dtype)
                effective = wider(self.tag(t) for t in operands) or actual
            else:
                actual = effective = "float32"
            self.matmul_actual[actual] += flops
            self.matmul_effective[effective] += flops
            if packet in ATTENTION and len(operands) >= 2:  # the softmax inside a fused attention
                q, k = operands[0], operands[1]
                self.simt_flops += 5.0 * numel_of(q.shape[:-1]) * k.shape[-2]
            return
        if name in NO_ARITHMETIC or name.rstrip("_") in NO_ARITHMETIC:
            return
        base = name.rstrip("_")
        if base in REDUCTIONS:
            first = next((a for a in args if isinstance(a, torch.Tensor)), None)
            if first is not None:
                self.simt_flops += REDUCTIONS[base] * first.numel()
            return
        outs = [t for t in tensors_in(out)]
        self.simt_flops += float(sum(t.numel() for t in outs[:1]))

    # -- precision propagation
    def _propagate_tags(self, func, name, args, kwargs, out) -> None:
        outs = list(tensors_in(out))
        if not outs:
            return
        base = name.rstrip("_")
        inplace = name.endswith("_") and not name.startswith("_")
        if name == "copy_" and len(args) >= 2 and isinstance(args[1], torch.Tensor):
            self._set_tag(args[0], narrower(self.tag(args[1]), dtype_name(args[0].dtype)))
            return
        if inplace:
            return
        if func.is_view or base in GRID_PRESERVING:
            tensors = [a for a in tensors_in((args, kwargs))]
            for o in outs:
                full = [t for t in tensors if t.numel() >= o.numel() and t.dtype != torch.bool]
                if base in GATHERS and tensors:
                    full = [tensors[0]]
                if not full:
                    continue
                source = wider(self.tag(t) for t in full) or self.tag(full[0])
                self._set_tag(o, narrower(source, dtype_name(o.dtype)))
        # anything else: result precision is its own dtype (the default; nothing to store)

    def input_use(self, t: torch.Tensor) -> StorageUse | None:
        """What the reference did with the storage of input ``t`` (None if ``t`` was not an input)."""
        return self._inputs.get(storage_key(t))  # type: ignore[arg-type]

    # -- result
    def finish(self, outputs: Iterable[torch.Tensor]) -> tuple[int, int]:
        """(bytes read, bytes written) once the reference has returned ``outputs``."""
        read = sum(use.bytes_read() for use in self._inputs.values())
        by_storage: dict[int, list[torch.Tensor]] = defaultdict(list)
        loose = 0
        for t in outputs:
            key = storage_key(t)
            if key is None:
                loose += t.numel() * t.element_size()
            else:
                by_storage[key].append(t)
        written = loose
        for key, views in by_storage.items():
            produced = Accesses()
            for view in views:
                produced.add(footprint(view))
            nbytes = produced.total()
            use = self._inputs.get(key)
            written += min(nbytes, use.bytes_written()) if use is not None else nbytes
        return read, written


# Re-exported: tests and callers reach these through the tracker module.
__all__ = ["Accesses", "StorageUse", "WorkTracker", "dtype_name", "footprint", "narrower", "random_like",
           "storage_key", "tensor_span", "wider"]
