"""The kernel languages: one :class:`KernelLanguage` record each, in one registry every other module asks.

Light on purpose (no kernel library, no CUDA, no ``core.solution``): the config, the docs, the facts and the
solution schema all import it. ``core.languages.builtin`` registers the languages kernelfleet knows from the start.
"""

from core.languages import builtin as _builtin  # noqa: F401  (registers the built-in languages)
from core.languages.record import CPP_SUFFIXES, DocSource, KernelLanguage, Toolchain
from core.languages.registry import BuildableNames, UnknownLanguage, language, languages, names, register, unregister

__all__ = ["CPP_SUFFIXES", "BuildableNames", "DocSource", "KernelLanguage", "Toolchain", "UnknownLanguage",
           "language", "languages", "names", "register", "unregister"]
