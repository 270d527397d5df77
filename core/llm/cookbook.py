"""Which guides of the project's cookbook (``docs/cookbook/*.md``) fit a problem, for its brief.

A guide's first line is ``# Title`` and its second non-empty line says what it fits::

    fits: memory, latency | dtypes: any
    fits: compute | dtypes: bf16, fp8 | arch: sm_100

An ``arch`` (an nvcc target's family: ``sm_100`` covers ``sm_100a``) limits a guide to the runs on such GPUs; a run
on another GPU, or on the CPU, is not pointed to it.

``fits`` names bounds among memory, compute and latency; ``dtypes`` is ``any`` or a list (``bf16, fp8``; torch's
names such as ``bfloat16`` are read too). A guide whose line is missing or malformed is still searched by the
``docs`` tool, but never suggested. A problem's bounds are its workloads' (the roofline's: memory or compute; latency
where the fixed launch latency bounds T_sol, T_sol is a few microseconds, or T_b's timing was host-bound), its
dtypes those of its tensors. The guides are read once per process; the rest are pure functions.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from core.docs.index import COOKBOOK_DIR
from core.problem.schema import Problem
from core.store.model import WorkloadInfo

BOUNDS = ("memory", "compute", "latency")
ANY_DTYPE = "any"
MAX_PICKS = 3
LATENCY_T_SOL_MS = 0.005  # a T_sol under this (a kernel launch or so) is bound by latency, whatever the roofline says
DTYPE_BONUS = 0.25  # a guide naming the problem's dtype, over one for any dtype (scaled by how focused it is)
INDEX_FILE = "README.md"  # the cookbook's index, not a guide

_METADATA = re.compile(r"^fits:\s*(?P<fits>[^|]*?)\s*\|\s*dtypes:\s*(?P<dtypes>[^|]*?)\s*"
                       r"(?:\|\s*arch:\s*(?P<arch>sm_[0-9]+)\s*)?$")
_ROOFLINE_BOUNDS = {"memory": "memory", "compute": "compute", "floor": "latency"}


@dataclass(frozen=True)
class Guide:
    file: str  # "wgmma-gemm.md", relative to the cookbook folder
    title: str
    fits: frozenset[str]  # empty: the metadata line is missing or malformed (never suggested)
    dtypes: frozenset[str] | None  # None: any dtype
    problem: str = ""  # why the metadata line was not understood
    arch: str | None = None  # "sm_100": only for runs on such GPUs; None: any

    @property
    def path(self) -> str:
        """The guide as the ``docs`` tool reads it whole."""
        return f"cookbook:{self.file}"


def dtype_family(dtype: str) -> str:
    """A dtype by its short name: ``bfloat16`` -> ``bf16``, ``float8_e4m3fn`` -> ``fp8``; others lower case."""
    name = dtype.strip().lower()
    for prefix, family in (("bfloat16", "bf16"), ("float16", "fp16"), ("half", "fp16"), ("float32", "fp32"),
                           ("float64", "fp64"), ("float8", "fp8"), ("float6", "fp6"), ("float4", "fp4"),
                           ("uint8", "int8")):
        if name.startswith(prefix):
            return family
    return name


def parse_guide(file: str, text: str) -> Guide:
    """A guide's title (its first line, ``# Title``) and its metadata line (its second non-empty line)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    title = lines[0].lstrip("#").strip() if lines and lines[0].startswith("# ") else Path(file).stem
    if len(lines) < 2:
        return Guide(file, title, frozenset(), None, "no metadata line")
    match = _METADATA.match(lines[1])
    if match is None:
        return Guide(file, title, frozenset(), None, f"not a metadata line: {lines[1][:80]!r}")
    fits = frozenset(b.strip().lower() for b in match["fits"].split(",") if b.strip())
    dtypes = frozenset(dtype_family(d) for d in match["dtypes"].split(",") if d.strip())
    unknown = fits - set(BOUNDS)
    if not fits or unknown or not dtypes or (ANY_DTYPE in dtypes and len(dtypes) > 1):
        why = f"unknown bounds {', '.join(sorted(unknown))}" if unknown else "bad fits or dtypes"
        return Guide(file, title, frozenset(), None, why)
    return Guide(file, title, fits, None if dtypes == {ANY_DTYPE} else dtypes, arch=match["arch"])


