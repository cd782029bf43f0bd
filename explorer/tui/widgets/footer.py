"""The key footer: Textual's Footer, greying keys in place instead of rebuilding itself."""

from __future__ import annotations

from textual.screen import Screen
from textual.widgets import Footer
from textual.widgets._footer import FooterKey


class KeyFooter(Footer):
    """A Footer that, when only which actions are enabled changed, greys or ungreys its keys in place.

    Textual's Footer recomposes (removes and mounts every key) on each bindings refresh, a
    20-30 ms frame at 120 columns; the main screen refreshes its bindings whenever a result
    becomes selected or none is, which happens at every new search while typing. The shown keys
    are the same then, so only their `-disabled` class needs to change.
    """

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._shown_keys: tuple[tuple[str, str, str], ...] | None = None

    def _keys(self, screen: Screen) -> tuple[tuple[tuple[str, str, str], ...], dict[str, bool]]:
        """The keys the footer shows for `screen`'s bindings, and whether each action is enabled
        (Footer.compose shows one key per action, with the enabled state of its first binding)."""
        keys = []
        enabled_of: dict[str, bool] = {}
        for _node, binding, enabled, _tooltip in screen.active_bindings.values():
            if not binding.show:
                continue
            keys.append((binding.key, binding.action, binding.description))
            enabled_of.setdefault(binding.action, enabled)
        return tuple(keys), enabled_of

    def bindings_changed(self, screen: Screen) -> None:
        """Recompose when the shown keys changed; otherwise only update which of them are greyed."""
        if not (self._bindings_ready and screen.app.app_focus and self.is_attached and screen is self.screen):
            self._shown_keys = None
            super().bindings_changed(screen)
            return
        keys, enabled_of = self._keys(screen)
        if keys != self._shown_keys:
            self._shown_keys = keys
            super().bindings_changed(screen)
            return
        for key in self.query(FooterKey):
            enabled = enabled_of.get(key.action)
            if enabled is not None and key._disabled == enabled:
                key._disabled = not enabled
                key.set_class(not enabled, "-disabled")
