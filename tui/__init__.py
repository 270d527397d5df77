"""kernelfleet's terminal UI: ``kernelfleet watch RUN_DIR`` attaches to a run through its store.

The model (:mod:`tui.model`) is frozen dataclasses and pure functions; the Textual widgets live in one folder per
area (``fleet`` header and histogram, ``problems`` grid, ``detail``, ``diff``, ``logs``, ``agents``) and the app
is made by :func:`tui.app.make_app`. The UI reads only ``core.store`` and ``core.report``, never the build or
evaluation machinery, and writes nothing but control rows."""