def read_guides(folder: Path) -> tuple[Guide, ...]:
    """The guides of a cookbook folder (its top-level markdown files but the index), by file name."""
    guides = []
    for path in sorted(folder.glob("*.md")) if folder.is_dir() else ():
        if path.name == INDEX_FILE:
            continue
        try:
            guides.append(parse_guide(path.name, path.read_text(encoding="utf-8")))
        except (OSError, UnicodeDecodeError):
            continue
    return tuple(guides)


@functools.cache
def cookbook_guides(folder: Path = COOKBOOK_DIR) -> tuple[Guide, ...]:
    """The project's guides, read once per process."""
    return read_guides(folder)


def workload_bound(info: WorkloadInfo) -> str | None:
    """What bounds a workload, as the cookbook says it: memory, compute or latency; None when not known."""
    if info.bound == "floor" or info.timing_host_bound or (
            info.t_sol_ms is not None and info.t_sol_ms < LATENCY_T_SOL_MS and info.bound in _ROOFLINE_BOUNDS):
        return "latency"
    return _ROOFLINE_BOUNDS.get(info.bound)


def problem_dtypes(problem: Problem) -> frozenset[str]:
    """The dtypes of a problem's tensors (scalars left out), by their short names."""
    d = problem.definition
    return frozenset(dtype_family(t.dtype) for t in (*d.inputs.values(), *d.outputs.values()) if t.shape is not None)


def for_arch(guide: Guide, arch: str | None) -> bool:
    """Whether ``guide`` is for a run whose nvcc target is ``arch`` (``sm_90a``; None: no GPU)."""
    return guide.arch is None or (arch is not None and arch.rstrip("af") == guide.arch)


def pick_guides(guides: Sequence[Guide], bounds: Mapping[str, int], dtypes: frozenset[str],
                limit: int = MAX_PICKS, arch: str | None = None) -> list[Guide]:
    """The ``limit`` guides that fit best a problem with ``bounds`` (bound -> how many workloads) and ``dtypes``.
    A guide fits when it covers some workload's bound and takes any dtype or one of the problem's. It ranks by the
    share of the workloads bound as it says, averaged over the bounds it names (a guide for the problem's main bound
    before a broader one), plus DTYPE_BONUS when it names the problem's dtype (the fewer others it names, the more
    of it)."""
    total = sum(bounds.values())
    if not total:
        return []
    scored = []
    for guide in guides:
        if not guide.fits or not for_arch(guide, arch):
            continue
        share = sum(bounds.get(b, 0) for b in guide.fits) / total
        named = guide.dtypes & dtypes if guide.dtypes is not None else frozenset()
        if share == 0 or (guide.dtypes is not None and not named):
            continue
        score = share / len(guide.fits) + (DTYPE_BONUS * len(named) / len(guide.dtypes) if guide.dtypes else 0.0)
        scored.append((-score, guide.file, guide))
    return [guide for _, _, guide in sorted(scored, key=lambda item: item[:2])[:limit]]


def cookbook_section(problem: Problem, workloads: Sequence[WorkloadInfo],
                     guides: Sequence[Guide] | None = None, arch: str | None = None) -> str | None:
    """The brief's "Cookbook" section: the guides that fit the problem on a GPU of nvcc target ``arch`` and how to
    read them; None when none does (or no workload's bound is known yet)."""
    bounds = Counter(b for b in map(workload_bound, workloads) if b is not None)
    dtypes = problem_dtypes(problem)
    picks = pick_guides(cookbook_guides() if guides is None else guides, bounds, dtypes, arch=arch)
    if not picks:
        return None
    profile = ", ".join(f"{bound} on {n} of {sum(bounds.values())}" for bound, n in bounds.most_common())
    lines = ["\n## Cookbook",
             f"Guides of this project that fit the problem (bound: {profile} workloads; dtypes: "
             f"{', '.join(sorted(dtypes)) or 'none'}). Read one whole with `docs(read=PATH)`; search them with "
             "`docs(query=..., source=\"cookbook\")`."]
    lines += [f"- {g.file}: {g.title} (docs read={g.path})" for g in picks]
    return "\n".join(lines)
