"""The training workloads as TensorFlow graphs: words, masking, loop vs fused, learning, the plant."""

from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
tf1 = tf.compat.v1

from rnnprof.models.config import WorkloadConfig  # noqa: E402
from rnnprof.errors import InputError  # noqa: E402
from rnnprof.models import get_workload  # noqa: E402
from rnnprof.models.data import PAD, RESERVED  # noqa: E402

pytestmark = pytest.mark.slow

TINY_NMT = dict(model="nmt", layers=2, units=16, vocab_size=60, src_max_len=9, tgt_max_len=10)
TINY_LM = dict(model="rnnlm", layers=1, units=32, embedding=32, vocab_size=300, src_max_len=10, tgt_max_len=10)
DEVICES = ["/device:CPU:0", "/device:CPU:1"]


class Built:
    """One tower of a workload in its own graph and session."""

    def __init__(self, config: WorkloadConfig, optimizer=None):
        self.graph = tf.Graph()
        with self.graph.as_default():
            tf1.set_random_seed(7)
            self.workload = get_workload(config)
            self.inputs = self.workload.make_inputs(0)
            self.out = self.workload.build_tower(self.inputs, 0, DEVICES[:1])
            self.train = optimizer.minimize(self.out.loss) if optimizer else None
            self.session = tf1.Session(graph=self.graph)
            self.session.run(tf1.global_variables_initializer())

    def randomize_weights(self, scale=0.5, seed=0):
        """Weights large enough that every real token visibly moves the loss."""
        rng = np.random.default_rng(seed)
        with self.graph.as_default():
            for v in tf1.trainable_variables():
                v.load(rng.normal(0, scale, v.shape.as_list()).astype(np.float32), self.session)

    def run(self, batch, *fetches):
        feed = {self.inputs[k]: v for k, v in batch.items()}
        return self.session.run(list(fetches), feed)

    def loss(self, batch):
        return self.run(batch, self.out.loss)[0]

    def op_count(self):
        """Ops in the graph plus those inside function bodies (tf.while_loop v2 bodies)."""
        graph_def = self.graph.as_graph_def()
        return len(graph_def.node) + sum(len(f.node_def) for f in graph_def.library.function)

    def op_types(self):
        graph_def = self.graph.as_graph_def()
        nodes = list(graph_def.node) + [n for f in graph_def.library.function for n in f.node_def]
        return [n.op for n in nodes]


def nmt(**changes):
    return WorkloadConfig(**{**TINY_NMT, **changes})


def lm(**changes):
    return WorkloadConfig(**{**TINY_LM, **changes})


NMT_VARIANTS = [
    dict(encoder="loop"),
    dict(encoder="fused"),
    dict(encoder="loop", direction="bi"),
    dict(encoder="fused", direction="bi"),
    dict(encoder="loop", attention="luong"),
    dict(encoder="loop", attention="bahdanau", direction="bi"),
]


def variant_id(v):
    return "-".join(v.values())


def scramble_padding(batch, keys, lengths_key, rng, vocab):
    """A copy of ``batch`` with random real-looking ids in every padded position of ``keys``."""
    changed = dict(batch)
    for key in keys:
        ids = batch[key].copy()
        pad = np.arange(ids.shape[1])[None, :] >= batch[lengths_key][:, None]
        ids[pad] = rng.integers(RESERVED, vocab, size=int(pad.sum()))
        changed[key] = ids
    return changed


