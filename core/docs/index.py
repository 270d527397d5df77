"""Documentation sources and how they are cut into chunks.

A chunk is what a search returns and what ``read`` shows: one section of a markdown, reST or HTML file (by
heading), one part of a plain text file, or one API entry of Python source (a module, class, function or method,
with its signature and docstring). Python is read with ``ast``: no module is imported, so nothing initialises CUDA.

Every chunk has a path the reader can ask for next:

- ``torch:torch/cuda/__init__.py::synchronize``: an API entry of an installed package (the doc source of a kernel
  language, ``core.languages``: ``torch``, ``triton``, ``cute_dsl``), relative to the folder holding the package;
- ``torch:torch/some/README.md#heading``: a section of a documentation file shipped inside a package;
- ``docs:/abs/path/file.md#heading``: a section of a file in a configured folder (``::name`` for Python);
- ``protocol:protocol.md#heading``: a section of the project's protocol;
- ``cookbook:wgmma-gemm.md#heading``: a section of a guide of the project's cookbook (``docs/cookbook``);
- ``cuda:cuda_bf16.h#L120``: a declaration block of a CUDA toolkit (or CUTLASS) header (``core.docs.toolkit``).

The protocol, the cookbook and the toolkit are :class:`OwnSource` records (``core.docs.library`` registers them):
sources of the project or of the machine, each indexed once per process.

Reading is bounded: files over ``Limits.max_file_bytes`` and files with NUL bytes or invalid UTF-8 are skipped, and
each source reads at most ``max_files`` files and ``max_total_bytes`` bytes.
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import inspect
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

from core.languages import DocSource, languages
from core.languages.builtin import CUTE_DSL_DOCS, TORCH_DOCS, TRITON_DOCS

PROJECT_ROOT = Path(__file__).resolve().parents[2]
PROTOCOL_FILE = PROJECT_ROOT / "protocol.md"
COOKBOOK_DIR = PROJECT_ROOT / "docs" / "cookbook"

DOC_SUFFIXES = (".md", ".rst", ".txt", ".html", ".htm")
FOLDER_SUFFIXES = DOC_SUFFIXES + (".py",)
_SKIPPED_DIRS = {"__pycache__", "node_modules", "site-packages"}
PART_CHARS = 6000  # a longer section or text file is cut into parts of about this size, at paragraph breaks


@dataclass(frozen=True)
class Limits:
    max_files: int = 4000  # per source
    max_file_bytes: int = 2_000_000
    max_total_bytes: int = 64_000_000  # per source


@dataclass(frozen=True)
class Chunk:
    path: str  # what ``read`` takes
    title: str
    text: str  # what is searched, and shown by ``read``
    source: str  # "torch", "triton", "cute_dsl", "docs", "protocol", "cookbook", "cuda"
    file: str  # the absolute file it came from
    lines: tuple[int, int] | None = None  # an API entry's source lines (1-based, inclusive), shown by ``read``


@dataclass(frozen=True)
class SourceReport:
    name: str
    label: str  # for a person: "torch 2.13.0", "CuTe DSL (nvidia-cutlass-dsl)", "docs /abs/folder"
    available: bool
    detail: str  # where it was found, or why it is missing
    files: int = 0
    skipped: int = 0  # binary, huge, unreadable or unparsable files, and files past the caps
    chunks: int = 0


@dataclass(frozen=True)
class OwnSource:
    """A documentation source of the project or of this machine, not a kernel language's package: indexed once per
    process by ``index`` and searched under ``name``. ``first``: its entries that hold every word of a query are
    listed before any other source's (the cookbook: the project's own advice before reference text). ``whole``: a
    file's path without an anchor reads the whole file (a guide), not the list of its entries."""

    name: str
    about: str  # what it holds, for the tool's description: "the kernelfleet protocol"
    index: Callable[[Limits], tuple[list[Chunk], SourceReport]]
    first: bool = False
    whole: bool = False


