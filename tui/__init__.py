"""kernelfleet's terminal UI: ``kernelfleet watch RUN_DIR`` attaches to a run through its store.

One folder per area (``fleet`` header and histogram, ``problems`` grid, ``detail``, ``diff``, ``logs``,
``agents``): each holds its Textual widgets and a ``model.py`` of frozen dataclasses and pure functions that make
what the widgets show. Shared by every area and free of Textual too: :mod:`tui.snapshot` (the store read into a
snapshot by the poller), :mod:`tui.formatting` (numbers, bars, sparklines) and :mod:`tui.controls` (what a key
sends). The app is made by :func:`tui.app.make_app`. The UI reads only ``core.store`` (with the config's and the
roofline's plain helpers), never the build or evaluation machinery, and writes nothing but control rows; ``core``
never imports it."""
