"""The CUDA toolkit's headers on this machine (and CUTLASS's, where a checkout is found) as the doc source "cuda".

The toolkit is the first of ``$CUDA_HOME``, ``$CUDA_PATH``, the toolkit of the nvcc ``core.build.nvcc.find_nvcc``
finds, and ``/usr/local/cuda`` whose ``include/`` holds ``cuda_runtime.h``. Only chosen headers are read, most useful
first: the ``cuda::ptx`` wrappers (one file per PTX instruction, each variant with its PTX syntax in a comment), the
fp8/bf16/fp16/fp4/fp6 types, cooperative groups, ``cuda::barrier`` and ``memcpy_async``, the driver API (tensor
maps); then CUTLASS's and CuTe's ``arch`` headers (``core.build.cutlass.find_cutlass``). TOOLKIT_LIMITS caps what is
read, so the index stays quick to build. A machine without a toolkit has the source missing, with a note.

A header is cut into declaration blocks: a cut falls on a blank line at the brace depth the block began at, once
the block has MIN_LINES lines, so a doc comment stays with its declaration; a block is cut at MAX_LINES whatever.
"""

from __future__ import annotations

import glob
import os
import re
from pathlib import Path

from core.docs.index import Budget, Chunk, Limits, OwnSource, SourceReport

TOOLKIT_LIMITS = Limits(max_files=400, max_file_bytes=1_500_000, max_total_bytes=8_000_000)
MIN_LINES = 12
MAX_LINES = 120
TITLE_CHARS = 150

# (folder under include/ that #include paths start from, file patterns there), most useful first.
TOOLKIT_FILES = (
    ("cccl", ("cuda/__ptx/instructions/generated/*.h",)),
    ("", ("cuda_fp8.h", "cuda_bf16.h", "cuda_fp16.h", "cuda_fp4.h", "cuda_fp6.h", "cooperative_groups.h",
          "cooperative_groups/*.h", "cooperative_groups/details/*.h", "cuda_pipeline.h", "cuda_awbarrier.h")),
    ("cccl", ("cuda/__barrier/*.h", "cuda/__memcpy_async/*.h")),
    ("", ("cuda.h",)),
)
CUTLASS_FILES = ("cute/arch/*.hpp", "cutlass/arch/*.h", "cute/atom/*.hpp")

_PTX_LINE = re.compile(r"^//\s*([a-z][a-z0-9_]*\.[^\s].*)$")  # "// cp.async.bulk.dst.src... // PTX ISA 80, SM_90"
_BRIEF = re.compile(r"\\brief\s+(.*)")
_VERSION = re.compile(r"#define\s+CUDA_VERSION\s+(\d+)")
_SCOPE_OPENER = re.compile(r'^(namespace\b[^{]*|extern\s*"C(\+\+)?"\s*)\{')  # wraps a whole file: adds no depth
_NOT_A_DECLARATION = re.compile(r"^(#|template\s*<|[{}]+;?$|$)")  # matched against a line's code, stripped


def toolkit_candidates() -> list[tuple[str, str]]:
    """Where a toolkit may be, in order, each with how it was found."""
    candidates = [(os.environ.get(name, ""), f"${name}") for name in ("CUDA_HOME", "CUDA_PATH")]
    from core.build.nvcc import find_nvcc

    nvcc = find_nvcc()
    if nvcc is not None:
        candidates.append((str(nvcc.resolve().parents[1]), f"nvcc at {nvcc}"))
    return candidates + [("/usr/local/cuda", "/usr/local/cuda")]


def find_toolkit(candidates: list[tuple[str, str]] | None = None) -> tuple[Path, str] | None:
    """The first toolkit folder of ``candidates`` (default: this machine's) holding include/cuda_runtime.h, and how
    it was found; None: none."""
    for folder, how in toolkit_candidates() if candidates is None else candidates:
        if folder and (Path(folder) / "include" / "cuda_runtime.h").is_file():
            return Path(folder).resolve(), how
    return None


def _version(include: Path) -> str:
    try:
        with open(include / "cuda.h", encoding="utf-8", errors="replace") as f:
            match = _VERSION.search(f.read(20_000))
    except OSError:
        return ""
    if not match:
        return ""
    number = int(match.group(1))
    return f"{number // 1000}.{number % 1000 // 10}"


def _files(include: Path, selection) -> list[tuple[Path, Path]]:
    """(file, the folder its name is shown from) for each pattern of ``selection``, in order, each file once."""
    found: dict[Path, Path] = {}
    for base, patterns in selection:
        root = include / base
        for pattern in patterns:
            for name in sorted(glob.glob(str(root / pattern))):
                found.setdefault(Path(name), root)
    return [(path, root) for path, root in found.items() if path.is_file()]


def code_parts(lines: list[str]) -> list[str]:
    """Each line's code, its comments (``//`` and ``/* */``, across lines) removed and stripped."""
    parts, inside = [], False
    for line in lines:
        code, rest = [], line
        while rest:
            if inside:
                end = rest.find("*/")
                rest, inside = ("", True) if end < 0 else (rest[end + 2:], False)
                continue
            block, slashes = rest.find("/*"), rest.find("//")
            if slashes >= 0 and (block < 0 or slashes < block):
                code.append(rest[:slashes])
                break
            if block < 0:
                code.append(rest)
                break
            code.append(rest[:block])
            rest, inside = rest[block + 2:], True
        parts.append("".join(code).strip())
    return parts


