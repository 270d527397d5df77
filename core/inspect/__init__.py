"""The agent's instruments on a candidate: Nsight Compute profiles, SASS/PTX and its instruction mix, and
compute-sanitizer findings. Candidate code runs only in ``run_once`` inside the pool's confinement; what comes back
is untrusted text, parsed and bounded here before it reaches a model."""
