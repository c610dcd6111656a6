"""TensorFlow workloads from raw ops in graph mode: NMT seq2seq and the RNN language model, built from
shared LSTM, attention and layer helpers."""
