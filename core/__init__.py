"""kernelfleet core: problems, solutions, builds, evaluation and the run. Imports no UI code."""