# An installed package whose API is indexed: the doc source of a kernel language (core.languages).
PackageSource = DocSource
TORCH, TRITON, CUTE_DSL = TORCH_DOCS, TRITON_DOCS, CUTE_DSL_DOCS


def package_sources() -> tuple[PackageSource, ...]:
    """The doc sources of the registered languages, each once, in registration order."""
    return tuple(dict.fromkeys(entry.docs for entry in languages() if entry.docs is not None))


PACKAGES = package_sources()  # the built-in languages'; the library asks package_sources() for later ones


# ---------------------------------------------------------------------------------------------- reading files


class Budget:
    """What one source may still read."""

    def __init__(self, limits: Limits):
        self.limits = limits
        self.files = 0
        self.bytes = 0
        self.skipped = 0

    def read(self, path: Path) -> str | None:
        """The file's text, or None (counted as skipped) when it is huge, binary, unreadable or past the caps."""
        try:
            size = path.stat().st_size
        except OSError:
            self.skipped += 1
            return None
        if (size > self.limits.max_file_bytes or self.files >= self.limits.max_files
                or self.bytes + size > self.limits.max_total_bytes):
            self.skipped += 1
            return None
        try:
            raw = path.read_bytes()
        except OSError:
            self.skipped += 1
            return None
        self.files += 1
        self.bytes += len(raw)
        if b"\x00" in raw[:65536]:
            self.skipped += 1
            return None
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            self.skipped += 1
            return None


def _walk(root: Path, suffixes: tuple[str, ...]) -> list[Path]:
    """Files under ``root`` with one of ``suffixes``, in a stable order; hidden folders and caches left out."""
    found = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in _SKIPPED_DIRS)
        found += [Path(folder) / f for f in sorted(files) if f.lower().endswith(suffixes) and not f.startswith(".")]
    return found


# ---------------------------------------------------------------------------------------------- text documents


def slug(heading: str) -> str:
    """The anchor of a heading, as GitHub makes it: lower case, punctuation dropped, spaces as dashes."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return re.sub(r"\s", "-", text) or "section"


_ATX = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_FENCE = re.compile(r"^\s*(```|~~~)")
_RST_UNDERLINE = re.compile(r"^([=\-~^\"'`#*+<>:._])\1{2,}\s*$")


def _headings_markdown(lines: list[str]) -> list[tuple[int, int, str]]:
    """(line index, level, text) of the ATX headings outside fenced code."""
    found, fenced = [], False
    for i, line in enumerate(lines):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        match = None if fenced else _ATX.match(line)
        if match and match.group(2):
            found.append((i, len(match.group(1)), match.group(2)))
    return found


def _headings_rst(lines: list[str]) -> list[tuple[int, int, str]]:
    """(line index, level, text) of reST section titles: a line underlined (maybe also overlined) by one
    repeated punctuation character; the level is the order in which each underline style first appears."""
    found, styles = [], {}
    for i in range(len(lines) - 1):
        title, under = lines[i].rstrip(), lines[i + 1].rstrip()
        match = _RST_UNDERLINE.match(under)
        if not match or not title.strip() or _RST_UNDERLINE.match(title) or len(under) < len(title.strip()):
            continue
        overlined = i > 0 and lines[i - 1].rstrip() == under
        style = (match.group(1), overlined)
        level = styles.setdefault(style, len(styles) + 1)
        found.append((i - 1 if overlined else i, level, title.strip()))
    return found


def _split_parts(text: str, limit: int = PART_CHARS) -> list[str]:
    """``text`` cut at paragraph breaks into pieces of about ``limit`` characters (a longer paragraph is cut)."""
    if len(text) <= limit:
        return [text]
    parts, current = [], ""
    for paragraph in re.split(r"(?<=\n)\s*\n", text):
        while len(paragraph) > limit:
            if current:
                parts.append(current)
                current = ""
            parts.append(paragraph[:limit])
            paragraph = paragraph[limit:]
        if current and len(current) + len(paragraph) > limit:
            parts.append(current)
            current = ""
        current += paragraph + ("\n" if not paragraph.endswith("\n") else "")
    if current.strip():
        parts.append(current)
    return parts


def section_chunks(text: str, *, base: str, name: str, source: str, file: str, rst: bool = False) -> list[Chunk]:
    """One chunk per section of a markdown (or reST) document, titled by its heading and the headings above
    it; the text before the first heading is a chunk of its own titled by the file's ``name``. A section longer
    than PART_CHARS is cut into parts, ``#anchor~2`` and so on."""
    lines = text.splitlines()
    headings = _headings_rst(lines) if rst else _headings_markdown(lines)
    chunks: list[Chunk] = []
    used: dict[str, int] = {}
    trail: list[tuple[int, str]] = []
    bounds = [(0, 0, "")] + headings
    for n, (start, level, heading) in enumerate(bounds):
        end = bounds[n + 1][0] if n + 1 < len(bounds) else len(lines)
        body = "\n".join(lines[start:end]).strip()
        if heading:
            trail = [(lv, t) for lv, t in trail if lv < level] + [(level, heading)]
        if not body:
            continue
        if heading:
            anchor = slug(heading)
            count = used.get(anchor, 0)
            used[anchor] = count + 1
            anchor = f"{anchor}-{count}" if count else anchor
            path, title = f"{base}#{anchor}", " › ".join(t for _, t in trail)
        else:
            path, title = base, name
        for k, part in enumerate(_split_parts(body)):
            chunks.append(Chunk(path if k == 0 else f"{path}~{k + 1}", title if k == 0 else f"{title} ({k + 1})",
                                part, source, file))
    return chunks


