"""dynaresize: a digital twin and a live executor for runtime GPU resizing in RL post-training.

The subpackages live in top-level folders of the repository: `dynaresize.twin` (twin/),
`dynaresize.policies` (policies/), `dynaresize.traces` (traces/), `dynaresize.executor`
(executor/). This package holds the command line and the composed run configuration.

It may import everything in the project; nothing in the project imports it except the command
line (`dynaresize.config_io` is the leaf every package may import).
"""

__version__ = "0.1.0"
