"""The digital twin: cost models, a SimPy pipeline, simulate(), sweeps, the offline optimum.

What it is for: evaluating resize policies offline, fast enough to sweep thousands of settings.
It may import `dynaresize.policies` and `dynaresize.traces`, never the executor.
"""
