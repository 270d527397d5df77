"""The registry of agent kinds. A kind declares everything the run needs of it: a factory from the run's config, how
many agents of it the config asks for, and optionally the model profiles its agents switch between, the secrets
(environment variable names) to take before any child process starts, a review gate for its candidates, loops of its
own that run beside the agents (with the run's context), and a hook run when the run ends. The engine asks the kind;
it never names one.

Adding a kind is a module declaring an ``AgentKind`` and one ``register`` call (or a line in ``core.agents``, where
the built-in kinds are listed by module path, or an entry passed to the ``Fleet``). The run asks every kind's
agent ``can_work_on`` which problems it has anything to do on."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from core.config import FleetConfig
from core.fleet.agent import Agent, ReviewGate

if TYPE_CHECKING:
    from core.config.schema import ModelProfile
    from core.fleet.context import RunContext


def _no_profiles(config: FleetConfig) -> tuple[ModelProfile, ...]:
    return ()


def _no_secrets(config: FleetConfig) -> tuple[str, ...]:
    return ()


def _no_review(config: FleetConfig) -> ReviewGate | None:
    return None


def _no_loops(run: RunContext) -> tuple[Callable[[], Awaitable[None]], ...]:
    return ()


@dataclass(frozen=True)
class AgentKind:
    name: str
    make: Callable[[FleetConfig], Agent]
    count: Callable[[FleetConfig], int]  # agents of this kind the config asks for
    model: Callable[[FleetConfig], str] = lambda config: ""  # what its agents are listed as using, if not a profile
    # the model profiles its agents are spread over and switched between (core.planner.profiles); none: no profile
    profiles: Callable[[FleetConfig], tuple[ModelProfile, ...]] = _no_profiles
    secrets: Callable[[FleetConfig], tuple[str, ...]] = _no_secrets  # env names taken out of the environment
    review: Callable[[FleetConfig], ReviewGate | None] = _no_review  # what decides its candidates before a build
    loops: Callable[[RunContext], tuple[Callable[[], Awaitable[None]], ...]] = _no_loops  # run beside the agents
    close: Callable[[], Awaitable[None]] | None = None  # when the run's work ends, shielded from its cancellation
    does: str = ""  # what its agents do, in a few words, for the line that opens a run's log


_KINDS: dict[str, AgentKind] = {}


def register(kind: AgentKind) -> AgentKind:
    _KINDS[kind.name] = kind
    return kind


def unregister(name: str) -> None:
    _KINDS.pop(name, None)


def registered() -> dict[str, AgentKind]:
    """The built-in kinds (``core.agents``) and those registered since."""
    from core.agents import builtin_kinds  # the list names kinds by module path: no engine import of any kind

    return {**builtin_kinds(), **_KINDS}
