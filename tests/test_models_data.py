"""Workload data: bundled corpus, --data files and their errors, synthetic batches. No TensorFlow."""

from __future__ import annotations

import numpy as np
import pytest

from rnnprof.errors import InputError
from rnnprof.models import data
from rnnprof.models.data import EOS, PAD, RESERVED, UNK, LMData, NMTData, Vocab


def test_bundled_corpus_is_small_real_text():
    path = data.bundled_corpus_path()
    assert path.is_file()
    assert 50_000 < path.stat().st_size < 400_000
    sentences = data.read_sentences()
    vocab = Vocab.build(sentences, 10_000)
    assert len(sentences) > 1000
    assert 100 < len(vocab) < 10_000
    assert vocab.words[RESERVED] == "the"  # most frequent word first


def test_vocab_keeps_most_frequent_words_and_maps_the_rest_to_unk():
    sentences = [["a", "b", "a"], ["c", "a", "b"], ["d"]]
    vocab = Vocab.build(sentences, RESERVED + 2)
    assert vocab.words[RESERVED:] == ("a", "b")
    assert vocab.encode(["a", "b", "c", "zzz"]).tolist() == [RESERVED, RESERVED + 1, UNK, UNK]


def test_data_file_is_tokenized_by_whitespace(tmp_path):
    path = tmp_path / "text.txt"
    path.write_text("hello   world .\n\n  second line here\n")
    assert data.read_sentences(path) == [["hello", "world", "."], ["second", "line", "here"]]


@pytest.mark.parametrize("content, problem", [
    (None, "no such file"),
    (b"", "has no sentences"),
    (b"\n   \n\t\n", "has no sentences"),
    (b"abc\x00\x01\x02 binary", "binary"),
    (b"caf\xe9 latin-1 text\n", "not UTF-8"),
])
def test_bad_data_files_raise_one_line_input_errors(tmp_path, content, problem):
    path = tmp_path / "corpus.txt"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(InputError) as info:
        data.read_sentences(path)
    message = str(info.value)
    assert problem in message
    assert str(path) in message
    assert "\n" not in message
    assert info.value.exit_code == 2


def test_a_directory_is_not_a_data_file(tmp_path):
    with pytest.raises(InputError, match="not a regular file"):
        NMTData(100, 10, 10, str(tmp_path))


def test_sentence_lengths_look_like_text():
    rng = np.random.default_rng(0)
    lengths = data.sentence_lengths(rng, 20_000, 50)
    assert lengths.min() >= 1 and lengths.max() <= 50
    assert 17 <= np.median(lengths) <= 23
    assert (lengths > 35).mean() > 0.02  # a right tail
    assert (lengths == 50).mean() < 0.05  # clipping is rare at the default length
    short = data.sentence_lengths(rng, 1000, 6)
    assert short.min() >= 1 and short.max() <= 6


def test_translation_is_a_reversed_one_to_one_mapping():
    source = np.arange(RESERVED, 100, dtype=np.int32)
    target = data.translate(source, 100)
    assert sorted(target.tolist()) == source.tolist()  # a permutation of the non-reserved ids
    assert target[-1] == data.translate(source[:1], 100)[0]  # reversed order
    assert (target >= RESERVED).all()


def nmt_batch_is_consistent(batch, src_max, tgt_max):
    src, src_len = batch["src_ids"], batch["src_len"]
    assert src.shape[1] == src_max and batch["tgt_in"].shape[1] == tgt_max
    assert ((src != PAD).sum(1) == src_len).all()
    assert ((batch["tgt_out"] != PAD).sum(1) == batch["tgt_len"]).all()
    assert ((batch["tgt_in"] != PAD).sum(1) == batch["tgt_len"]).all()
    rows = np.arange(len(src_len))
    assert (batch["tgt_out"][rows, batch["tgt_len"] - 1] == EOS).all()
    assert (batch["tgt_in"][:, 0] == data.BOS).all()
    # teacher forcing: the decoder input is the output shifted right by one
    for i in rows:
        n = batch["tgt_len"][i]
        assert (batch["tgt_in"][i, 1:n] == batch["tgt_out"][i, :n - 1]).all()


def test_nmt_batches_are_padded_and_deterministic_per_seed_and_tower():
    nmt = NMTData(500, 30, 32)
    first = next(nmt.batches(64, tower=0, seed=3))
    nmt_batch_is_consistent(first, 30, 32)
    assert (first["src_len"] < 30).any(), "batches should contain padding"
    again = next(NMTData(500, 30, 32).batches(64, tower=0, seed=3))
    other_tower = next(nmt.batches(64, tower=1, seed=3))
    other_seed = next(nmt.batches(64, tower=0, seed=4))
    assert all(np.array_equal(first[k], again[k]) for k in first)
    assert not np.array_equal(first["src_ids"], other_tower["src_ids"])
    assert not np.array_equal(first["src_ids"], other_seed["src_ids"])
    stream = nmt.batches(64, tower=0, seed=3)
    next(stream)
    assert not np.array_equal(next(stream)["src_ids"], first["src_ids"])


def test_nmt_reads_a_user_file(tmp_path):
    path = tmp_path / "src.txt"
    path.write_text("the cat sat on the mat\nthe dog ran\n" * 20)
    nmt = NMTData(RESERVED + 3, 5, 6, str(path))
    batch = next(nmt.batches(16, 0, 1))
    nmt_batch_is_consistent(batch, 5, 6)
    assert set(np.unique(batch["src_ids"])) <= {PAD, UNK, RESERVED, RESERVED + 1, RESERVED + 2}
    assert batch["src_len"].max() == 5  # the six-word line is truncated to --src-max-len


def test_lm_windows_are_shifted_by_one_and_full():
    lm = LMData(300, 12)
    batch = next(lm.batches(8, 0, 1))
    assert batch["inputs"].shape == (8, 12) and batch["targets"].shape == (8, 12)
    assert (batch["inputs"][:, 1:] == batch["targets"][:, :-1]).all()
    assert (batch["lengths"] == 12).all()
    assert (batch["targets"] != PAD).all()
    assert not np.array_equal(batch["inputs"], next(lm.batches(8, 1, 1))["inputs"])


def test_lm_on_a_file_shorter_than_one_window(tmp_path):
    path = tmp_path / "tiny.txt"
    path.write_text("just three words\n")
    batch = next(LMData(50, 20, str(path)).batches(4, 0, 1))
    assert batch["inputs"].shape == (4, 20)