def header_blocks(lines: list[str], code: list[str]) -> list[tuple[int, int]]:
    """(start, end) line indices (end exclusive) of a header's declaration blocks: cut at a blank line or before a
    doc comment (``/**``) at the depth the block began at, once it has MIN_LINES lines; at MAX_LINES whatever. The
    brace of a ``namespace`` or ``extern "C"`` adds no depth. A short rest (an include guard's ``#endif``) joins the
    block before it."""
    blocks, start, depth, start_depth = [], 0, 0, 0
    for i, line in enumerate(lines):
        stripped, change = line.strip(), code[i].count("{") - code[i].count("}")
        if change > 0 and _SCOPE_OPENER.match(code[i]):
            change -= 1
        may_cut = i - start >= MIN_LINES and depth <= start_depth
        if may_cut and not stripped:
            blocks.append((start, i))
            start, start_depth = i + 1, depth
        elif may_cut and stripped.startswith("/**"):
            blocks.append((start, i))
            start, start_depth = i, depth
        elif i + 1 - start >= MAX_LINES:
            blocks.append((start, i + 1))
            start, start_depth = i + 1, depth + change
        depth += change
    if start < len(lines):
        if blocks and len(lines) - start < MIN_LINES:
            start = blocks.pop()[0]
        blocks.append((start, len(lines)))
    return [(a, b) for a, b in blocks if any(x.strip() for x in lines[a:b])]


def block_title(lines: list[str], code: list[str]) -> str:
    """What a block is about, in one line: the PTX instruction a ``cuda::ptx`` comment documents, else the first
    documented declaration with its doc comment's ``\\brief`` (the first declaration when none is documented),
    else its first line."""
    for line in lines:
        match = _PTX_LINE.match(line.strip())
        if match:
            return match.group(1)
    documented = next((k for k, line in enumerate(lines) if _BRIEF.search(line)), None)
    brief = _BRIEF.search(lines[documented]).group(1).strip() if documented is not None else ""
    declaration = next((c for c in code[documented or 0:] if not _NOT_A_DECLARATION.match(c)), "")
    summary = " — ".join(x for x in (declaration, brief) if x)
    return summary or next((line.strip() for line in lines if line.strip()), "")


def header_chunks(text: str, *, name: str, source: str, file: str) -> list[Chunk]:
    """One chunk per declaration block of a header; ``name`` is its #include path (``cuda_bf16.h``)."""
    lines = text.splitlines()
    code = code_parts(lines)
    chunks = []
    for start, end in header_blocks(lines, code):
        body = lines[start:end]
        title = " ".join(f"{Path(name).name}: {block_title(body, code[start:end])}".split())
        title = title if len(title) <= TITLE_CHARS else title[:TITLE_CHARS - 3] + "..."
        chunks.append(Chunk(f"{source}:{name}#L{start + 1}", title, "\n".join(body).strip("\n"), source, file))
    return chunks


def toolkit_chunks(limits: Limits = TOOLKIT_LIMITS,
                   candidates: list[tuple[str, str]] | None = None) -> tuple[list[Chunk], SourceReport]:
    """The chosen headers of this machine's CUDA toolkit (the first of ``candidates``, default: this machine's), then
    of its CUTLASS (paths ``cuda:<include path>#L<n>``)."""
    found = find_toolkit(candidates)
    if found is None:
        return [], SourceReport("cuda", "CUDA toolkit headers", False,
                                "no CUDA toolkit found here (CUDA_HOME, CUDA_PATH, nvcc, /usr/local/cuda)")
    root, how = found
    include = root / "include"
    files = _files(include, TOOLKIT_FILES)
    from core.build.cutlass import find_cutlass

    cutlass = find_cutlass()
    if cutlass is not None:
        files += _files(cutlass.root / "include", (("", CUTLASS_FILES),))
    budget = Budget(limits)
    chunks: list[Chunk] = []
    for path, shown_from in files:
        text = budget.read(path)
        if text is not None:
            chunks += header_chunks(text, name=path.relative_to(shown_from).as_posix(), source="cuda",
                                    file=str(path))
    version = _version(include)
    label = f"CUDA {version} headers" if version else "CUDA toolkit headers"
    detail = f"{include} (found by {how})" + (f"; CUTLASS {cutlass.version} at {cutlass.root}" if cutlass else "")
    return chunks, SourceReport("cuda", label, True, detail, budget.files, budget.skipped, len(chunks))


def _within_toolkit_limits(limits: Limits) -> Limits:
    """The tighter of ``limits`` and TOOLKIT_LIMITS, field by field."""
    return Limits(*(min(getattr(limits, f), getattr(TOOLKIT_LIMITS, f))
                    for f in ("max_files", "max_file_bytes", "max_total_bytes")))


CUDA = OwnSource("cuda", "this machine's CUDA toolkit headers (cuda::ptx wrappers, fp8/bf16/fp4 types, cooperative "
                         "groups, barriers, the driver API) and CUTLASS's arch headers where found",
                 lambda limits: toolkit_chunks(_within_toolkit_limits(limits)))
