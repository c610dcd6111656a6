"""Training on N devices: the data-parallel runner, variable updates and all-reduce, the timing
protocol (warm-up, then timed batches) and the sweep behind ``rnnprof scale``."""
