"""PTX and SASS of a candidate's kernels and their instruction mix.

SASS comes from ``cuobjdump -sass`` on what the build produced (the fast path's cubins, a torch extension's .so) or
on the cubins Triton compiled at a candidate's first call; PTX from nvcc ``-ptx`` with the build's own flags. No
candidate code runs here: these are files parsed by NVIDIA's tools.
"""

from __future__ import annotations

import re
import shutil
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

# (category, opcode pattern) in the order the summary lists them; SASS opcodes, then PTX instructions.
SASS_CLASSES: tuple[tuple[str, re.Pattern[str]], ...] = tuple((name, re.compile(pattern)) for name, pattern in (
    ("wgmma (warpgroup MMA)", r"^HGMMA|^IGMMA|^QGMMA|^BGMMA"),
    ("mma (tensor core)", r"^HMMA|^IMMA|^DMMA|^BMMA"),
    ("ldmatrix", r"^LDSM"),
    ("cp.async", r"^LDGSTS"),
    ("TMA", r"^UTMALDG|^UTMASTG|^UBLKCP|^UTMAPF|^UTMACCTL"),
    ("global load", r"^LDG"),
    ("global store", r"^STG"),
    ("shared load", r"^LDS(?!M)"),
    ("shared store", r"^STS"),
    ("local load (spill)", r"^LDL"),
    ("local store (spill)", r"^STL"),
    ("atomic/reduction", r"^ATOM|^RED"),
    ("barrier", r"^BAR|^SYNCS|^WARPSYNC"),
    ("shuffle", r"^SHFL"),
    ("fp32 FMA/ADD/MUL", r"^FFMA|^FADD|^FMUL"),
    ("half/bf16 math", r"^HFMA2|^HADD2|^HMUL2"),
    ("special function", r"^MUFU"),
    ("branch", r"^BRA|^BRX|^JMP|^CALL|^RET|^EXIT"),
))
PTX_CLASSES: tuple[tuple[str, re.Pattern[str]], ...] = tuple((name, re.compile(pattern)) for name, pattern in (
    ("wgmma (warpgroup MMA)", r"^wgmma\."),
    ("mma (tensor core)", r"^mma\.|^wmma\."),
    ("ldmatrix", r"^ldmatrix"),
    ("TMA", r"^cp\.async\.bulk\.tensor|^cp\.async\.bulk"),
    ("cp.async", r"^cp\.async\.(?!bulk)"),
    ("global load", r"^ld\.global|^ldu\.global"),
    ("global store", r"^st\.global"),
    ("shared load", r"^ld\.shared"),
    ("shared store", r"^st\.shared"),
    ("local load", r"^ld\.local"),
    ("local store", r"^st\.local"),
    ("atomic/reduction", r"^atom\.|^red\."),
    ("barrier", r"^bar\.|^barrier\.|^mbarrier\."),
    ("shuffle", r"^shfl\."),
))
_WIDTH = re.compile(r"\.(64|128)\b")
_SASS_LINE = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)")
_PTX_ENTRY = re.compile(r"^\s*\.(?:visible\s+)?\.entry\s+([\w$]+)", re.MULTILINE)


def find_cuobjdump() -> str | None:
    return shutil.which("cuobjdump")


@dataclass(frozen=True)
class KernelCode:
    name: str
    text: str  # the kernel's SASS (or PTX) listing
    instructions: int
    mix: tuple[tuple[str, int], ...]  # (category, count), non-zero, in the classes' order
    wide: tuple[tuple[str, int], ...] = ()  # global accesses by width: ("128-bit load", n), ...


def split_sass(listing: str) -> dict[str, str]:
    """``cuobjdump -sass`` output by kernel: each ``Function : name`` section's instruction lines."""
    kernels: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in listing.splitlines():
        stripped = line.strip()
        if stripped.startswith("Function : "):
            current = kernels.setdefault(stripped.removeprefix("Function : ").strip(), [])
        elif current is not None and _SASS_LINE.search(line):
            current.append(_clean_sass(line))
    return {name: "\n".join(lines) for name, lines in kernels.items()}


def _clean_sass(line: str) -> str:
    """One instruction without the encoding comment that follows it."""
    text = line.split(";")[0].strip()
    return text + " ;" if text else ""


