"""The live executor: real RL post-training on a Ray cluster whose devices change role at runtime.

What it is for: running the policies of `dynaresize.policies` for real, measuring every resize
phase and writing the same records as the twin. It may import `dynaresize.policies`,
`dynaresize.traces`, and `dynaresize.twin` only for calibrated cost estimates and shared configs.
torch, transformers and ray are imported only inside this package (the `live` extra).
"""
