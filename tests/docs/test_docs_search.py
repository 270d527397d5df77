"""The docs tool's library: folders of documents cut into sections and API entries, ranked by keyword, read in
pages; the installed torch indexed from its sources without importing it; the tool through a real CPU fleet run
with the scripted LLM server; the ``kernelfleet docs`` command."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from core.config import ConfigError, load_config
from core.docs.index import CUTE_DSL, TORCH, Limits, PackageSource, html_to_markdown, protocol_source, section_chunks, \
    slug
from core.docs.library import READ_CHARS, DocsError, build_library
from core.docs.search import phrase_text, rank, tokens, word_parts

ROOT = Path(__file__).resolve().parents[2]

TILED_COPY = """# Copy atoms

An atom moves one small tile of data.

## Tiled copy

`make_tiled_copy(atom, thread_layout, value_layout)` builds a tiled copy: each thread of the block copies its
values of the tile, so one call moves a whole tile from global to shared memory.

## Copy engines

The copy engine copies host memory. A copy is asynchronous; copy, copy, copy again.
"""

DISTRACTORS = {  # each holds "tiled" or "copy", or both apart
    "layouts.md": "# Layouts\n\n## Tiled layouts\n\nA tiled layout is tiled by a tiler; tiled, tiled and tiled "
                  "again. Nothing is moved here.\n",
    "notes.md": "# Notes\n\nWe copied the tile sizes from the tiled GEMM notes; a copy of the table follows.\n"
                "\n## Tables\n\nSizes and strides.\n",
}

API = {
    "atoms.py": '"""Atoms for moving tiles."""\n\n\ndef make_tiled_copy(atom, thread_layout, value_layout):\n'
                '    """Build a copy of a tile done by all the threads of a block."""\n    return atom\n\n\n'
                'class TiledCopy:\n    """What make_tiled_copy returns."""\n\n'
                '    def partition_source(self, tensor):\n        """The part of the source this thread reads."""\n'
                '        return tensor\n\n    def _private(self):\n        """Not indexed."""\n',
}


def write_docs(folder: Path, *, api: bool = False) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "copy.md").write_text(TILED_COPY)
    for name, text in {**DISTRACTORS, **(API if api else {})}.items():
        (folder / name).write_text(text)
    return folder


def folder_library(folder: Path, **kwargs):
    return build_library((str(folder),), packages=(), sources=(), **kwargs)


def first_result_path(text: str) -> str:
    lines = text.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("1. "))
    return lines[first + 1].strip()


def test_tiled_copy_section_is_ranked_first(tmp_path):
    folder = write_docs(tmp_path / "docs")
    library = folder_library(folder)
    hits, matched = rank(library.index, "tiled copy", limit=10)
    assert hits[0].chunk.path == f"docs:{folder / 'copy.md'}#tiled-copy"
    assert hits[0].chunk.title == "Copy atoms › Tiled copy"
    assert "make_tiled_copy" in hits[0].snippet
    paths = [h.chunk.path for h in hits]
    assert set(paths) == {f"docs:{folder / 'copy.md'}#{a}" for a in ("tiled-copy", "copy-engines", "copy-atoms")} \
        | {f"docs:{folder / 'layouts.md'}#tiled-layouts", f"docs:{folder / 'notes.md'}#notes"}
    assert matched == len(hits)
    text = library.search_text("tiled copy")
    assert first_result_path(text) == f"docs:{folder / 'copy.md'}#tiled-copy"
    assert text.splitlines()[0] == f"{len(hits[:8])} of {matched} matching entries for 'tiled copy':"


def test_identifiers_are_split_into_words():
    assert word_parts("make_tiled_copy") == ["make", "tiled", "copy"]
    assert word_parts("TiledCopy") == ["tiled", "copy"]
    assert word_parts("HTTPServer2") == ["http", "server", "2"]
    assert tokens("make_tiled_copy") == ["make_tiled_copy", "make", "tiled", "copy"]
    assert tokens("the streams of a TiledCopy") == ["stream", "tiledcopy", "tiled", "copy"]
    assert phrase_text("cute.make_tiled_copy(atom)") == " cute make tiled copy atom "


def test_an_exact_identifier_wins_and_words_find_identifiers(tmp_path):
    folder = write_docs(tmp_path / "docs", api=True)
    library = folder_library(folder)
    hits, _ = rank(library.index, "make_tiled_copy")
    assert hits[0].chunk.path == f"docs:{folder / 'atoms.py'}::make_tiled_copy"
    assert hits[0].chunk.title == "atoms.make_tiled_copy(atom, thread_layout, value_layout)"
    methods, _ = rank(library.index, "partition source")
    assert methods[0].chunk.path == f"docs:{folder / 'atoms.py'}::TiledCopy.partition_source"
    assert methods[0].chunk.title == "atoms.TiledCopy.partition_source(tensor)"  # self dropped
    assert not rank(library.index, "private")[0]  # underscore names are not indexed
    # The words of a query find entries named by identifiers: the API entries hold "tiled copy" as a phrase.
    phrase = [h.chunk.path for h in rank(library.index, "tiled copy")[0][:4]]
    assert {f"docs:{folder / 'atoms.py'}::make_tiled_copy", f"docs:{folder / 'atoms.py'}::TiledCopy",
            f"docs:{folder / 'copy.md'}#tiled-copy"} <= set(phrase)


def test_reading_a_result_in_pages(tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    body = "\n\n".join(f"Paragraph {i}: " + "word " * 40 for i in range(24))  # ~5000 characters
    (folder / "long.md").write_text(f"# Long\n\n## Big section\n\n{body}\n\n## Small\n\nshort text\n")
    library = folder_library(folder)
    path = f"docs:{folder / 'long.md'}#big-section"
    first = library.read_text(path)
    lines = first.splitlines()
    assert lines[0] == "Long › Big section"
    total = len(library.by_path[path].text)
    assert READ_CHARS < total
    assert lines[1] == f"{path} (characters 0-{READ_CHARS} of {total})"
    assert first.endswith(f"... more: read again with offset={READ_CHARS}")
    rest = library.read_text(path, READ_CHARS)
    assert "Paragraph 23" in rest and "more: read again" not in rest
    assert rest.splitlines()[1] == f"{path} (characters {READ_CHARS}-{total} of {total})"
    with pytest.raises(DocsError, match="past the end"):
        library.read_text(path, total + 10)
    with pytest.raises(DocsError, match="offset must be an integer"):
        library.read_text(path, -1)
    with pytest.raises(DocsError, match="no documentation entry"):
        library.read_text(path + "-nope")
    # A file named without an anchor lists its sections.
    contents = library.read_text(f"docs:{folder / 'long.md'}")
    assert f"- {path}  Long › Big section" in contents and "#small" in contents


def test_long_sections_are_cut_into_parts_and_headings_in_code_are_not_sections():
    body = "\n\n".join("x" * 1000 for _ in range(14))
    text = f"# Top\n\n```\n# not a heading\n```\n\n## Part\n\n{body}\n\n## Part\n\nagain\n"
    chunks = section_chunks(text, base="docs:/f.md", name="f.md", source="docs", file="/f.md")
    paths = [c.path for c in chunks]
    assert paths[0] == "docs:/f.md#top" and "# not a heading" in chunks[0].text
    assert paths[1:4] == ["docs:/f.md#part", "docs:/f.md#part~2", "docs:/f.md#part~3"]
    assert paths[-1] == "docs:/f.md#part-1"  # a repeated heading gets its own anchor
    assert sum(len(c.text) for c in chunks[1:-1]) >= 14000
    assert slug("The `docs` tool: search!") == "the-docs-tool-search"


def test_rst_html_and_text_files_are_indexed(tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "guide.rst").write_text("Guide\n=====\n\nIntro.\n\nWarp shuffles\n-------------\n\n"
                                      "Use shfl_sync to exchange registers.\n")
    (folder / "isa.html").write_text("<html><head><style>h2 {}</style></head><body><h1>PTX</h1><p>ISA</p>"
                                     "<h2>cp.async.bulk <b>tensor</b></h2><p>Copies a tensor with the TMA unit."
                                     "</p><script>ignored_word()</script></body></html>")
    (folder / "notes.txt").write_text("Register pressure notes: spills hurt occupancy.\n")
    library = folder_library(folder)
    assert rank(library.index, "shfl_sync")[0][0].chunk.path == f"docs:{folder / 'guide.rst'}#warp-shuffles"
    hit = rank(library.index, "tma tensor copy")[0][0]
    assert hit.chunk.path == f"docs:{folder / 'isa.html'}#cpasyncbulk-tensor"
    assert hit.chunk.title == "PTX › cp.async.bulk tensor"
    assert not rank(library.index, "ignored_word")[0]
    assert rank(library.index, "spills")[0][0].chunk.path == f"docs:{folder / 'notes.txt'}"
    assert "# PTX" in html_to_markdown("<h1>PTX</h1>")


def test_huge_binary_and_undecodable_files_are_skipped(tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "good.md").write_text("# Good\n\nwarpgroup matrix multiply\n")
    (folder / "huge.md").write_text("# Huge\n\nenormous " + "filler " * 4000)
    (folder / "binary.md").write_bytes(b"# Binary\n\nbinaryword \x00\x01\x02")
    (folder / "latin.md").write_bytes("# Latin\n\nlatinword caf\xe9".encode("latin-1"))
    (folder / "image.png").write_bytes(b"\x89PNG pngword")
    library = folder_library(folder, limits=Limits(max_file_bytes=10_000))
    report = next(r for r in library.sources if r.name == "docs")
    assert (report.files, report.skipped) == (3, 3)  # good and the two read but refused; huge never read
    assert rank(library.index, "warpgroup")[0]
    for word in ("enormous", "binaryword", "latinword", "pngword"):
        assert not rank(library.index, word)[0], word
    capped = folder_library(folder, limits=Limits(max_files=1))
    assert [r.files for r in capped.sources] == [1]


def test_a_missing_package_is_reported_once_and_the_rest_still_searched(tmp_path):
    folder = write_docs(tmp_path / "docs")
    absent = PackageSource("cute_dsl", "CuTe DSL (nvidia-cutlass-dsl)", "kernelfleet_absent_package_xyz",
                           ("kernelfleet-absent-package-xyz",), mentions=("cute", "cutlass"))
    library = build_library((str(folder),), packages=(absent,), sources=())
    report = library.sources[0]
    assert not report.available and report.detail == "CuTe DSL (nvidia-cutlass-dsl) is not installed here"
    text = library.search_text("cute tiled copy")
    assert text.count("is not installed here") == 1
    assert text.splitlines()[0] == "note: CuTe DSL (nvidia-cutlass-dsl) is not installed here"
    assert first_result_path(text) == f"docs:{folder / 'copy.md'}#tiled-copy"
    assert "not installed" not in library.search_text("tiled copy")
    only = library.search_text("tiled copy", source="cute_dsl")
    assert only.splitlines()[0].startswith("note: CuTe DSL") and "no documentation matches" in only


@pytest.mark.skipif(importlib.util.find_spec("cutlass") is not None, reason="CuTe DSL is installed here")
def test_the_real_cute_dsl_source_says_it_is_not_installed():
    library = build_library((), packages=(CUTE_DSL,), sources=(protocol_source(),))
    text = library.search_text("cutlass tiled copy")
    assert text.splitlines()[0] == "note: CuTe DSL (nvidia-cutlass-dsl) is not installed here"


def test_a_vanished_folder_is_noted():
    library = build_library(("/nonexistent/kernelfleet-docs",), packages=(), sources=(protocol_source(),))
    text = library.search_text("workload timeout")
    assert text.splitlines()[0] == "note: docs folder /nonexistent/kernelfleet-docs: no such folder"
    assert "protocol:protocol.md#" in text


def test_torch_api_is_indexed_from_its_sources():
    library = build_library((), packages=(TORCH,), sources=())
    hits, _ = rank(library.index, "cuda stream synchronize", limit=5)
    paths = [h.chunk.path for h in hits]
    assert {"torch:torch/cuda/__init__.py::synchronize", "torch:torch/cuda/streams.py::Stream.synchronize"} \
        & set(paths[:3]), paths
    assert rank(library.index, "load_inline")[0][0].chunk.path == "torch:torch/utils/cpp_extension.py::load_inline"
    # C functions documented by add_docstr in torch/_torch_docs.py.
    assert "torch:torch/_torch_docs.py::torch.matmul" in [h.chunk.path for h in rank(library.index, "matmul")[0]]
    reading = library.read_text("torch:torch/cuda/__init__.py::synchronize")
    assert reading.startswith("torch.cuda.synchronize(")
    assert "source (" in reading and "def synchronize(" in reading  # the entry's source lines, read from the file


def test_the_index_imports_none_of_the_packages():
    script = ("import sys\nfrom core.docs.library import build_library\nlibrary = build_library(())\n"
              "print(len(library.index.chunks), sorted(m for m in ('torch', 'triton', 'cutlass') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    count, imported = result.stdout.split(" ", 1)
    assert int(count) > 500 and imported.strip() == "[]"


def test_bad_requests_are_refused(tmp_path):
    library = folder_library(write_docs(tmp_path / "docs"))
    for query, message in (("", "non-empty"), ("  ", "non-empty"), ("x" * 600, "at most 500"),
                           ("the of a", "no searchable words"), (5, "non-empty")):
        with pytest.raises(DocsError, match=message):
            library.search_text(query)
    with pytest.raises(DocsError, match="no source 'pip'"):
        library.search_text("copy", source="pip")
    with pytest.raises(DocsError, match="limit must be"):
        library.search_text("copy", limit=0)
    assert library.search_text("copy", limit=2).count("\n   docs:") == 2


def test_config_docs_folders_are_resolved_and_checked(tmp_path):
    write_docs(tmp_path / "notes")
    config = tmp_path / "fleet.toml"
    config.write_text('[llm]\ndocs = ["notes"]\n')
    assert load_config(config).llm.docs == (str(tmp_path / "notes"),)
    config.write_text('[llm]\ndocs = ["notes", "missing"]\n')
    with pytest.raises(ConfigError) as info:
        load_config(config)
    assert str(info.value) == f"{config}: llm.docs[1]: no such folder: {tmp_path / 'missing'}"
    config.write_text('[llm]\ndocs = ["notes/copy.md"]\n')
    with pytest.raises(ConfigError, match=r"llm.docs\[0\]: not a folder"):
        load_config(config)


def test_cli_searches_as_a_user_would(tmp_path):
    folder = write_docs(tmp_path / "notes")
    config = tmp_path / "fleet.toml"
    config.write_text(f'[llm]\ndocs = ["{folder}"]\n')
    found = subprocess.run([sys.executable, "-m", "cli.main", "docs", "tiled copy", "--source", "docs", "--config",
                            str(config)],
                           cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert found.returncode == 0, found.stderr
    assert first_result_path(found.stdout) == f"docs:{folder / 'copy.md'}#tiled-copy"


def test_cli_reads_and_reports_bad_input(tmp_path, capsys):
    from cli.main import main

    folder = write_docs(tmp_path / "notes")
    config = tmp_path / "fleet.toml"
    config.write_text(f'[llm]\ndocs = ["{folder}"]\n')
    assert main(["docs", "--read", f"docs:{folder / 'copy.md'}#tiled-copy", "--config", str(config)]) == 0
    assert "builds a tiled copy" in capsys.readouterr().out
    assert main(["docs", "--read", "docs:/no/such.md#x", "--config", str(config)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.splitlines() == ["error: no documentation entry 'docs:/no/such.md#x': give a path "
                                              "exactly as a search result shows it"]
    config.write_text('[llm]\ndocs = ["gone"]\n')
    assert main(["docs", "copy", "--config", str(config)]) == 2
    assert capsys.readouterr().err.strip() == f"error: {config}: llm.docs[0]: no such folder: {tmp_path / 'gone'}"
    assert main(["docs"]) == 2
    assert capsys.readouterr().err.startswith("error: give QUERY")
    assert main(["docs", "copy", "--source", "torch", "--limit", "3"]) == 0
    assert capsys.readouterr().out.count("\n   torch:torch/") == 3


@pytest.mark.slow
def test_the_tool_in_a_cpu_fleet_run_returns_ranked_results(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "tests" / "llm"))
    from llm_fleet_helpers import run_fleet
    from llm_scripted_server import ScriptedServer, call, tools

    monkeypatch.setenv("KF_TEST_LLM_KEY", "sk-test-docs-0123456789")
    folder = write_docs(tmp_path / "notes")
    path = f"docs:{folder / 'copy.md'}#tiled-copy"
    script = [tools(call("docs", {"query": "tiled copy", "source": "docs"})),  # the cookbook's come first unnarrowed
              tools(call("docs", {"read": path})),
              tools(call("docs", {"query": "cuda stream synchronize", "source": "torch", "limit": 3}),
                    call("docs", {"read": "docs:/nowhere.md#x"}))]
    with ScriptedServer(script) as server:
        run_fleet(tmp_path, server.base_url, lambda store: len(server.requests) >= 4, llm={"docs": [str(folder)]})
    offered = [t["function"]["name"] for t in server.requests[0]["body"]["tools"]]
    assert "docs" in offered

    def tool_answers(n: int) -> list[str]:
        return [m["content"] for m in server.requests[n]["body"]["messages"] if m["role"] == "tool"]

    searched = tool_answers(1)[-1]
    assert first_result_path(searched) == path
    assert searched.splitlines()[0].endswith("matching entries for 'tiled copy' in docs:")
    read = tool_answers(2)[-1]
    assert read.startswith("Copy atoms › Tiled copy\n" + path) and "builds a tiled copy" in read
    torch_hits, refused = tool_answers(3)[-2:]
    assert "torch.cuda" in torch_hits and torch_hits.count("\n   torch:torch/") == 3
    assert refused.startswith("error: no documentation entry 'docs:/nowhere.md#x'")
