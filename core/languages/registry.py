"""The registry of kernel languages: every other module asks it what a language is.

Adding a language, or another name for one, is one :func:`register` call.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

from core.languages.record import KernelLanguage

_lock = threading.Lock()
_by_name: dict[str, KernelLanguage] = {}  # registration order: lists derived from it keep it
_by_alias: dict[str, str] = {}


class UnknownLanguage(ValueError):
    """A name no registered language has."""


def register(entry: KernelLanguage, *, replace: bool = False) -> KernelLanguage:
    """Add ``entry`` (``replace``: in place of the one of that name). A name or alias taken by another is an
    error: two languages cannot answer to one name."""
    with _lock:
        taken = {n: owner for n, owner in _names().items() if owner != entry.name or not replace}
        for name in (entry.name, *entry.aliases):
            if name in taken:
                raise ValueError(f"language name {name!r} is taken by {taken[name]!r}")
        if replace:
            _drop(entry.name)
        _by_name[entry.name] = entry
        _by_alias.update({alias: entry.name for alias in entry.aliases})
    return entry


def unregister(name: str) -> None:
    """Remove the language ``name`` and its aliases (nothing when there is none)."""
    with _lock:
        _drop(name)


def language(name: str) -> KernelLanguage:
    """The language called ``name`` (its name or an alias); UnknownLanguage when none is."""
    entry = _by_name.get(name) or _by_name.get(_by_alias.get(name, ""))
    if entry is None:
        raise UnknownLanguage(f"unknown language {name!r} (one of: {', '.join(_by_name)})")
    return entry


def languages(*, runs: bool | None = None) -> tuple[KernelLanguage, ...]:
    """Every registered language in registration order; ``runs`` keeps those kernelfleet runs (True) or not."""
    return tuple(e for e in _by_name.values() if runs is None or e.runs == runs)


def names(*, runs: bool | None = None) -> tuple[str, ...]:
    return tuple(e.name for e in languages(runs=runs))


class BuildableNames:
    """The names of the languages kernelfleet builds, read from the registry at each use (so a language registered
    after the config schema was imported is allowed too): what the config's ``[fleet] languages`` may name."""

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in names(runs=True)

    def __iter__(self) -> Iterator[str]:
        return iter(names(runs=True))

    def __len__(self) -> int:
        return len(names(runs=True))

    def __repr__(self) -> str:
        return f"BuildableNames{names(runs=True)!r}"


def _names() -> dict[str, str]:
    """Every name and alias -> the language it names."""
    return {**{n: n for n in _by_name}, **_by_alias}


def _drop(name: str) -> None:
    _by_name.pop(name, None)
    for alias in [a for a, owner in _by_alias.items() if owner == name]:
        del _by_alias[alias]
