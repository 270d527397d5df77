"""The ``docs`` tool: search by keyword the documentation of the installed kernel libraries, the project's own
sources (the protocol, the cookbook, this machine's CUDA toolkit headers: ``core.docs.library.own_sources``) and the
run's ``[llm] docs`` folders, and read one entry (or one cookbook guide) in full (see ``core.docs``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import anyio.to_thread

from core.docs.index import package_sources
from core.docs.library import DEFAULT_RESULTS, MAX_RESULTS, READ_CHARS, DocsError, DocsLibrary, own_sources, \
    shared_library, source_names
from core.llm.toolkit import Tool, ToolRefused, ToolResult

if TYPE_CHECKING:
    from core.llm.tools import Toolbox


async def library_for(box: Toolbox) -> DocsLibrary:
    """The process's documentation library for the run's folders, built off the event loop on first use."""
    folders = tuple(box.bench.docs_paths())
    return await anyio.to_thread.run_sync(shared_library, folders)


async def _docs(box: Toolbox, args: dict[str, Any]) -> ToolResult:
    query, read = args.get("query"), args.get("read")
    if (query is None) == (read is None):
        raise ToolRefused("give either query (keywords to search) or read (a path from a search result)")
    library = await library_for(box)
    try:
        if read is not None:
            return ToolResult(library.read_text(read, args.get("offset", 0)))
        return ToolResult(library.search_text(query, source=args.get("source"),
                                              limit=args.get("limit", DEFAULT_RESULTS)))
    except DocsError as exc:
        raise ToolRefused(str(exc)) from None


# The kernel languages' doc sources and the own sources as the registries hold them when the tools are made.
_LIBRARIES = ", ".join(p.label.split(" (")[0] for p in package_sources())
_OWN = "; ".join(f"{s.name}: {s.about}" for s in own_sources())
_FIRST = " and ".join(s.name for s in own_sources() if s.first)

TOOLS: tuple[Tool, ...] = (
    Tool("docs", "Search documentation by keywords: the API of the kernel libraries installed here ("
                 f"{_LIBRARIES}; torch.cuda, torch.utils.cpp_extension, torch.library and more, from their sources), "
                 f"the project's own sources ({_OWN}) and the run's documentation folders. Entries of {_FIRST} "
                 "holding every query word come first. `query` returns ranked entries, each with a path; `read` with one of those "
                 "paths returns that entry in full (an API entry with its source code; a cookbook guide's path "
                 f"without its #anchor, e.g. cookbook:memory-bound.md, the whole guide), {READ_CHARS} characters "
                 "from `offset`.", _docs,
         {"query": {"type": "string", "description": "keywords, e.g. 'tiled copy' or 'cuda stream synchronize'"},
          "read": {"type": "string", "description": "a path exactly as a search result shows it"},
          "offset": {"type": "integer", "description": "where to start reading (the previous reading says)"},
          "source": {"type": "string", "enum": list(source_names()), "description": "search only this source"},
          "limit": {"type": "integer", "description": f"results, 1 to {MAX_RESULTS} (default {DEFAULT_RESULTS})"}}),
)
