"""The problem grid: the watcher's main screen."""
