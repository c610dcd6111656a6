"""rnnprof: run, instrument and explain data-parallel training of RNN models."""

__version__ = "0.1.0"
