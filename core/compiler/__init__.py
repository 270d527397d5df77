"""The compiler agent's pure parts: the searchable configurations of the reference (``space``) and the PyTorch
solution each one is (``source``). Nothing here imports torch or runs a candidate."""
