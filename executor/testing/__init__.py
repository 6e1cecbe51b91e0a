"""Scaffolding for tests and benchmarks, never imported by a run.

- `harness`:          live workers started outside the driver loop, for tests and benchmarks
                      that drive resizes themselves, and `BenchWorker`, the worker with a fixed
                      load step;
- `loopback_cluster`: a Ray cluster of several nodes on this machine's loopback;
- `trainer_ranks`, `exchange_ranks`: a trainer group, or only its collectives, in plain
                      processes on one machine.

It may import any part of `dynaresize.executor`; nothing in the executor imports it.
"""