@pytest.mark.parametrize("variant", NMT_VARIANTS, ids=variant_id)
def test_nmt_words_loss_and_padding_mask(variant):
    config = nmt(**variant)
    built = Built(config)
    built.randomize_weights()
    batch = next(built.workload.batches(12, tower=0, seed=5))
    assert (batch["src_len"] < config.src_max_len).any() and (batch["tgt_len"] < config.tgt_max_len).any()

    loss, words = built.run(batch, built.out.loss, built.out.words)
    expected_words = np.count_nonzero(batch["src_ids"] != PAD) + np.count_nonzero(batch["tgt_out"] != PAD)
    assert words == expected_words
    assert np.isfinite(loss) and loss > 0

    rng = np.random.default_rng(0)
    padded_changed = scramble_padding(batch, ["src_ids"], "src_len", rng, config.vocab_size)
    padded_changed = scramble_padding(padded_changed, ["tgt_in", "tgt_out"], "tgt_len", rng, config.vocab_size)
    assert not np.array_equal(padded_changed["src_ids"], batch["src_ids"])
    assert built.loss(padded_changed) == pytest.approx(loss, rel=1e-6)

    # Wider padding (more steps, more source positions to attend to) changes nothing either.
    wider = {k: np.pad(v, [(0, 0), (0, 4)]) if v.ndim == 2 else v for k, v in batch.items()}
    assert built.loss(wider) == pytest.approx(loss, rel=1e-6)

    # The same check must notice a change to a real token.
    real_changed = dict(batch)
    real_changed["src_ids"] = batch["src_ids"].copy()
    real_changed["src_ids"][:, 0] = RESERVED + (batch["src_ids"][:, 0] - RESERVED + 1) % (config.vocab_size - RESERVED)
    assert abs(built.loss(real_changed) - loss) > 1e-4


def test_rnnlm_words_and_padding_mask():
    config = lm()
    built = Built(config)
    built.randomize_weights()
    batch = next(built.workload.batches(6, tower=0, seed=2))
    batch["lengths"] = np.array([10, 3, 7, 1, 10, 5], dtype=np.int32)
    loss, words = built.run(batch, built.out.loss, built.out.words)
    mask = np.arange(10)[None, :] < batch["lengths"][:, None]
    assert words == mask.sum()
    changed = scramble_padding(batch, ["inputs", "targets"], "lengths", np.random.default_rng(1), config.vocab_size)
    assert built.loss(changed) == pytest.approx(loss, rel=1e-6)
    changed["inputs"] = changed["inputs"].copy()
    changed["inputs"][1, 0] = RESERVED + (changed["inputs"][1, 0] + 1) % (config.vocab_size - RESERVED)
    assert abs(built.loss(changed) - loss) > 1e-4


def test_fused_graph_has_far_fewer_ops_than_the_loop_graph():
    counts, types = {}, {}
    for encoder in ("loop", "fused"):
        built = Built(nmt(encoder=encoder, layers=3), tf1.train.GradientDescentOptimizer(0.1))
        batch = next(built.workload.batches(4, 0, 1))
        assert np.isfinite(built.loss(batch))
        counts[encoder], types[encoder] = built.op_count(), built.op_types()
    assert counts["fused"] * 2 < counts["loop"], counts
    assert types["fused"].count("BlockLSTM") == 6  # 3 encoder + 3 decoder layers, one op each
    assert "BlockLSTM" not in types["loop"]
    assert any(t in ("While", "StatelessWhile", "Enter") for t in types["loop"])


@pytest.mark.parametrize("encoder", ["fused", "loop"])
def test_rnnlm_learns_the_bundled_corpus(encoder):
    built = Built(lm(encoder=encoder), tf1.train.GradientDescentOptimizer(1.0))
    batches = built.workload.batches(32, tower=0, seed=1)
    losses = [built.run(next(batches), built.out.loss, built.train)[0] for _ in range(25)]
    assert np.all(np.isfinite(losses))
    assert losses[0] == pytest.approx(np.log(300), abs=0.1)  # uniform at the start
    assert np.mean(losses[-5:]) < losses[0] - 0.5, losses


def build_two_towers(config):
    graph = tf.Graph()
    with graph.as_default():
        workload = get_workload(config)
        for tower, device in enumerate(DEVICES):
            with tf.device(device), tf.name_scope(f"tower_{tower}"), \
                    tf1.variable_scope(tf1.get_variable_scope(), reuse=tower > 0):
                workload.build_tower(workload.make_inputs(tower), tower, DEVICES)
    return graph


