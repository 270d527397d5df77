"""A footer of key bindings drawn as one line by one widget, with the look of Textual's Footer.

Textual's Footer is a widget per key (about ten on each screen here), rebuilt whenever its screen's bindings are
signalled (when the screen comes back, when focus moves, even while the screen is being popped). Each of those
widgets is restyled whenever its screen is shown again, which was a fifth of the cost of opening a problem's detail;
rebuilding them cost hundreds of ms on a busy box with keys queued behind it. This footer redraws its one line when
the keys it shows change. Clicking a key presses it; keys are not highlighted under the mouse.

It is also where the watcher's messages show (the app's ``status``: control results, warnings), for a few seconds,
in place of the keys on the left: a toast would cover the grid's data."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.dom import NoScreen
from textual.screen import Screen
from textual.strip import Strip
from textual.widget import Widget
from textual.widgets import Footer


ALWAYS_SHOWN = ("question_mark", "q", "S")


@dataclass(frozen=True)
class StatusMessage:
    """A message for the footer line; severity as Textual's notify has it (information, warning, error)."""

    text: str
    severity: str = "information"


class KeyFooter(Widget):
    ALLOW_SELECT = False
    COMPONENT_CLASSES = {"key-footer--key", "key-footer--description", "key-footer--separator",
                         "key-footer--information", "key-footer--warning", "key-footer--error"}
    DEFAULT_CSS = """
    KeyFooter {
        color: $footer-foreground;
        background: $footer-background;
        dock: bottom;
        height: 1;
        & > .key-footer--key { color: $footer-key-foreground; background: $footer-key-background; text-style: bold; }
        & > .key-footer--description {
            color: $footer-description-foreground;
            background: $footer-description-background;
        }
        & > .key-footer--separator { color: $foreground 20%; }
        & > .key-footer--information { color: $text-accent; text-style: bold; }
        & > .key-footer--warning { color: $text-warning; text-style: bold; }
        & > .key-footer--error { color: $text-error; text-style: bold; }
    }
    """

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._shown: tuple[tuple[str, str, str, bool], ...] = ()  # (key, key display, description, enabled)
        self._palette: tuple[str, str, str, bool] | None = None  # the command palette's key, drawn on the right
        self._spans: list[tuple[int, int, str, bool]] = []  # (start, end, key, enabled) of each key drawn
        self._line: tuple[int, StatusMessage | None, Strip] | None = None  # (width, message, strip) last drawn

    def on_mount(self) -> None:
        self.screen.bindings_updated_signal.subscribe(self, self._bindings_changed)
        self._update()

    def on_unmount(self) -> None:
        self.screen.bindings_updated_signal.unsubscribe(self)

    def _bindings_changed(self, screen: Screen) -> None:
        self.call_after_refresh(self._update)  # once focus has settled

    def _update(self) -> None:
        try:
            screen = self.screen
        except NoScreen:
            return  # its screen was popped meanwhile
        if not self.is_attached or not screen.is_current:
            return  # being popped or covered: when it is current again its bindings are signalled again
        app = self.app
        shown: dict[str, tuple[str, str, str, bool]] = {}  # action -> its first binding shown, as Footer does
        palette = None
        for key, active in screen.active_bindings.items():
            binding = active.binding
            item = (key, app.get_key_display(binding), binding.description, active.enabled)
            if key == app.COMMAND_PALETTE_BINDING and app.ENABLE_COMMAND_PALETTE:
                palette = item
            elif binding.show:
                shown.setdefault(binding.action, item)
        if (tuple(shown.values()), palette) != (self._shown, self._palette):
            self._shown, self._palette = tuple(shown.values()), palette
            self._line = None
            self.refresh()
        elif self._line is not None and self._line[1] != self._message():
            self.refresh()  # the message changed while this screen was covered

    def _message(self) -> StatusMessage | None:
        return getattr(self.app, "status", None)

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._line = None

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        message = self._message()
        if self._line is None or self._line[:2] != (width, message):
            self._line = (width, message, self._draw(width, message))
        return self._line[2]

    def _draw(self, width: int, message: StatusMessage | None = None) -> Strip:
        base = self.rich_style
        key_style = base + self.get_component_rich_style("key-footer--key")
        description_style = base + self.get_component_rich_style("key-footer--description")
        dim = Style(dim=True)

        def item(display: str, description: str, enabled: bool) -> list[Segment]:
            segments = [Segment(f" {display} ", key_style), Segment(f"{description} ", description_style)]
            return segments if enabled else [Segment(s.text, s.style + dim) for s in segments]

        # The keys to get help, quit and stop are drawn on the right with the palette's, so a narrow terminal cuts
        # the others (all listed by help) and never these.
        pinned = [k for k in self._shown if k[0] in ALWAYS_SHOWN]
        right: list[Segment] = []
        right_spans: list[tuple[int, int, str, bool]] = []
        for key, display, description, enabled in pinned:
            segments = item(display, description, enabled)
            right_spans.append((sum(s.cell_length for s in right), 0, key, enabled))
            right += segments
            right_spans[-1] = (*right_spans[-1][:1], sum(s.cell_length for s in right), key, enabled)
        if self._palette is not None:
            _, display, description, _ = self._palette
            right += [Segment("▏", base + self.get_component_rich_style("key-footer--separator"))]
            right_spans.append((sum(s.cell_length for s in right), 0, self._palette[0], self._palette[3]))
            right += [Segment(display, key_style), Segment(" " + description, description_style), Segment(" ", base)]
            right_spans[-1] = (*right_spans[-1][:1], sum(s.cell_length for s in right), *right_spans[-1][2:])
        room = max(0, width - sum(s.cell_length for s in right))
        if message is not None:
            self._spans = []
            style = base + self.get_component_rich_style(f"key-footer--{message.severity}", partial=True) \
                if f"key-footer--{message.severity}" in self.COMPONENT_CLASSES else base
            text = f" {message.text} "
            if cell_len(text) > room:  # a long message takes the whole line: it is there for a few seconds
                return Strip([Segment(text, style)]).crop_extend(0, width, base)
            self._spans = [(room + start, room + end, key, enabled) for start, end, key, enabled in right_spans]
            return Strip([*Strip([Segment(text, style)]).crop_extend(0, room, base), *right]).crop(0, width)
        left: list[Segment] = []
        self._spans = []
        x = 0
        for key, display, description, enabled in self._shown:
            if key in ALWAYS_SHOWN:
                continue
            segments = item(display, description, enabled)
            end = x + sum(s.cell_length for s in segments)
            if x < room:
                self._spans.append((x, min(end, room), key, enabled))
            left += segments
            x = end
        self._spans += [(room + start, room + end, key, enabled) for start, end, key, enabled in right_spans]
        keys = Strip(left, x).crop_extend(0, room, base)  # the keys that do not fit are cut, as in Footer
        return Strip([*keys, *right]).crop(0, width)

    def on_mouse_down(self, event: events.MouseDown) -> None:
        for start, end, key, enabled in self._spans:
            if start <= event.x < end:
                if enabled:
                    self.app.simulate_key(key)
                else:
                    self.app.bell()
                return


def with_key_footer(screen_class: type[Screen]) -> type[Screen]:
    """``screen_class`` with its Footer swapped for a KeyFooter (same look)."""

    class Light(screen_class):  # type: ignore[misc, valid-type]
        def compose(self) -> Iterator[Widget]:
            for widget in super().compose():
                yield KeyFooter() if type(widget) is Footer else widget

    Light.__name__ = Light.__qualname__ = screen_class.__name__
    return Light