def text_chunks(text: str, *, base: str, name: str, source: str, file: str) -> list[Chunk]:
    """A plain text file, in parts: ``base`` and then ``base#part-2`` and so on."""
    return [Chunk(base if k == 0 else f"{base}#part-{k + 1}", name if k == 0 else f"{name} (part {k + 1})", part,
                  source, file) for k, part in enumerate(_split_parts(text.strip())) if part.strip()]


class _HtmlToMarkdown(HTMLParser):
    """HTML as markdown-ish text: headings as ``#`` lines, blocks as line breaks, <pre> fenced, scripts dropped."""

    _BLOCKS = {"p", "div", "br", "li", "tr", "table", "ul", "ol", "dl", "dt", "dd", "section", "article", "hr",
               "blockquote"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.out: list[str] = []
        self.skip = 0
        self.pre = 0

    def handle_starttag(self, tag: str, attrs) -> None:
        if tag in ("script", "style", "head", "nav"):
            self.skip += 1
        elif re.fullmatch(r"h[1-6]", tag):
            self.out.append("\n\n" + "#" * int(tag[1]) + " ")
        elif tag == "pre":
            self.pre += 1
            self.out.append("\n```\n")
        elif tag in self._BLOCKS:
            self.out.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in ("script", "style", "head", "nav"):
            self.skip = max(0, self.skip - 1)
        elif re.fullmatch(r"h[1-6]", tag):
            self.out.append("\n\n")
        elif tag == "pre":
            self.pre = max(0, self.pre - 1)
            self.out.append("\n```\n")
        elif tag in self._BLOCKS:
            self.out.append("\n")

    def handle_data(self, data: str) -> None:
        if self.skip:
            return
        if self.pre:
            self.out.append(data)
        else:
            self.out.append(re.sub(r"[ \t\r\n]+", " ", data))

    def text(self) -> str:
        joined = "".join(self.out)
        # A heading's text arrives in pieces: keep it on one line.
        joined = re.sub(r"(#{1,6}) \s*([^\n]*)\n", lambda m: f"{m.group(1)} {m.group(2).strip()}\n", joined)
        return re.sub(r"\n{3,}", "\n\n", joined)


def html_to_markdown(html: str) -> str:
    parser = _HtmlToMarkdown()
    parser.feed(html)
    parser.close()
    return parser.text()


# ---------------------------------------------------------------------------------------------- Python API


def _signature(node: ast.FunctionDef | ast.AsyncFunctionDef, *, drop_self: bool = False) -> str:
    args = node.args
    positional = args.posonlyargs + args.args
    if drop_self and positional and positional[0].arg in ("self", "cls"):
        # Defaults belong to the last positional parameters: the first has one only when all of them do.
        defaults = args.defaults[1:] if len(args.defaults) == len(positional) else args.defaults
        args = ast.arguments(posonlyargs=args.posonlyargs[1:], args=args.args if args.posonlyargs else args.args[1:],
                             vararg=args.vararg, kwonlyargs=args.kwonlyargs, kw_defaults=args.kw_defaults,
                             kwarg=args.kwarg, defaults=defaults)
    try:
        text = f"({ast.unparse(args)})"
        if node.returns is not None:
            text += f" -> {ast.unparse(node.returns)}"
    except (ValueError, AttributeError, IndexError):
        text = "(...)"
    return text


def _decorators(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> str:
    names = []
    for decorator in node.decorator_list:
        try:
            names.append("@" + ast.unparse(decorator))
        except (ValueError, AttributeError):
            pass
    return "\n".join(names)


def _docstring_of(value: ast.expr) -> str | None:
    """A string constant, or ``"...".format(...)`` of one (torch's ``add_docstr`` texts), as a docstring."""
    if isinstance(value, ast.Constant) and isinstance(value.value, str):
        return inspect.cleandoc(value.value)
    if (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr == "format"
            and isinstance(value.func.value, ast.Constant) and isinstance(value.func.value.value, str)):
        return inspect.cleandoc(value.func.value.value)
    return None


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = _dotted(node.value)
        return f"{head}.{node.attr}" if head else None
    return None


def _public(name: str) -> bool:
    return not name.startswith("_") or name == "__init__"


def _module_body(body: list[ast.stmt]) -> list[ast.stmt]:
    """Statements at module level, looking into ``if`` and ``try`` blocks (conditional definitions)."""
    found = []
    for node in body:
        if isinstance(node, ast.If):
            found += _module_body(node.body) + _module_body(node.orelse)
        elif isinstance(node, ast.Try):
            found += _module_body(node.body) + _module_body(node.orelse)
        else:
            found.append(node)
    return found


def api_chunks(text: str, *, module: str, base: str, source: str, file: str) -> list[Chunk] | None:
    """One chunk per public module, class, function and method of a Python file (None: not valid Python).
    ``module`` is the dotted module name, ``base`` the path the chunk paths start with."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError):
        return None
    chunks: list[Chunk] = []
    doc = ast.get_docstring(tree)
    if doc:
        chunks.append(Chunk(base, f"module {module}", f"module {module}\n\n{doc}", source, file))

    def entry(qualname: str, title: str, head: str, body: str | None, node: ast.AST) -> None:
        end = getattr(node, "end_lineno", None) or node.lineno
        chunks.append(Chunk(f"{base}::{qualname}", title, f"{head}\n\n{body}" if body else head, source, file,
                            (node.lineno, end)))

    def functions(nodes: list[ast.stmt], prefix: str, depth: int) -> None:
        for node in nodes:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _public(node.name):
                if node.name == "__init__" and not prefix:
                    continue
                qual = f"{prefix}{node.name}"
                signature = _signature(node, drop_self=bool(prefix))
                kind = "async def" if isinstance(node, ast.AsyncFunctionDef) else "def"
                head = "\n".join(x for x in (_decorators(node), f"{kind} {module}.{qual}{signature}") if x)
                entry(qual, f"{module}.{qual}{signature}", head, ast.get_docstring(node), node)
            elif isinstance(node, ast.ClassDef) and _public(node.name) and depth < 2:
                qual = f"{prefix}{node.name}"
                bases = ", ".join(ast.unparse(b) for b in node.bases)
                init = next((n for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                             and n.name == "__init__"), None)
                signature = _signature(init, drop_self=True) if init else (f"({bases})" if bases else "")
                head = "\n".join(x for x in (_decorators(node), f"class {module}.{qual}{signature}"
                                             + (f"  # bases: {bases}" if bases and init else "")) if x)
                entry(qual, f"class {module}.{qual}{signature}", head, ast.get_docstring(node), node)
                functions([n for n in node.body if not (isinstance(n, ast.FunctionDef) and n.name == "__init__")],
                          f"{qual}.", depth + 1)

    body = _module_body(tree.body)
    functions(body, "", 0)
    for node in body:  # torch documents its C functions with add_docstr(torch.name, r"""...""")
        if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and len(node.value.args) >= 2):
            continue
        call = node.value
        func = _dotted(call.func) or ""
        name = None
        if func.split(".")[-1] in ("add_docstr", "_add_docstr"):
            name = _dotted(call.args[0])
        elif func.split(".")[-1] == "add_docstr_all" and isinstance(call.args[0], ast.Constant):
            name = f"torch.Tensor.{call.args[0].value}"
        doc = _docstring_of(call.args[1])
        if name and doc:
            first = doc.splitlines()[0] if doc else ""
            title = f"{name.rsplit('.', 1)[0]}.{first}" if first.startswith(name.rsplit(".", 1)[-1] + "(") else name
            entry(name, title[:160], f"{name}\n\n{doc}", None, node)
    return chunks


# ---------------------------------------------------------------------------------------------- sources


def _unique(chunks: list[Chunk]) -> list[Chunk]:
    """The first chunk of each path (a name defined twice, in both branches of an ``if``, is one entry)."""
    seen: set[str] = set()
    return [c for c in chunks if not (c.path in seen or seen.add(c.path))]


def locate_package(package: PackageSource) -> Path | None:
    """The package's folder, found without importing it: the import system's finders first (they see .pth
    paths), then the files its distributions list."""
    try:
        spec = importlib.util.find_spec(package.top_level)
    except (ImportError, ValueError):
        spec = None
    folders = [Path(p) for p in (spec.submodule_search_locations or [])] if spec is not None else []
    for name in package.distributions:
        try:
            files = importlib.metadata.distribution(name).files or []
        except importlib.metadata.PackageNotFoundError:
            continue
        for file in files:
            parts = Path(str(file)).parts
            if len(parts) >= 2 and parts[-2] == package.top_level and parts[-1] == "__init__.py":
                folders.append(Path(str(file.locate())).parent)
    for folder in folders:
        if folder.is_dir() and (not package.marker or (folder / package.marker).exists()):
            return folder
    return None


def package_version(package: PackageSource) -> str:
    for name in package.distributions:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return ""


def _module_name(relative: Path) -> str:
    parts = list(relative.with_suffix("").parts)
    if parts and parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def package_chunks(package: PackageSource, limits: Limits = Limits()) -> tuple[list[Chunk], SourceReport]:
    """The API entries of the package's chosen parts and the sections of the .md/.rst files it ships."""
    folder = locate_package(package)
    if folder is None:
        return [], SourceReport(package.name, package.label, False, package.missing_note())
    root = folder.parent  # paths are shown from the folder holding the package: "torch/cuda/__init__.py"
    budget = Budget(limits)
    chunks: list[Chunk] = []
    python: list[Path] = []
    for part in package.parts:
        target = folder / part if part else folder
        if target.is_file():
            python.append(target)
        elif target.is_dir():
            python += [p for p in _walk(target, (".py",))
                       if not any(x.startswith("_") and x != "__init__.py" for x in p.relative_to(target).parts)]
    for path in dict.fromkeys(python):
        text = budget.read(path)
        if text is None:
            continue
        relative = path.relative_to(root)
        found = api_chunks(text, module=_module_name(relative), base=f"{package.name}:{relative.as_posix()}",
                           source=package.name, file=str(path))
        if found is None:
            budget.skipped += 1
        else:
            chunks += found
    for path in _walk(folder, (".md", ".rst")):
        text = budget.read(path)
        if text is not None:
            relative = path.relative_to(root).as_posix()
            chunks += section_chunks(text, base=f"{package.name}:{relative}", name=relative, source=package.name,
                                     file=str(path), rst=path.suffix.lower() == ".rst")
    chunks = _unique(chunks)
    version = package_version(package)
    label = f"{package.label} {version}".strip()
    return chunks, SourceReport(package.name, label, True, str(folder), budget.files, budget.skipped, len(chunks))


def file_chunks(path: Path, text: str, *, base: str, source: str, name: str) -> list[Chunk] | None:
    """A documentation file's chunks by its kind (None: a Python file that does not parse)."""
    suffix = path.suffix.lower()
    if suffix == ".md":
        return section_chunks(text, base=base, name=name, source=source, file=str(path))
    if suffix == ".rst":
        return section_chunks(text, base=base, name=name, source=source, file=str(path), rst=True)
    if suffix in (".html", ".htm"):
        return section_chunks(html_to_markdown(text), base=base, name=name, source=source, file=str(path))
    if suffix == ".py":
        return api_chunks(text, module=path.stem, base=base, source=source, file=str(path))
    return text_chunks(text, base=base, name=name, source=source, file=str(path))


def folder_chunks(folder: str | Path, limits: Limits = Limits()) -> tuple[list[Chunk], SourceReport]:
    """The documentation files under a configured folder (paths ``docs:/abs/file#anchor``)."""
    root = Path(folder).expanduser().resolve()
    label = f"docs {root}"
    if not root.is_dir():
        return [], SourceReport("docs", label, False, f"docs folder {root}: no such folder")
    budget = Budget(limits)
    chunks: list[Chunk] = []
    for path in _walk(root, FOLDER_SUFFIXES):
        text = budget.read(path)
        if text is None:
            continue
        found = file_chunks(path, text, base=f"docs:{path}", source="docs", name=str(path.relative_to(root)))
        if found is None:
            budget.skipped += 1
        else:
            chunks += found
    chunks = _unique(chunks)
    return chunks, SourceReport("docs", label, True, str(root), budget.files, budget.skipped, len(chunks))


def protocol_chunks(path: Path = PROTOCOL_FILE) -> tuple[list[Chunk], SourceReport]:
    """The sections of the project's protocol.md (paths ``protocol:protocol.md#anchor``)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return [], SourceReport("protocol", "protocol", False, f"{path}: {exc}")
    chunks = section_chunks(text, base=f"protocol:{path.name}", name=path.name, source="protocol", file=str(path))
    return chunks, SourceReport("protocol", "protocol", True, str(path), 1, 0, len(chunks))


def cookbook_chunks(folder: Path = COOKBOOK_DIR, limits: Limits = Limits()) -> tuple[list[Chunk], SourceReport]:
    """The sections of the cookbook's guides, the markdown files of ``folder`` (paths
    ``cookbook:wgmma-gemm.md#anchor``)."""
    if not folder.is_dir():
        return [], SourceReport("cookbook", "cookbook", False, f"no cookbook at {folder}")
    budget = Budget(limits)
    chunks: list[Chunk] = []
    for path in _walk(folder, (".md",)):
        text = budget.read(path)
        if text is not None:
            relative = path.relative_to(folder).as_posix()
            chunks += section_chunks(text, base=f"cookbook:{relative}", name=relative, source="cookbook",
                                     file=str(path))
    chunks = _unique(chunks)
    return chunks, SourceReport("cookbook", "cookbook", True, str(folder), budget.files, budget.skipped, len(chunks))


def protocol_source(path: Path = PROTOCOL_FILE) -> OwnSource:
    return OwnSource("protocol", "the kernelfleet protocol", lambda limits: protocol_chunks(path))


def cookbook_source(folder: Path = COOKBOOK_DIR) -> OwnSource:
    return OwnSource("cookbook", "the project's cookbook of kernel techniques (docs/cookbook)",
                     lambda limits: cookbook_chunks(folder, limits), first=True, whole=True)