def tower_ops(graph, tower, scopes):
    """Compute ops of a tower under ``scopes``; variable reads stay colocated with their variable."""
    prefixes = tuple(f"tower_{tower}/{s}/" for s in scopes)
    return [op for op in graph.get_operations() if op.name.startswith(prefixes) and op.type != "ReadVariableOp"]


def same_device(a, b):
    return tf.DeviceSpec.from_string(a) == tf.DeviceSpec.from_string(b)


@pytest.mark.parametrize("plant", [None, "softmax-on-device0"])
def test_softmax_plant_moves_every_towers_softmax_to_device_0(plant):
    graph = build_two_towers(lm(plant=plant))
    softmax_ops = tower_ops(graph, 1, ["projection", "softmax", "loss"])
    rnn_ops = tower_ops(graph, 1, ["rnn"])  # (embedding_lookup colocates its gather with the table)
    assert softmax_ops and rnn_ops
    assert any(op.type == "SparseSoftmaxCrossEntropyWithLogits" for op in softmax_ops)
    assert any(op.type == "MatMul" for op in softmax_ops)
    expected = DEVICES[0] if plant else DEVICES[1]
    assert all(same_device(op.device, expected) for op in softmax_ops), \
        {op.name: op.device for op in softmax_ops if not same_device(op.device, expected)}
    assert all(same_device(op.device, DEVICES[1]) for op in rnn_ops)
    # tower 0 is unaffected either way
    assert all(same_device(op.device, DEVICES[0]) for op in tower_ops(graph, 0, ["projection", "softmax"]))


def test_towers_share_variables_under_reuse():
    graph = build_two_towers(nmt(encoder="fused", direction="bi"))
    names = [v.name for v in graph.get_collection(tf1.GraphKeys.GLOBAL_VARIABLES)]
    assert len(names) == len(set(names))
    assert not any(n.startswith("tower_1") for n in names)
    assert "encoder/layer_0/backward/kernel:0" in names and "encoder/layer_0/bi_projection/kernel:0" in names


def test_attention_changes_the_model():
    """Attention variants are distinct graphs with their own variables (not silently ignored)."""
    var_names = {}
    for attention in ("none", "luong", "bahdanau"):
        built = Built(nmt(encoder="loop", attention=attention, layers=1))
        with built.graph.as_default():
            var_names[attention] = {v.name for v in tf1.global_variables()}
    assert not any("attention" in n for n in var_names["none"])
    assert "decoder/attention/memory_kernel:0" in var_names["luong"]
    assert "decoder/attention/score_vector:0" in var_names["bahdanau"]
    assert "decoder/attention/score_vector:0" not in var_names["luong"]


def test_bad_data_file_fails_when_the_workload_is_made(tmp_path):
    path = tmp_path / "missing.txt"
    with pytest.raises(InputError, match="no such file"):
        get_workload(lm(data=str(path)))
    path.write_bytes(b"")
    with pytest.raises(InputError, match="has no sentences"):
        get_workload(nmt(data=str(path)))


