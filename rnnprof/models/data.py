"""Token data for the workloads: the bundled corpus, a user's text file, synthetic ids.

Only numpy here, so reading and checking ``--data`` costs nothing before
TensorFlow is imported. Ids 0-3 are reserved; every batch is padded with
``PAD`` and its lengths say where the real tokens end.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

from rnnprof.errors import InputError
from rnnprof import limits

PAD, BOS, EOS, UNK = 0, 1, 2, 3
RESERVED = 4
RESERVED_WORDS = ("<pad>", "<s>", "</s>", "<unk>")

DATA_EXPECTED = "a text file with one sentence a line, tokens separated by spaces"

# Median sentence length in tokens; WMT-style news text sits around 20-25 with a long tail.
MEDIAN_SENTENCE = 20
LENGTH_SIGMA = 0.55


def bundled_corpus_path() -> Path:
    return Path(str(resources.files("rnnprof.models") / "corpus" / "english.txt"))


def check_data_path(path: str | Path) -> None:
    """Refuse a ``--data`` path that cannot be a text file to read, without reading it."""
    path = Path(path)
    if not path.exists():
        raise InputError(path, "no such file", DATA_EXPECTED)
    if not path.is_file():
        raise InputError(path, "is not a regular file", DATA_EXPECTED)
    limits.check_file(path)  # a huge file is one clear error, not an out-of-memory


def read_sentences(path: str | Path | None = None) -> list[list[str]]:
    """Whitespace-tokenized sentences, one per non-blank line; ``None`` reads the bundled corpus."""
    path = Path(path) if path is not None else bundled_corpus_path()
    check_data_path(path)
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise InputError(path, f"cannot be read ({e.strerror or e})", DATA_EXPECTED) from None
    if b"\x00" in raw[:65536]:
        raise InputError(path, "looks binary (contains NUL bytes)", DATA_EXPECTED)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(path, f"is not UTF-8 text (bad byte at offset {e.start})", DATA_EXPECTED) from None
    sentences = [line.split() for line in text.splitlines()]
    sentences = [s for s in sentences if s]
    if not sentences:
        raise InputError(path, "has no sentences", DATA_EXPECTED)
    return sentences


@dataclass(frozen=True)
class Vocab:
    """The most frequent words get the lowest ids after the reserved ones."""

    words: tuple[str, ...]  # index = id

    @classmethod
    def build(cls, sentences: Sequence[Sequence[str]], size: int) -> "Vocab":
        counts = collections.Counter(w for s in sentences for w in s)
        for reserved in RESERVED_WORDS:
            counts.pop(reserved, None)
        # Ties broken by the word so the vocabulary does not depend on dict order.
        ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        keep = max(0, size - RESERVED)
        return cls(RESERVED_WORDS + tuple(w for w, _ in ranked[:keep]))

    def __len__(self) -> int:
        return len(self.words)

    def encode(self, sentence: Sequence[str]) -> np.ndarray:
        index = self._index()
        return np.fromiter((index.get(w, UNK) for w in sentence), dtype=np.int32, count=len(sentence))

    def _index(self) -> dict[str, int]:
        cached = self.__dict__.get("_index_cache")
        if cached is None:
            cached = {w: i for i, w in enumerate(self.words)}
            object.__setattr__(self, "_index_cache", cached)
        return cached


def sentence_lengths(rng: np.random.Generator, n: int, max_len: int) -> np.ndarray:
    """Lognormal lengths (long right tail, like real text) clipped to ``[1, max_len]``."""
    median = max(2.0, min(MEDIAN_SENTENCE, max_len / 2))
    lengths = np.rint(rng.lognormal(np.log(median), LENGTH_SIGMA, size=n))
    return np.clip(lengths, 1, max_len).astype(np.int32)


def zipf_probabilities(vocab_size: int, exponent: float = 1.0) -> np.ndarray:
    """Word frequencies of natural text: the k-th most frequent word is ~1/k as common."""
    ranks = np.arange(1, max(1, vocab_size - RESERVED) + 1, dtype=np.float64)
    p = 1.0 / (ranks + 2.7) ** exponent
    return p / p.sum()


def synthetic_sentence(rng: np.random.Generator, length: int, vocab_size: int,
                       probabilities: np.ndarray) -> np.ndarray:
    return (RESERVED + rng.choice(len(probabilities), size=length, p=probabilities)).astype(np.int32)


def translate(source: np.ndarray, vocab_size: int) -> np.ndarray:
    """The synthetic 'translation': the source reversed with every id mapped one-to-one.

    Deterministic, so a seq2seq model can learn it, yet it needs the whole source
    (the first target word depends on the last source word).
    """
    span = max(1, vocab_size - RESERVED)
    stride = _coprime_stride(span)
    mapped = RESERVED + ((source.astype(np.int64) - RESERVED) * stride + 1) % span
    return mapped[::-1].astype(np.int32)


def _coprime_stride(span: int) -> int:
    for stride in (7, 11, 13, 17, 19, 23, 1):
        if np.gcd(stride, span) == 1:
            return stride
    return 1


def pad_rows(rows: Sequence[np.ndarray], width: int) -> np.ndarray:
    out = np.full((len(rows), width), PAD, dtype=np.int32)
    for i, row in enumerate(rows):
        out[i, :len(row)] = row[:width]
    return out


def tower_rng(seed: int, tower: int, salt: int) -> np.random.Generator:
    """One stream per (seed, tower): towers see different batches, reruns see the same ones."""
    return np.random.default_rng([int(seed) & 0xFFFFFFFF, int(tower), salt])


class NMTData:
    """Parallel batches: source ids, teacher-forcing target input/output and lengths.

    Sources are synthetic Zipf-distributed ids with lognormal lengths, or sentences
    from ``--data``; targets are ``translate(source)`` with ``<s>``/``</s>`` added.
    """

    def __init__(self, vocab_size: int, src_max_len: int, tgt_max_len: int, path: str | None = None):
        self.vocab_size = vocab_size
        self.src_max_len = src_max_len
        self.tgt_max_len = tgt_max_len
        self.sentences: list[np.ndarray] | None = None
        if path is not None:
            sentences = read_sentences(path)
            vocab = Vocab.build(sentences, vocab_size)
            self.sentences = [vocab.encode(s) for s in sentences]
        self._p = zipf_probabilities(vocab_size)

    def batches(self, batch_size: int, tower: int, seed: int) -> Iterator[dict[str, np.ndarray]]:
        rng = tower_rng(seed, tower, salt=1)
        while True:
            yield self.batch(rng, batch_size)

    def batch(self, rng: np.random.Generator, batch_size: int) -> dict[str, np.ndarray]:
        if self.sentences is None:
            lengths = sentence_lengths(rng, batch_size, self.src_max_len)
            sources = [synthetic_sentence(rng, int(n), self.vocab_size, self._p) for n in lengths]
        else:
            picks = rng.integers(0, len(self.sentences), size=batch_size)
            sources = [self.sentences[i][:self.src_max_len] for i in picks]
        targets = [translate(s, self.vocab_size)[:self.tgt_max_len - 1] for s in sources]
        tgt_in = [np.concatenate([[BOS], t]).astype(np.int32) for t in targets]
        tgt_out = [np.concatenate([t, [EOS]]).astype(np.int32) for t in targets]
        return {
            "src_ids": pad_rows(sources, self.src_max_len),
            "src_len": np.array([len(s) for s in sources], dtype=np.int32),
            "tgt_in": pad_rows(tgt_in, self.tgt_max_len),
            "tgt_out": pad_rows(tgt_out, self.tgt_max_len),
            "tgt_len": np.array([len(t) for t in tgt_out], dtype=np.int32),
        }


class LMData:
    """Language-model windows cut from one token stream (sentences joined by ``</s>``).

    Like the PTB benchmark setup: every window is full, so ``lengths`` equals the
    sequence length; the model still masks by ``lengths`` for fed partial batches.
    """

    def __init__(self, vocab_size: int, seq_len: int, path: str | None = None):
        sentences = read_sentences(path)
        self.vocab = Vocab.build(sentences, vocab_size)
        self.seq_len = seq_len
        pieces = []
        for s in sentences:
            pieces.append(self.vocab.encode(s))
            pieces.append(np.array([EOS], dtype=np.int32))
        stream = np.concatenate(pieces)
        # A stream shorter than one window repeats so every window is full.
        repeats = -(-(seq_len + 2) // len(stream))
        self.stream = np.tile(stream, repeats) if repeats > 1 else stream

    def batches(self, batch_size: int, tower: int, seed: int) -> Iterator[dict[str, np.ndarray]]:
        rng = tower_rng(seed, tower, salt=2)
        while True:
            yield self.batch(rng, batch_size)

    def batch(self, rng: np.random.Generator, batch_size: int) -> dict[str, np.ndarray]:
        n = self.seq_len
        starts = rng.integers(0, len(self.stream) - n - 1, size=batch_size, endpoint=True)
        window = starts[:, None] + np.arange(n + 1)[None, :]
        tokens = self.stream[window]
        return {
            "inputs": tokens[:, :-1].astype(np.int32),
            "targets": tokens[:, 1:].astype(np.int32),
            "lengths": np.full(batch_size, n, dtype=np.int32),
        }
