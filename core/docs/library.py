"""The documentation library of a process: every source indexed once, lazily, searched and read as bounded text.

``shared_library(folders)`` builds the index on first use (blocking: call it from a worker thread in async code)
and keeps it for the process; the installed packages and the registered own sources (the protocol, the cookbook,
the CUDA toolkit's headers: :func:`register_source`) are indexed once whatever folders are asked for. Search
results and readings are plain text for a model or a terminal: ``search_text`` ranks (the entries of a ``first``
source that hold every word of the query come first), ``read_text`` shows one entry in full, or a whole file of a
``whole`` source (a cookbook guide) named without an anchor, READ_CHARS at a time from ``offset``.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from core.docs.index import Chunk, Limits, OwnSource, PackageSource, SourceReport, cookbook_source, \
    folder_chunks, package_chunks, package_sources, protocol_source
from core.docs.search import Bm25, build_bm25, rank, tokens
from core.docs.toolkit import CUDA

READ_CHARS = 4000
DEFAULT_RESULTS = 8
MAX_RESULTS = 20
MAX_QUERY_CHARS = 500
FOLDERS_SOURCE = "docs"  # the run's [llm] docs folders

_SOURCES_LOCK = threading.Lock()
_OWN_SOURCES: dict[str, OwnSource] = {}  # registration order


def register_source(source: OwnSource, *, replace: bool = False) -> OwnSource:
    """Add an own source (``replace``: in place of the one of that name); a name already taken is an error."""
    with _SOURCES_LOCK:
        taken = set(_OWN_SOURCES) | {p.name for p in package_sources()} | {FOLDERS_SOURCE}
        if source.name in taken and not (replace and source.name in _OWN_SOURCES):
            raise ValueError(f"docs source name {source.name!r} is taken")
        _OWN_SOURCES[source.name] = source
    return source


def own_sources() -> tuple[OwnSource, ...]:
    """The registered own sources, in registration order."""
    return tuple(_OWN_SOURCES.values())


for _source in (protocol_source(), cookbook_source(), CUDA):
    register_source(_source)


def source_names() -> tuple[str, ...]:
    """What a search may be narrowed to: the kernel languages' doc sources, the own sources and the run's folders."""
    return tuple(p.name for p in package_sources()) + tuple(s.name for s in own_sources()) + (FOLDERS_SOURCE,)


SOURCE_NAMES = source_names()  # the built-in languages'; searches ask source_names() for later ones


class DocsError(ValueError):
    """A request the library refuses: an empty query, an unknown path, a bad offset or source."""


@dataclass(frozen=True)
class DocsLibrary:
    index: Bm25
    sources: tuple[SourceReport, ...]
    packages: tuple[PackageSource, ...]
    build_s: float
    by_path: dict[str, Chunk] = field(repr=False, compare=False, default_factory=dict)
    first: frozenset[str] = frozenset()  # the sources whose entries holding every query word are listed first
    whole: frozenset[str] = frozenset()  # the sources whose files are read whole when named without an anchor

    @property
    def source_names(self) -> tuple[str, ...]:
        """The registered languages' doc sources (and any other this library indexes), the protocol, the folders."""
        return tuple(dict.fromkeys(tuple(p.name for p in self.packages) + source_names()))

    def search_text(self, query: str, *, source: str | None = None, limit: int = DEFAULT_RESULTS) -> str:
        query = _checked_query(query)
        if source is not None and source not in self.source_names:
            raise DocsError(f"no source {source!r}; sources: {', '.join(self.source_names)}")
        if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_RESULTS:
            raise DocsError(f"limit must be an integer from 1 to {MAX_RESULTS}")
        notes = self._missing_notes(query, source)
        hits, matched = rank(self.index, query, sources=frozenset([source]) if source else None, limit=limit,
                             first=self.first)
        lines = [f"note: {note}" for note in notes]
        if not hits:
            lines.append(f"no documentation matches {query!r}" + (f" in {source}" if source else "")
                         + f"; searched: {self._summary()}")
            return "\n".join(lines)
        lines.append(f"{len(hits)} of {matched} matching entries for {query!r}"
                     + (f" in {source}" if source else "") + ":")
        for n, hit in enumerate(hits, 1):
            lines.append(f"{n}. {_one_line(hit.chunk.title, 160)}\n   {hit.chunk.path}")
            if hit.snippet:
                lines.append(f"   {hit.snippet}")
        lines.append("Read one in full with its path (docs read=PATH).")
        return "\n".join(lines)

    def read_text(self, path: str, offset: int = 0) -> str:
        if not isinstance(path, str) or not path.strip():
            raise DocsError("read takes a path from a search result")
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
            raise DocsError("offset must be an integer >= 0")
        path = path.strip()
        chunk = self.by_path.get(path)
        if chunk is None:
            return self._contents(path, offset)
        return _page(chunk.title, path, full_text(chunk), offset)

    def _contents(self, path: str, offset: int) -> str:
        """The entries of a file named without an anchor or entry name (a ``whole`` source's file is read whole,
        from ``offset``); DocsError if the path names nothing."""
        inside = [c for c in self.index.chunks if c.path.startswith(path + "#") or c.path.startswith(path + "::")]
        if not inside:
            raise DocsError(f"no documentation entry {path!r}: give a path exactly as a search result shows it")
        if all(c.source in self.whole and c.file == inside[0].file for c in inside):
            return _page(path, path, "\n\n".join(c.text for c in inside), offset)
        lines = [f"{path}: {len(inside)} entries; read one by its path:"]
        lines += [f"- {c.path}  {_one_line(c.title, 100)}" for c in inside[:60]]
        if len(inside) > 60:
            lines.append(f"... and {len(inside) - 60} more")
        return "\n".join(lines)

    def _missing_notes(self, query: str, source: str | None) -> list[str]:
        """Why a source the query names (or is narrowed to) has nothing: not installed, not found here."""
        words = set(tokens(query))
        notes = []
        for package in self.packages:
            report = next((r for r in self.sources if r.name == package.name), None)
            if report is not None and not report.available and (source == package.name
                                                                 or words & set(package.mentions)):
                notes.append(report.detail)
        notes += [r.detail for r in self.sources if not r.available and r.name not in {p.name for p in self.packages}
                  and (r.name == FOLDERS_SOURCE or r.name == source)]
        return notes

    def _summary(self) -> str:
        return ", ".join(f"{r.label} ({r.chunks} entries)" if r.available else f"{r.label} (missing)"
                         for r in self.sources)

    def describe(self) -> str:
        """One line per source: what was indexed, or why not."""
        lines = []
        for r in self.sources:
            if r.available:
                lines.append(f"{r.label}: {r.chunks} entries from {r.files} files"
                             + (f" ({r.skipped} skipped)" if r.skipped else "") + f" [{r.detail}]")
            else:
                lines.append(f"{r.label}: {r.detail}")
        return "\n".join(lines)