def test_rnnlm_trains_on_a_user_file(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text("a b c d e f g h .\n" * 50)
    built = Built(lm(data=str(path), vocab_size=20), tf1.train.GradientDescentOptimizer(1.0))
    batches = built.workload.batches(8, 0, 1)
    losses = [built.run(next(batches), built.out.loss, built.train)[0] for _ in range(20)]
    assert losses[-1] < losses[0] - 0.4, losses


def test_planted_softmax_runs_on_device_0_in_a_two_device_session():
    config = lm(plant="softmax-on-device0")
    graph = tf.Graph()
    with graph.as_default():
        workload = get_workload(config)
        feeds, losses = {}, []
        for tower, device in enumerate(DEVICES):
            with tf.device(device), tf.name_scope(f"tower_{tower}"), tf1.variable_scope(f"replica_{tower}"):
                inputs = workload.make_inputs(tower)
                losses.append(workload.build_tower(inputs, tower, DEVICES).loss)
                batch = next(workload.batches(4, tower, seed=1))
                feeds.update({inputs[k]: v for k, v in batch.items()})
        session_config = tf1.ConfigProto(device_count={"CPU": 2}, inter_op_parallelism_threads=4)
        with tf1.Session(config=session_config) as session:
            session.run(tf1.global_variables_initializer())
            metadata = tf1.RunMetadata()
            values = session.run(losses, feeds, options=tf1.RunOptions(trace_level=tf1.RunOptions.FULL_TRACE),
                                 run_metadata=metadata)
    assert np.all(np.isfinite(values))
    ran_on = {}
    for device_stats in metadata.step_stats.dev_stats:
        for node in device_stats.node_stats:
            if node.node_name.endswith("SparseSoftmaxCrossEntropyWithLogits/SparseSoftmaxCrossEntropyWithLogits"):
                ran_on[node.node_name.split("/")[0]] = tf.DeviceSpec.from_string(device_stats.device).device_index
    assert ran_on == {"tower_0": 0, "tower_1": 0}


@pytest.mark.parametrize("config", [nmt(direction="bi"), lm(layers=2)], ids=["nmt-bi", "rnnlm"])
def test_loop_and_fused_compute_the_same_loss_from_the_same_weights(config):
    """Both encoders share BlockLSTM's weight layout, so one set of weights fits both graphs."""
    loop = Built(config.replace(encoder="loop"))
    fused = Built(config.replace(encoder="fused"))
    loop.randomize_weights(scale=0.3, seed=4)
    with loop.graph.as_default():
        weights = {v.name: loop.session.run(v) for v in tf1.trainable_variables()}
    with fused.graph.as_default():
        fused_vars = tf1.trainable_variables()
        assert sorted(v.name for v in fused_vars) == sorted(weights)
        for v in fused_vars:
            v.load(weights[v.name], fused.session)
    batch = next(loop.workload.batches(8, 0, seed=9))
    if "lengths" in batch:
        batch["lengths"] = np.array([10, 4, 7, 1, 10, 9, 2, 6], dtype=np.int32)
    assert fused.loss(batch) == pytest.approx(loop.loss(batch), rel=1e-4)


def test_cudnn_path_builds_with_gradients(monkeypatch):
    """Graph construction only: running CudnnRNNV3 needs a GPU, building it does not."""
    import rnnprof.models.tensorflow.nmt as nmt_module

    monkeypatch.setattr(nmt_module, "wants_cudnn", lambda device: True)
    graph = tf.Graph()
    with graph.as_default():
        workload = get_workload(nmt(encoder="fused", direction="bi"))
        out = workload.build_tower(workload.make_inputs(0), 0, ["/device:GPU:0"])
        variables = tf1.trainable_variables()
        grads = tf1.gradients(out.loss, variables)
    types = [op.type for op in graph.get_operations()]
    assert types.count("CudnnRNNV3") == 5  # forward + backward + 1 encoder layer, 2 decoder layers
    assert "BlockLSTM" not in types
    assert all(g is not None for g in grads), [v.name for v, g in zip(variables, grads) if g is None]


def test_loop_layer_kernel_gradient_is_one_concat_not_slice_gradients():
    """The loop LSTM splits its kernel into input and recurrent halves once; the gradient joins
    them with one concat per layer instead of zero-filled StridedSliceGrad buffers summed."""
    built = Built(lm(layers=2, encoder="loop"), tf1.train.GradientDescentOptimizer(0.1))
    types = built.op_types()
    assert "StridedSliceGrad" not in types
    with built.graph.as_default():
        grads = tf1.gradients(built.out.loss, [v for v in tf1.trainable_variables() if "kernel" in v.name])
    assert [g.op.type for g in grads if "rnn" in g.name] == ["ConcatV2", "ConcatV2"]
    batch = next(built.workload.batches(4, 0, 1))
    assert np.isfinite(built.loss(batch))
