"""rnnprof's tab in TensorBoard: each run directory of the logdir summarised (``rnnprof.api.summary``), installed
through TensorBoard's plugin entry point (``tensorboard_plugins``: ``rnnprof``)."""
