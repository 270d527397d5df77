"""The exact compile and link commands ``torch.utils.cpp_extension.load`` would run, taken from torch itself.

Torch spells its extension build as a ninja file (flags, one rule per compiler, one build line per source). Rather
than re-deriving its flags (they change between torch versions: ``-std=c++17`` in one, ``-std=c++20`` in the next,
the ``__CUDA_NO_HALF_OPERATORS__`` family, gencode from ``TORCH_CUDA_ARCH_LIST``, the ABI and link flags), we let
torch write that file and read the commands back, so kernelfleet's build runs what ``load`` would have run.
Imports torch; runs inside the build subprocess.
"""

from __future__ import annotations

import inspect
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

NINJA_FILE = "build.ninja"
_VARIABLE = re.compile(r"^(?P<name>\w+) = ?(?P<value>.*)$")
_RULE = re.compile(r"^rule (?P<name>\w+)$")
_COMMAND = re.compile(r"^\s+command = (?P<command>.*)$")
_BUILD = re.compile(r"^build (?P<out>(?:\$.|[^:$])+): (?P<rule>\w+) (?P<inputs>.*)$")
_REFERENCE = re.compile(r"\$(\w+)")


@dataclass(frozen=True)
class TorchCommands:
    """Argument templates in which ``$in`` and ``$out`` (and ``$out.d``) stand for the input and output files."""

    rules: dict[str, tuple[str, ...]]  # rule name -> argv template
    rule_of: dict[str, str]  # absolute source path -> the rule torch compiles it with
    ninja: str = field(repr=False)  # the file torch wrote (kept in the build log)

    def compile_template(self, source: str) -> tuple[str, ...]:
        return self.rules[self.rule_of[source]]

    def link_argv(self, objects: Sequence[str], output: str) -> list[str]:
        return _fill(self.rules["link"], list(objects), output)


def fill_compile(template: Sequence[str], source: str, output: str) -> list[str]:
    return _fill(template, [source], output)


def _fill(template: Sequence[str], inputs: list[str], output: str) -> list[str]:
    argv: list[str] = []
    for token in template:
        if token == "$in":
            argv.extend(inputs)
        else:
            argv.append(token.replace("$out", output))
    return argv


def torch_commands(
    *,
    name: str,
    sources: Sequence[str],
    include_dirs: Sequence[str],
    cflags: Sequence[str],
    cuda_cflags: Sequence[str],
    ldflags: Sequence[str],
    with_cuda: bool,
    build_dir: Path,
) -> TorchCommands:
    """Have torch write its ninja file for this extension into ``build_dir`` and read the commands from it."""
    from torch.utils import cpp_extension as ext

    prepared_ldflags = _call(ext._prepare_ldflags, extra_ldflags=list(ldflags), with_cuda=with_cuda,
                             with_sycl=False, verbose=False, is_standalone=False)
    path = build_dir / NINJA_FILE
    _call(
        ext._write_ninja_file_to_build_library,
        path=str(path), name=name, sources=list(sources), extra_cflags=list(cflags),
        extra_cuda_cflags=list(cuda_cflags), extra_sycl_cflags=[], extra_ldflags=prepared_ldflags,
        extra_include_paths=list(include_dirs), with_cuda=with_cuda, with_sycl=False, is_standalone=False,
    )
    return parse_ninja(path.read_text())


def _call(function, **kwargs):
    """Call a private torch helper with the keyword arguments its signature has (they vary between versions)."""
    parameters = inspect.signature(function).parameters
    missing = [p for p, spec in parameters.items() if p not in kwargs and spec.default is inspect.Parameter.empty]
    if missing:
        raise RuntimeError(f"torch.utils.cpp_extension.{function.__name__} changed: it now needs {missing}")
    return function(**{k: v for k, v in kwargs.items() if k in parameters})


def parse_ninja(text: str) -> TorchCommands:
    """The variables, rules and build lines of torch's ninja file (the subset of ninja that torch writes)."""
    variables: dict[str, str] = {}
    commands: dict[str, str] = {}
    rule_of: dict[str, str] = {}
    rule: str | None = None
    for line in text.splitlines():
        if match := _RULE.match(line):
            rule = match["name"]
        elif rule and (match := _COMMAND.match(line)):
            commands[rule] = match["command"]
        elif match := _BUILD.match(line):
            rule = None
            for source in _split_paths(match["inputs"]):
                rule_of[source] = match["rule"]
        elif match := _VARIABLE.match(line):
            rule = None
            variables[match["name"]] = match["value"]

    def expand(command: str) -> tuple[str, ...]:
        text = _REFERENCE.sub(lambda m: variables.get(m[1], m[0]), command)
        return tuple(shlex.split(text.replace("$$", "$")))

    return TorchCommands({name: expand(command) for name, command in commands.items()}, rule_of, text)


def _split_paths(inputs: str) -> list[str]:
    """Ninja's path list: spaces separate, ``$ `` and ``$:`` escape."""
    paths, current, i = [], [], 0
    while i < len(inputs):
        char = inputs[i]
        if char == "$" and i + 1 < len(inputs):
            current.append(inputs[i + 1])
            i += 2
            continue
        if char == " ":
            if current:
                paths.append("".join(current))
            current = []
        else:
            current.append(char)
        i += 1
    if current:
        paths.append("".join(current))
    return paths
