"""A confined command's folder as content, for ``RayEvaluator.run_confined``: the head packs the folder the command
reads (its request, the candidate, an empty scratch), the node writes it under a folder of its own and runs the
command with every head path in it (the folder, the problem's folder, the Python executable) read as the node's;
then the node's scratch comes back and is written into the head's. Symlinks are not followed; what comes back is
candidate-made and capped (``MAX_SCRATCH_BYTES``): a file that would pass the cap is left out, and said."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from core.cluster.content import write_files
from core.cluster.errors import ContentError

MAX_FOLDER_BYTES = 64 << 20
MAX_SCRATCH_BYTES = 64 << 20


def pack_folder(folder: Path, max_bytes: int = MAX_FOLDER_BYTES) -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    total = 0
    for path in sorted(folder.rglob("*")):
        if path.is_symlink() or not path.is_file():
            continue
        data = path.read_bytes()
        total += len(data)
        if total > max_bytes:
            raise ContentError(f"{folder}: more than {max_bytes >> 20} MiB to send to a node for one command")
        files[path.relative_to(folder).as_posix()] = data
    return files


def unpack_folder(files: Mapping[str, bytes], into: Path, source: str) -> None:
    """``files`` written under ``into``; a name that would leave it is a ContentError naming ``source``."""
    write_files(dict(files), into, source)


def pack_scratch(scratch: Path, max_bytes: int = MAX_SCRATCH_BYTES) -> tuple[dict[str, bytes], list[str]]:
    """The files the command left in ``scratch``, and the names of those left out for the cap."""
    files: dict[str, bytes] = {}
    left_out: list[str] = []
    total = 0
    for path in sorted(scratch.rglob("*")) if scratch.is_dir() else ():
        if path.is_symlink() or not path.is_file():
            continue
        named = path.relative_to(scratch).as_posix()
        size = path.stat().st_size
        if total + size > max_bytes:
            left_out.append(named)
            continue
        total += size
        files[named] = path.read_bytes()
    return files, left_out


class PathMap:
    """Head paths as the node has them: the longest head prefix first, whole path components only."""

    def __init__(self, pairs: Mapping[str, str]):
        self.pairs = sorted(((h.rstrip("/"), n.rstrip("/")) for h, n in pairs.items() if h), key=lambda p: -len(p[0]))

    def path(self, text: str) -> str:
        for head, node in self.pairs:
            if text == head or text.startswith(head + "/"):
                return node + text[len(head):]
        return text

    def text(self, text: str) -> str:
        """Every head path inside ``text`` (an argument such as ``--export=/head/scratch/x`` or a JSON document)."""
        for head, node in self.pairs:
            text = _whole(text, head, node)
        return text

    def request(self, data: bytes, blob_roots: tuple[str, ...]) -> bytes:
        """A JSON request file (``core.inspect.run_once``'s) with its paths read as the node's and its blob roots the
        node's copy of the problem's; any other file is left as it is."""
        try:
            value = json.loads(data)
        except ValueError:
            return data
        value = self._value(value)
        if isinstance(value, dict) and "blob_roots" in value:
            value["blob_roots"] = list(blob_roots)
        return json.dumps(value).encode()

    def _value(self, value):
        if isinstance(value, str):
            return self.path(value)
        if isinstance(value, list):
            return [self._value(v) for v in value]
        if isinstance(value, dict):
            return {k: self._value(v) for k, v in value.items()}
        return value


def _whole(text: str, head: str, node: str) -> str:
    """``head`` replaced where it ends a path: at the end of ``text`` or before a separator that is not a name."""
    out, start = [], 0
    while (i := text.find(head, start)) >= 0:
        end = i + len(head)
        if end == len(text) or not (text[end].isalnum() or text[end] in "._-"):
            out.append(text[start:i] + node)
        else:
            out.append(text[start:end])
        start = end
    out.append(text[start:])
    return "".join(out)
