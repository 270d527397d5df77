"""A Footer that recomposes only when the keys it shows change, and only on the screen being shown.

Textual's Footer recomposes (unmounting and mounting every key widget, each with a stylesheet pass) whenever its
screen's bindings are signalled: when the screen comes back, when focus moves, and even while the screen is being
popped. On a busy box that costs hundreds of ms with keys queued behind it."""

from __future__ import annotations

from collections.abc import Iterator

from textual.dom import NoScreen
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Footer


class KeyFooter(Footer):
    _shown: tuple | None = None

    async def recompose(self) -> None:
        # Runs after a refresh, once focus has settled: the keys as they would show, against the last ones shown.
        try:
            screen = self.screen
        except NoScreen:
            return  # its screen was popped meanwhile
        if not self.is_attached or not screen.is_current:
            return  # being popped or covered: when it is current again its bindings are signalled again
        shown = tuple((key, b.binding.description, b.binding.key_display, b.enabled, b.tooltip)
                      for key, b in screen.active_bindings.items() if b.binding.show)
        if shown == self._shown:
            return
        self._shown = shown
        await super().recompose()


def with_key_footer(screen_class: type[Screen]) -> type[Screen]:
    """``screen_class`` with its Footer swapped for a KeyFooter (same look; its CSS type name is unchanged)."""

    class Light(screen_class):  # type: ignore[misc, valid-type]
        def compose(self) -> Iterator[Widget]:
            for widget in super().compose():
                yield KeyFooter() if type(widget) is Footer else widget

    Light.__name__ = Light.__qualname__ = screen_class.__name__
    return Light