def split_ptx(ptx: str) -> dict[str, str]:
    """PTX by kernel (``.entry``): each entry's body, up to the next entry."""
    starts = [(m.start(), m.group(1)) for m in _PTX_ENTRY.finditer(ptx)]
    out = {}
    for i, (start, name) in enumerate(starts):
        end = starts[i + 1][0] if i + 1 < len(starts) else len(ptx)
        out[name] = "\n".join(_ptx_listing(ptx[start:end]))
    return out


def _ptx_listing(body: str) -> list[str]:
    """A kernel's PTX without what only the debugger reads (``.loc`` lines, comments, blank lines)."""
    lines = []
    for line in body.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith(("//", ".loc", ".file", ".pragma")):
            lines.append(line.rstrip())
    return lines


def sass_code(name: str, text: str) -> KernelCode:
    mix: Counter[str] = Counter()
    wide: Counter[str] = Counter()
    count = 0
    for line in text.splitlines():
        match = _SASS_LINE.search(line)
        if not match:
            continue
        opcode = match.group(1)
        count += 1
        for label, pattern in SASS_CLASSES:
            if pattern.search(opcode):
                mix[label] += 1
                break
        if opcode.startswith(("LDG", "STG")):
            width = _WIDTH.search(opcode)
            kind = "load" if opcode.startswith("LDG") else "store"
            wide[f"{width.group(1) if width else '32-or-less'}-bit global {kind}"] += 1
    return KernelCode(name, text, count, _ordered(mix, SASS_CLASSES), tuple(sorted(wide.items())))


def ptx_code(name: str, text: str) -> KernelCode:
    mix: Counter[str] = Counter()
    wide: Counter[str] = Counter()
    count = 0
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith(("//", ".", "{", "}", "$")) or stripped.endswith(":"):
            continue
        instruction = stripped.split()[0] if not stripped.startswith("@") else stripped.split()[1]
        count += 1
        for label, pattern in PTX_CLASSES:
            if pattern.search(instruction):
                mix[label] += 1
                break
        if instruction.startswith(("ld.global", "st.global")):
            vector = re.search(r"\.v(2|4)\b", instruction)
            kind = "load" if instruction.startswith("ld") else "store"
            wide[f"{'v' + vector.group(1) if vector else 'scalar'} global {kind}"] += 1
    return KernelCode(name, text, count, _ordered(mix, PTX_CLASSES), tuple(sorted(wide.items())))


def _ordered(mix: Counter[str], classes: Sequence[tuple[str, re.Pattern[str]]]) -> tuple[tuple[str, int], ...]:
    return tuple((label, mix[label]) for label, _ in classes if mix[label])


def render(kind: str, kernels: Sequence[KernelCode], *, max_chars: int, resources: Mapping[str, str] | None = None,
           kernel: str | None = None) -> str:
    """Per kernel: its instruction count and mix, then its listing trimmed so that all of it fits in
    ``max_chars`` (the mix is never trimmed). ``kernel`` keeps only the kernels whose name contains it."""
    chosen = [k for k in kernels if kernel is None or kernel in k.name]
    if not chosen:
        names = ", ".join(k.name for k in kernels) or "(none)"
        return f"no {kind} kernel matches {kernel!r}; kernels: {names}"
    heads = []
    for k in chosen:
        mix = ", ".join(f"{label} {n}" for label, n in k.mix) or "no memory or tensor instructions"
        widths = "; widths: " + ", ".join(f"{label} {n}" for label, n in k.wide) if k.wide else ""
        extra = f"; {resources[k.name]}" if resources and k.name in resources else ""
        heads.append(f"{kind} {k.name}: {k.instructions} instructions{extra}\n  mix: {mix}{widths}")
    budget = max(0, max_chars - sum(len(h) for h in heads) - 200)
    per_kernel = budget // len(chosen)
    parts = []
    for head, k in zip(heads, chosen):
        listing = k.text if len(k.text) <= per_kernel else (
            k.text[:per_kernel] + f"\n... ({len(k.text) - per_kernel} more characters: ask for this kernel alone, "
                                  "or read the mix)")
        parts.append(head + ("\n" + listing if per_kernel > 200 else ""))
    return "\n\n".join(parts)