def full_text(chunk: Chunk) -> str:
    """What ``read`` shows: the chunk's text and, for an API entry, its source lines read from the file now."""
    if chunk.lines is None:
        return chunk.text
    start, end = chunk.lines
    try:
        lines = Path(chunk.file).read_text(encoding="utf-8").splitlines()[start - 1:end]
    except (OSError, UnicodeDecodeError):
        return chunk.text
    return f"{chunk.text}\n\nsource ({chunk.file}, lines {start}-{end}):\n" + "\n".join(lines)


def _page(title: str, path: str, document: str, offset: int) -> str:
    """READ_CHARS of ``document`` from ``offset``, headed by what it is and where the reading stands."""
    if offset >= len(document) and document:
        raise DocsError(f"offset {offset} is past the end of {path} ({len(document)} characters)")
    page = document[offset:offset + READ_CHARS]
    end = offset + len(page)
    head = f"{title}\n{path} (characters {offset}-{end} of {len(document)})\n"
    tail = (f"\n... more: read again with offset={end}" if end < len(document) else "")
    return head + "\n" + page + tail


def build_library(folders: tuple[str, ...] = (), *, packages: tuple[PackageSource, ...] | None = None,
                  sources: tuple[OwnSource, ...] | None = None, limits: Limits = Limits()) -> DocsLibrary:
    """Index the packages, the own ``sources`` (None: the registered ones) and ``folders`` now (no cache)."""
    started = time.perf_counter()
    packages = package_sources() if packages is None else packages
    sources = own_sources() if sources is None else sources
    parts = [package_chunks(p, limits) for p in packages] + [s.index(limits) for s in sources]
    return _assemble(parts, folders, packages, sources, limits, started)


def _assemble(parts, folders, packages, sources, limits, started) -> DocsLibrary:
    parts = list(parts) + [folder_chunks(f, limits) for f in dict.fromkeys(folders)]
    chunks: list[Chunk] = []
    by_path: dict[str, Chunk] = {}
    for found, _ in parts:
        for chunk in found:
            if chunk.path not in by_path:  # a folder listed inside another is indexed once
                by_path[chunk.path] = chunk
                chunks.append(chunk)
    index = build_bm25(tuple(chunks))
    return DocsLibrary(index, tuple(r for _, r in parts), packages, time.perf_counter() - started, by_path,
                       frozenset(s.name for s in sources if s.first), frozenset(s.name for s in sources if s.whole))


_LOCK = threading.Lock()
_PACKAGE_PARTS: dict[str, tuple[list[Chunk], SourceReport]] = {}
_OWN_PARTS: dict[str, tuple[list[Chunk], SourceReport]] = {}
_LIBRARIES: dict[tuple[str, ...], DocsLibrary] = {}


def shared_library(folders: tuple[str, ...] | list[str] = ()) -> DocsLibrary:
    """The process's library for ``folders``, built on first use; the packages and the own sources are indexed
    once per process."""
    key = tuple(str(Path(f).expanduser().resolve()) for f in folders)
    with _LOCK:
        library = _LIBRARIES.get(key)
        if library is None:
            started = time.perf_counter()
            packages = package_sources()
            sources = own_sources()
            for package in packages:
                if package.name not in _PACKAGE_PARTS:
                    _PACKAGE_PARTS[package.name] = package_chunks(package)
            for source in sources:
                if source.name not in _OWN_PARTS:
                    _OWN_PARTS[source.name] = source.index(Limits())
            parts = [_PACKAGE_PARTS[p.name] for p in packages] + [_OWN_PARTS[s.name] for s in sources]
            library = _assemble(parts, key, packages, sources, Limits(), started)
            _LIBRARIES[key] = library
        return library


def _checked_query(query: object) -> str:
    if not isinstance(query, str) or not query.strip():
        raise DocsError("query must be a non-empty string of keywords")
    if len(query) > MAX_QUERY_CHARS:
        raise DocsError(f"query is {len(query)} characters; give a few keywords (at most {MAX_QUERY_CHARS})")
    if not tokens(query):
        raise DocsError(f"query {query!r} has no searchable words")
    return query.strip()


def _one_line(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 3] + "..."
