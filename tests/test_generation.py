"""Generation shared by every decoder (models/generation.py and its decoding-state protocol,
models/decoder_cache.py, the Transformers' state), a recurrent toy decoder proving the
protocol is not Transformer-specific, and the causal-LM SavedModel
(components/tasks/language_model_serving.py)."""

import collections
import importlib.util

import keras
import keras_nlp
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the tokenizer ops the SavedModel uses)
from keras import ops

from lmfactory import models
from lmfactory.components.tasks import language_model_serving
from lmfactory.components.trainer.export import export_serving_model
from lmfactory.components.vocabulary import bpe
from lmfactory.models import decoder_cache
from lmfactory.models.charlm import CharTransformerLM
from lmfactory.models.generation import CausalLMGeneration, check_state
from lmfactory.models.gpt1.gpt1_causal_lm import Gpt1CausalLM
from lmfactory.models.gpt2 import GPT2CausalLM
from lmfactory.models.tokenizers import load_tokenizer, write_tokenizer_config

VOCAB = 64
MAX_POSITIONS = 32
TINY = dict(vocabulary_size=VOCAB, num_layers=2, hidden_dim=32, num_heads=4,
            intermediate_dim=64, max_sequence_length=MAX_POSITIONS, dropout=0.0)
DECODERS = ("gpt2", "gpt1", "gpt3", "charlm")
PROMPTS = np.array([[11, 12, 13, 0, 0, 0], [21, 22, 23, 24, 25, 26], [31, 0, 0, 0, 0, 0]],
                   dtype="int32")
LENGTHS = np.array([3, 6, 1])
MAX_LENGTH = 12

# The 1-token prompt's reference pass attends over a single key, which Keras warns about.
pytestmark = pytest.mark.filterwarnings("ignore:You are using a softmax over axis")


def _spread_weights(model, seed):
    """Redraws every matrix of ``model`` from N(0, 0.3): the 0.02 initialisation gives
    nearly uniform next-token distributions, whose argmax could flip on round-off."""
    rng = np.random.default_rng(seed)
    for variable in model.weights:
        if len(variable.shape) >= 2:
            variable.assign(rng.normal(0.0, 0.3, variable.shape).astype("float32"))


def build_lm(name):
    keras.utils.set_random_seed(3)
    if name == "gpt2":
        lm = GPT2CausalLM(models.build("gpt2", "tiny", **TINY))
    elif name == "gpt1":
        lm = Gpt1CausalLM(models.build("gpt1", "tiny", **TINY))
    elif name == "gpt3":
        # Banded (sparse) odd layers with a band of 4, far shorter than the outputs.
        lm = GPT2CausalLM(models.build("gpt3", "tiny", **TINY, attention_band=4,
                                       attention_implementation="sparse"))
    else:
        lm = CharTransformerLM(models.build("charlm", "tiny", **TINY),
                               intermediate_losses=False, multiple_targets=False)
    _spread_weights(lm, seed=DECODERS.index(name))
    return lm


_BUILT = {}


def decoder(name):
    """The tiny LM ``name`` and its cached greedy output on PROMPTS (built once)."""
    if name not in _BUILT:
        lm = build_lm(name)
        greedy = lm.generate_ids(PROMPTS, prompt_lengths=LENGTHS, max_length=MAX_LENGTH)
        _BUILT[name] = lm, greedy
    return _BUILT[name]


@pytest.fixture(scope="module", params=DECODERS)
def lm(request):
    return decoder(request.param)[0]


def _last_logits(lm, ids, **extra):
    """The logits of the last position of ``ids`` from the whole prefix through the network
    (no decoding state); ``extra``: more model inputs."""
    x = {"token_ids": np.array([ids], "int32"), "padding_mask": np.ones((1, len(ids)), "int32"),
         **extra}
    return np.asarray(lm(x))[0, -1]


def greedy_without_cache(lm, prompt, max_length, **extra):
    """The reference: the whole prefix through the network at every step, argmax of the
    last position's logits."""
    ids = list(prompt)
    while len(ids) < max_length:
        ids.append(int(_last_logits(lm, ids, **extra).argmax()))
    return ids


def _ids(output):
    return np.asarray(output["token_ids"])


def _greedy(lm):
    """The cached greedy output of a model made by `decoder`."""
    return next(greedy for model, greedy in _BUILT.values() if model is lm)


# --------------------------------------------------------------------------- shared code


def test_generation_code_exists_once():
    for cls in (GPT2CausalLM, Gpt1CausalLM, CharTransformerLM):
        assert issubclass(cls, CausalLMGeneration)
        for method in ("generate_ids", "get_sampler"):
            assert getattr(cls, method) is getattr(CausalLMGeneration, method), (cls, method)
        assert cls.initial_state is CausalLMGeneration.initial_state
    assert importlib.util.find_spec("lmfactory.models.decoder_cache") is not None
    assert importlib.util.find_spec("lmfactory.models.gpt2.decoder_cache") is None


def test_state_of_every_backbone(lm):
    """A Transformer's decoding state is its key/value cache, one pair of zero buffers
    [batch, heads, max_length, head_dim] per block, batch first; making it creates no
    weights, and the old method names are gone."""
    backbone = lm.backbone
    head_dim = getattr(backbone, "head_dim", None) or backbone.hidden_dim // backbone.num_heads
    num_weights = len(lm.weights)
    state = lm.initial_state(3, 10)
    assert isinstance(state, tuple) and len(state) == backbone.num_layers
    for keys, values in state:
        assert tuple(keys.shape) == tuple(values.shape) == (3, backbone.num_heads, 10, head_dim)
        assert not np.asarray(keys).any() and not np.asarray(values).any()
    check_state(state, 3)
    _, _, after = lm.call_with_state(PROMPTS[:, :2], state, 0)
    check_state(after, 3, previous=state)
    assert len(lm.weights) == num_weights
    for model in (lm, backbone):
        assert not hasattr(model, "initial_cache") and not hasattr(model, "call_with_cache")


# --------------------------------------------------------------------------- samplers


def test_cached_greedy_equals_recomputing_the_prefix(lm):
    out = _greedy(lm)
    ids = _ids(out)
    assert ids.shape == (3, MAX_LENGTH) and ids.dtype == np.int32
    assert np.asarray(out["padding_mask"]).all()
    for row in range(3):
        expected = greedy_without_cache(lm, PROMPTS[row, :LENGTHS[row]], MAX_LENGTH)
        assert ids[row].tolist() == expected, row
    # Real continuations (not one repeated id), so the comparison means something.
    generated = np.concatenate([ids[row, LENGTHS[row]:] for row in range(3)])
    assert len(set(generated.tolist())) > 2


def _keras_nlp_layout(keys, values):
    """Per-layer buffers [B, heads, T, d] -> keras-nlp's cache [B, 2, T, heads, d]."""
    return np.stack([np.transpose(keys, (0, 2, 1, 3)), np.transpose(values, (0, 2, 1, 3))], 1)


@pytest.mark.parametrize("normalize_first,dropout", [(True, 0.0), (False, 0.1)])
def test_cached_block_call_equals_keras_nlp_cache_update(normalize_first, dropout):
    """`decoder_cache.cached_block_call` on a keras-nlp `TransformerDecoder` (keys/values
    written in place into the heads-first buffers, attention over the whole buffer with
    the causal mask) gives keras-nlp's own cached call (update index into its cache): the
    same outputs and cached positions, the positions after the new ones untouched. In a
    `tf.function` the buffers are only written by `TensorStridedSliceUpdate` (never the
    XLA update that copies them) and only read by the two attention matmuls: no slice,
    transpose, stack or concat of a buffer."""
    keras.utils.set_random_seed(5)
    block = keras_nlp.layers.TransformerDecoder(intermediate_dim=16, num_heads=2,
                                                normalize_first=normalize_first,
                                                dropout=dropout)
    block.build((None, None, 8))
    _spread_weights(block, seed=5)
    rng = np.random.default_rng(5)
    keys, values = (tf.constant(rng.normal(size=(2, 2, 9, 4)), "float32") for _ in "kv")
    for index, n in [(0, 4), (4, 1), (6, 2)]:
        x = tf.constant(rng.normal(size=(2, n, 8)), "float32")
        expected, expected_cache = block(
            x, self_attention_cache=tf.constant(_keras_nlp_layout(keys, values)),
            self_attention_cache_update_index=index)
        output, (new_keys, new_values) = decoder_cache.cached_block_call(
            block, x, (keys, values), index)
        np.testing.assert_allclose(output, expected, rtol=1e-5, atol=1e-5)
        updated = _keras_nlp_layout(new_keys, new_values)
        np.testing.assert_allclose(updated[:, :, :index + n],
                                   np.asarray(expected_cache)[:, :, :index + n],
                                   rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(updated[:, :, index + n:],
                                      _keras_nlp_layout(keys, values)[:, :, index + n:])
        keys, values = new_keys, new_values
    spec = tf.TensorSpec([2, 2, 9, 4])
    graph = tf.function(lambda x, k, v, i: decoder_cache.cached_block_call(block, x, (k, v), i)
                        ).get_concrete_function(tf.TensorSpec([2, 1, 8]), spec, spec,
                                                tf.TensorSpec([], tf.int32)).graph
    op_types = {op.type for op in graph.get_operations()}
    assert "XlaDynamicUpdateSlice" not in op_types
    buffers = [t for t in graph.inputs if t.shape.rank == 4 and t.shape[2] == 9]
    assert len(buffers) == 2
    for buffer in buffers:
        assert [op.type for op in buffer.consumers()] == ["TensorStridedSliceUpdate"]
        written = buffer.consumers()[0].outputs[0]
        readers = {op.type for op in written.consumers()}
        assert readers <= {"BatchMatMulV2", "Identity"}, readers
        assert "BatchMatMulV2" in readers


def test_degenerate_samplers_equal_greedy(lm):
    """Beam search with one beam, top-k with k = 1, top-p with a nucleus smaller than any
    probability and sampling at temperature -> 0 all pick the argmax at every step."""
    greedy = _ids(_greedy(lm))
    for sampler, kwargs in [("beam", {"num_beams": 1}),
                            ("top_k", {"k": 1, "seed": 4}),
                            ("top_p", {"p": 1e-6, "seed": 4}),
                            ("random", {"temperature": 1e-4, "seed": 4})]:
        out = _ids(lm.generate_ids(PROMPTS, prompt_lengths=LENGTHS, max_length=MAX_LENGTH,
                                   sampler=sampler, **kwargs))
        np.testing.assert_array_equal(out, greedy, err_msg=f"{sampler} {kwargs}")


def test_random_samplers_keep_prompts_and_vary():
    lm, greedy = decoder("gpt2")
    greedy = _ids(greedy)
    for sampler, kwargs in [("top_k", {"k": 5, "seed": 1}), ("top_p", {"p": 0.95, "seed": 1}),
                            ("random", {"temperature": 3.0, "seed": 1}),
                            ("beam", {"num_beams": 3})]:
        ids = _ids(lm.generate_ids(PROMPTS, prompt_lengths=LENGTHS, max_length=MAX_LENGTH,
                                   sampler=sampler, **kwargs))
        for row in range(3):
            np.testing.assert_array_equal(ids[row, :LENGTHS[row]], PROMPTS[row, :LENGTHS[row]])
        assert ((ids >= 0) & (ids < VOCAB)).all()
        if sampler != "beam":
            assert (ids != greedy).any(), sampler


def test_top_k_samples_only_the_k_most_likely():
    lm = decoder("gpt2")[0]
    prompt = np.array([[5, 6, 7]], "int32")
    logits = np.asarray(lm({"token_ids": prompt, "padding_mask": np.ones_like(prompt)}))[0, -1]
    top3 = set(np.argsort(logits)[-3:].tolist())
    out = _ids(lm.generate_ids(np.repeat(prompt, 16, 0), max_length=4, sampler="top_k", k=3,
                               seed=2, temperature=5.0))
    firsts = set(out[:, 3].tolist())
    assert firsts <= top3 and len(firsts) > 1


# --------------------------------------------------------------------------- masks, ends


def test_padding_mask_semantics(lm):
    """A padding mask works like prompt lengths, and what sits under the padding does not
    matter; without lengths or mask every token is prompt."""
    mask = np.arange(PROMPTS.shape[1])[None, :] < LENGTHS[:, None]
    garbage = np.where(mask, PROMPTS, 50).astype("int32")
    np.testing.assert_array_equal(
        _ids(lm.generate_ids(garbage, padding_mask=mask, max_length=MAX_LENGTH)),
        _ids(_greedy(lm)))
    full = _ids(lm.generate_ids(PROMPTS[1:2], max_length=MAX_LENGTH))
    np.testing.assert_array_equal(full, _ids(_greedy(lm))[1:2])


@pytest.mark.parametrize("name", ["gpt2", "charlm"])
def test_end_token_stops_each_row(name):
    lm, free = decoder(name)
    free = _ids(free)
    end = int(free[0, LENGTHS[0] + 1])  # row 0's second generated token
    out = lm.generate_ids(PROMPTS, prompt_lengths=LENGTHS, max_length=MAX_LENGTH,
                          end_token_id=end, pad_token_id=63)
    ids, mask = _ids(out), np.asarray(out["padding_mask"])
    stopped = 0
    for row in range(3):
        generated = [i for i in range(LENGTHS[row], MAX_LENGTH) if free[row, i] == end]
        if not generated:
            np.testing.assert_array_equal(ids[row], free[row])
            assert mask[row].all()
            continue
        stop = generated[0]
        stopped += 1
        np.testing.assert_array_equal(ids[row, :stop + 1], free[row, :stop + 1])
        assert mask[row, :stop + 1].all() and not mask[row, stop + 1:].any()
        assert (ids[row, stop + 1:] == 63).all()
    assert stopped >= 1


def test_end_token_in_a_prompt_or_zero_does_not_stop_early():
    """An end token inside a prompt does not stop its row, and the positions still to
    generate hold a filler that is not the end token (so an end id of 0 does not stop
    decoding before it starts). pad_token_id defaults to the end token."""
    lm, free = decoder("gpt2")
    free = _ids(free)
    for end in (int(PROMPTS[1, 2]), 0):
        out = lm.generate_ids(PROMPTS, prompt_lengths=LENGTHS, max_length=MAX_LENGTH,
                              end_token_id=end)
        ids, mask = _ids(out), np.asarray(out["padding_mask"])
        for row in range(3):
            stop = next((i for i in range(LENGTHS[row], MAX_LENGTH) if free[row, i] == end),
                        MAX_LENGTH - 1)
            np.testing.assert_array_equal(ids[row, :stop + 1], free[row, :stop + 1])
            assert mask[row, :stop + 1].all() and not mask[row, stop + 1:].any()
            assert (ids[row, stop + 1:] == end).all()


def test_traced_with_unknown_shapes_and_tensor_max_length():
    lm, eager = decoder("charlm")
    eager = _ids(eager)

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32),
                                  tf.TensorSpec([None], tf.int32),
                                  tf.TensorSpec([], tf.int32)])
    def generate(ids, lengths, max_length):
        return lm.generate_ids(ids, prompt_lengths=lengths, max_length=max_length)

    traced = _ids(generate(tf.constant(PROMPTS), tf.constant(LENGTHS, tf.int32),
                           tf.constant(MAX_LENGTH)))
    np.testing.assert_array_equal(traced, eager)
    shorter = _ids(generate(tf.constant(PROMPTS), tf.constant(LENGTHS, tf.int32),
                            tf.constant(9)))
    np.testing.assert_array_equal(shorter, eager[:, :9])


def test_bad_arguments():
    lm = decoder("gpt2")[0]
    with pytest.raises(ValueError, match="Unknown sampler 'nucleus'"):
        lm.generate_ids(PROMPTS, max_length=8, sampler="nucleus")
    with pytest.raises(ValueError, match="need a sampler name"):
        lm.generate_ids(PROMPTS, max_length=8, sampler=lm.get_sampler("greedy"), k=3)
    with pytest.raises(ValueError, match="max_sequence_length=32"):
        lm.generate_ids(PROMPTS, max_length=33)
    with pytest.raises(ValueError, match="exceed max_length=4"):
        lm.generate_ids(PROMPTS, max_length=4)


# --------------------------------------------------------------------------- not only Transformers


class ToyLSTMBackbone(keras.layers.Layer):
    """A tiny recurrent decoder: a token embedding plus a conditioning vector ``memory``
    [batch, embedding_dim] (what an encoder would hand a seq2seq decoder; zeros without
    one), then a stack of LSTM cells.

    Its decoding state is a dict: ``"layers"``, a list over the cells of (h, c) pairs, each
    [batch, max_length + 1, units] with slot 0 the state before the first position and slot
    p + 1 the state after position p (the protocol's position-addressed LSTM state); and
    ``"memory"``, the conditioning vector, a static leaf that ``initial_state`` takes as
    context."""

    def __init__(self, vocabulary_size, units=(12, 10), embedding_dim=8,
                 max_sequence_length=MAX_POSITIONS, **kwargs):
        super().__init__(**kwargs)
        self.vocabulary_size = vocabulary_size
        self.embedding_dim = embedding_dim
        self.max_sequence_length = max_sequence_length
        self.embedding = keras.layers.Embedding(vocabulary_size, embedding_dim)
        self.cells = [keras.layers.LSTMCell(size) for size in units]
        self.rnn = keras.layers.RNN(self.cells, return_sequences=True)

    def _inputs(self, token_ids, memory):
        x = self.embedding(token_ids)
        return x if memory is None else x + ops.cast(memory, x.dtype)[:, None, :]

    def call(self, token_ids, memory=None):
        """The whole sequence through keras's own RNN loop (no decoding state): the top
        cell's output at every position [batch, T, units]."""
        return self.rnn(self._inputs(token_ids, memory))

    def initial_state(self, batch_size, max_length, memory=None):
        layers = [(ops.zeros([batch_size, max_length + 1, cell.units]),) * 2
                  for cell in self.cells]
        if memory is None:
            memory = ops.zeros([batch_size, self.embedding_dim])
        return {"layers": layers, "memory": ops.convert_to_tensor(memory, "float32")}

    def call_with_state(self, token_ids, state, index):
        x = self._inputs(token_ids, state["memory"])
        layers = []
        for cell, (h_all, c_all) in zip(self.cells, state["layers"]):
            states = [ops.take(h_all, index, axis=1), ops.take(c_all, index, axis=1)]
            outputs = []
            for step in range(token_ids.shape[1]):
                output, states = cell(x[:, step], states)
                h_all = ops.slice_update(h_all, [0, index + step + 1, 0], states[0][:, None])
                c_all = ops.slice_update(c_all, [0, index + step + 1, 0], states[1][:, None])
                outputs.append(output)
            x = ops.stack(outputs, axis=1)
            layers.append((h_all, c_all))
        return x, {"layers": layers, "memory": state["memory"]}


class ToyRecurrentLM(CausalLMGeneration, keras.Model):
    """`ToyLSTMBackbone` plus a dense output layer; ``self(x)`` is the no-state reference."""

    def __init__(self, backbone, **kwargs):
        super().__init__(**kwargs)
        self.backbone = backbone
        self.output_dense = keras.layers.Dense(backbone.vocabulary_size)
        self(np.zeros((1, 2), "int32"))  # build every weight
        self._generation_state()

    def call(self, inputs):
        if not isinstance(inputs, dict):
            inputs = {"token_ids": inputs}
        return self.output_dense(self.backbone(inputs["token_ids"], inputs.get("memory")))

    def call_with_state(self, token_ids, state, index):
        hidden, state = self.backbone.call_with_state(token_ids, state, index)
        return self.output_dense(hidden), hidden, state


@pytest.fixture(scope="module")
def recurrent():
    keras.utils.set_random_seed(5)
    lm = ToyRecurrentLM(ToyLSTMBackbone(VOCAB))
    _spread_weights(lm, seed=11)
    memory = np.random.default_rng(12).normal(0.0, 1.0, (3, 8)).astype("float32")
    return lm, memory


def test_recurrent_state_is_a_nested_batch_first_structure(recurrent):
    lm, memory = recurrent
    num_weights = len(lm.weights)
    state = lm.initial_state(3, 10, memory=memory)
    assert isinstance(state, dict) and isinstance(state["layers"], list)
    assert [tuple(tuple(leaf.shape) for leaf in pair) for pair in state["layers"]] == [
        ((3, 11, 12), (3, 11, 12)), ((3, 11, 10), (3, 11, 10))]
    check_state(state, 3)
    logits, hidden, after = lm.call_with_state(PROMPTS[:, :4], state, 0)
    check_state(after, 3, previous=state)
    assert tuple(logits.shape) == (3, 4, VOCAB) and tuple(hidden.shape) == (3, 4, 10)
    np.testing.assert_array_equal(np.asarray(after["memory"]), memory)  # the static leaf
    assert len(lm.weights) == num_weights


def test_recurrent_cached_greedy_equals_recomputing_the_prefix(recurrent):
    lm, memory = recurrent
    outputs = {}
    for name, context in (("free", {}), ("conditioned", {"memory": memory})):
        ids = _ids(lm.generate_ids(PROMPTS, prompt_lengths=LENGTHS, max_length=MAX_LENGTH,
                                   state_context=context))
        for row in range(3):
            extra = {"memory": memory[row:row + 1]} if context else {}
            expected = greedy_without_cache(lm, PROMPTS[row, :LENGTHS[row]], MAX_LENGTH,
                                            **extra)
            assert ids[row].tolist() == expected, (name, row)
        generated = np.concatenate([ids[row, LENGTHS[row]:] for row in range(3)])
        assert len(set(generated.tolist())) > 2
        outputs[name] = ids
    assert (outputs["free"] != outputs["conditioned"]).any()  # the context reaches the state


def test_recurrent_degenerate_samplers_equal_greedy(recurrent):
    lm, memory = recurrent
    kwargs = dict(prompt_lengths=LENGTHS, max_length=MAX_LENGTH,
                  state_context={"memory": memory})
    greedy = _ids(lm.generate_ids(PROMPTS, **kwargs))
    for sampler, sampler_kwargs in [("beam", {"num_beams": 1}), ("top_k", {"k": 1, "seed": 4})]:
        out = _ids(lm.generate_ids(PROMPTS, sampler=sampler, **sampler_kwargs, **kwargs))
        np.testing.assert_array_equal(out, greedy, err_msg=sampler)


def beam_search_without_state(lm, prompt, max_length, num_beams, **extra):
    """The reference beam search: every beam's whole prefix through the network at every
    step, keeping the ``num_beams`` best sums of log-probabilities; the best final beam."""
    beams = [(0.0, list(prompt))]
    while len(beams[0][1]) < max_length:
        candidates = []
        for score, ids in beams:
            logits = _last_logits(lm, ids, **extra).astype("float64")
            log_probs = logits - np.log(np.exp(logits - logits.max()).sum()) - logits.max()
            candidates += [(score + lp, ids + [token]) for token, lp in enumerate(log_probs)]
        beams = sorted(candidates, key=lambda candidate: -candidate[0])[:num_beams]
    return beams[0][1]


def test_recurrent_beam_search_reorders_the_nested_state(recurrent):
    """Beam search repeats every leaf of the dict / list / tuple state per beam and reorders
    it along the batch axis as beams overtake each other; with three beams it finds the
    sequences a stateless beam search finds, which greedy decoding misses."""
    lm, memory = recurrent
    prompts = np.array([[11, 12, 13], [21, 22, 23], [31, 32, 33]], "int32")
    max_length = 9
    beam = _ids(lm.generate_ids(prompts, max_length=max_length, sampler="beam", num_beams=3,
                                state_context={"memory": memory}))
    for row in range(3):
        expected = beam_search_without_state(lm, prompts[row], max_length, 3,
                                             memory=memory[row:row + 1])
        assert beam[row].tolist() == expected, row
    greedy = _ids(lm.generate_ids(prompts, max_length=max_length,
                                  state_context={"memory": memory}))
    assert (beam != greedy).any()


def test_check_state_names_what_breaks_the_protocol():
    h = np.zeros((2, 5, 3), "float32")
    state = {"layers": [(h, h)], "memory": np.zeros((2, 4), "float32")}
    check_state(state, 2)
    with pytest.raises(TypeError, match=r"state\['step'\] must be a tensor"):
        check_state({**state, "step": 3}, 2)
    with pytest.raises(TypeError, match="must be a tensor with the batch axis first"):
        check_state({**state, "step": np.float32(0)}, 2)
    with pytest.raises(ValueError, match=r"state\['memory'\] has shape \(3, 4\); its first "
                                         r"axis must be the batch \(2\)"):
        check_state({**state, "memory": np.zeros((3, 4), "float32")}, 2)
    with pytest.raises(TypeError, match="structure of the state it was given"):
        check_state({"layers": [[h, h]], "memory": state["memory"]}, 2, previous=state)
    with pytest.raises(TypeError, match=r"dtype of state\['memory'\]"):
        check_state({**state, "memory": state["memory"].astype("float16")}, 2,
                    previous=state)
    with pytest.raises(ValueError, match=r"shape of state\['layers'\]\[0\]\[1\]"):
        check_state({**state, "layers": [(h, h[:, :4])]}, 2, previous=state)


def test_generate_ids_rejects_a_state_that_changes_structure(recurrent):
    lm = recurrent[0]

    class ListState(ToyLSTMBackbone):
        def call_with_state(self, token_ids, state, index):
            hidden, state = super().call_with_state(token_ids, state, index)
            return hidden, {**state, "layers": [list(pair) for pair in state["layers"]]}

    broken = ToyRecurrentLM(ListState(VOCAB))
    broken.set_weights(lm.get_weights())
    with pytest.raises(TypeError, match="structure of the state it was given"):
        broken.generate_ids(PROMPTS, prompt_lengths=LENGTHS, max_length=MAX_LENGTH)


# --------------------------------------------------------------------------- serving

SERVING_PROMPTS = ["the quick brown fox", "a dog", ""]
TEXT = ["the quick brown fox jumps over the lazy dog", "the dog sleeps in the sun",
        "a fox runs to the river", "the river runs fast"] * 3


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A tiny GPT-2 with a tiny byte-level BPE vocabulary, exported the way the trainer
    exports it, and loaded back."""
    vocab_dir = str(tmp_path_factory.mktemp("vocab"))
    counts = collections.Counter(bpe.pretokenize_lines(TEXT))
    tokens, merges = bpe.learn_merges(counts.items(), 300, min_frequency=1)
    bpe.write_files(vocab_dir, tokens, merges)
    write_tokenizer_config(vocab_dir, bpe.tokenizer_config())
    keras.utils.set_random_seed(7)
    lm = GPT2CausalLM(models.build("gpt2", "tiny", **{**TINY, "vocabulary_size": len(tokens),
                                                      "max_sequence_length": 24}))
    _spread_weights(lm, seed=7)
    export_dir = str(tmp_path_factory.mktemp("serving") / "model")
    generation = {"max_length": 12, "sampler": "greedy", "k": 3, "p": 0.8,
                  "temperature": 0.9, "num_beams": 2, "seed": 5}
    export_serving_model(lm, vocab_dir, {"task": {"kind": "language_model",
                                                  "objective": "causal_lm"},
                                         "generation": generation}, export_dir)
    loaded = tf.saved_model.load(export_dir)
    return {"lm": lm, "tokenizer": load_tokenizer(vocab_dir), "loaded": loaded,
            "end": int(load_tokenizer(vocab_dir).token_to_id(bpe.END_OF_TEXT)),
            "export_dir": export_dir}


def test_saved_model_holds_two_decoding_loops(served):
    """Five samplers, two signatures, two decoding loops: beam search and `RequestSampler`'s
    loop for the token-at-a-time rules, which generate_default shares with serving_default.
    A decoding loop is a While whose body runs the model (its matrix products)."""
    from tensorflow.core.protobuf import saved_model_pb2

    saved_model = saved_model_pb2.SavedModel()
    with open(f"{served['export_dir']}/saved_model.pb", "rb") as f:
        saved_model.ParseFromString(f.read())
    library = {function.signature.name: function
               for function in saved_model.meta_graphs[0].graph_def.library.function}

    def runs_model(name, seen=()):
        function = library[name]
        if any(node.op in ("MatMul", "BatchMatMulV2") for node in function.node_def):
            return True
        called = {value.func.name for node in function.node_def
                  for value in node.attr.values() if value.func.name in library}
        return any(runs_model(callee, seen + (name,)) for callee in called - set(seen))

    loops = [node for function in library.values() for node in function.node_def
             if node.op in ("While", "StatelessWhile")
             and runs_model(node.attr["body"].func.name)]
    assert len(loops) == 2


def _request(prompts=SERVING_PROMPTS, max_length=10, sampler="greedy", temperature=1.0, k=3,
             p=0.9):
    return dict(prompt=tf.constant(prompts), max_length=tf.constant(max_length, tf.int32),
                sampler=tf.constant(sampler), temperature=tf.constant(temperature, tf.float32),
                k=tf.constant(k, tf.int32), p=tf.constant(p, tf.float32))


def _greedy_text(served, prompts, max_length):
    """What serving_default should answer for greedy decoding, from `generate_ids`."""
    tokenizer, end = served["tokenizer"], served["end"]
    rows = []
    for text in prompts:
        pieces = [int(i) for i in np.asarray(tokenizer(text))]
        rows.append([end] + pieces[max(0, len(pieces) - (max_length - 2)):])
    width = max(len(row) for row in rows)
    ids = np.array([row + [end] * (width - len(row)) for row in rows], "int32")
    out = served["lm"].generate_ids(ids, prompt_lengths=[len(row) for row in rows],
                                    max_length=max_length, end_token_id=end)
    detokenize = tf.function(tokenizer.detokenize)  # bytes as they are, not decoded
    texts, counts = [], []
    for row, generated, mask in zip(rows, _ids(out), np.asarray(out["padding_mask"])):
        kept = generated[mask]
        counts.append(len(kept) - len(row))
        pieces = [int(i) for i in kept[1:] if i != end]
        texts.append(detokenize(tf.constant([pieces], tf.int32)).numpy()[0])
    return texts, counts


def test_serving_signatures_and_inputs(served):
    signatures = served["loaded"].signatures
    assert set(signatures) == {"serving_default", "generate_default"}
    _, inputs = signatures["serving_default"].structured_input_signature
    assert {name: spec.dtype for name, spec in inputs.items()} == {
        "prompt": tf.string, "max_length": tf.int32, "sampler": tf.string,
        "temperature": tf.float32, "k": tf.int32, "p": tf.float32}
    _, inputs = signatures["generate_default"].structured_input_signature
    assert list(inputs) == ["prompt"]


def test_served_greedy_equals_generate_ids(served):
    serve = served["loaded"].signatures["serving_default"]
    for max_length in (10, 5):  # at 5 the first prompt (4 tokens) keeps its last 3
        out = serve(**_request(max_length=max_length))
        texts, counts = _greedy_text(served, SERVING_PROMPTS, max_length)
        assert out["generated_text"].numpy().tolist() == texts
        assert out["num_generated_tokens"].numpy().tolist() == counts
        if max_length == 10:  # no end token generated here: every output is 10 tokens
            assert texts[0].startswith(b"the quick brown fox")
            lengths = [len(np.asarray(served["tokenizer"](text))) for text in SERVING_PROMPTS]
            assert [1 + n + c for n, c in zip(lengths, counts)] == [10, 10, 10]


def test_every_sampler_serves_within_max_length(served):
    serve, tokenizer = served["loaded"].signatures["serving_default"], served["tokenizer"]
    prompt_tokens = [len(np.asarray(tokenizer(text))) for text in SERVING_PROMPTS]
    for sampler in language_model_serving.SAMPLERS:
        out = serve(**_request(sampler=sampler, max_length=11, temperature=1.5, k=4, p=0.7))
        texts = out["generated_text"].numpy()
        counts = out["num_generated_tokens"].numpy()
        assert texts.shape == (3,) and counts.shape == (3,)
        for text, prompt, count, length in zip(texts, SERVING_PROMPTS, counts, prompt_tokens):
            assert text.startswith(prompt.encode())
            assert 1 <= count and 1 + length + count <= 11, sampler
    # Sampling at a high temperature does not reproduce greedy decoding.
    greedy = serve(**_request(max_length=11))["generated_text"].numpy()
    sampled = serve(**_request(sampler="random", max_length=11, temperature=5.0))
    assert (sampled["generated_text"].numpy() != greedy).any()


def test_max_length_is_clamped_and_long_prompts_keep_their_end(served):
    serve, tokenizer = served["loaded"].signatures["serving_default"], served["tokenizer"]
    out = serve(**_request(max_length=1000))  # the model has 24 positions
    texts, counts = _greedy_text(served, SERVING_PROMPTS, 24)
    assert out["generated_text"].numpy().tolist() == texts
    long_prompt = " ".join(TEXT[:2])
    assert len(np.asarray(tokenizer(long_prompt))) > 8
    out = serve(**_request(prompts=[long_prompt], max_length=8))
    texts, counts = _greedy_text(served, [long_prompt], 8)
    assert out["generated_text"].numpy().tolist() == texts
    assert out["num_generated_tokens"].numpy().tolist() == counts == [1]
    # max_length = 2 leaves room for the start token and one generated token only.
    out = serve(**_request(max_length=2))
    assert out["num_generated_tokens"].numpy().tolist() == [1, 1, 1]


def test_generate_default_uses_the_recipe_settings(served):
    out = served["loaded"].signatures["generate_default"](prompt=tf.constant(SERVING_PROMPTS))
    texts, counts = _greedy_text(served, SERVING_PROMPTS, 12)  # recipe: greedy, 12 tokens
    assert out["generated_text"].numpy().tolist() == texts
    assert out["num_generated_tokens"].numpy().tolist() == counts


@pytest.mark.parametrize("change, message", [
    ({"prompts": [["a", "b"]]}, "prompt must be a 1-D batch"),
    ({"k": 0}, "k must be >= 1"),
    ({"sampler": "nucleus"}, "sampler must be one of"),
    ({"p": 0.0}, r"p must be in \(0, 1\]"),
    ({"p": 1.5}, r"p must be in \(0, 1\]"),
    ({"temperature": 0.0}, "temperature must be > 0"),
    ({"max_length": 1}, "max_length must be >= 2"),
])
def test_bad_requests_fail_with_a_message(served, change, message):
    serve = served["loaded"].signatures["serving_default"]
    with pytest.raises(tf.errors.InvalidArgumentError, match=f"serving_default: {message}"):
        serve(**_request(**change))
    generate_default = served["loaded"].signatures["generate_default"]
    if "prompts" in change:
        with pytest.raises(tf.errors.InvalidArgumentError,
                           match="generate_default: prompt must be a 1-D batch"):
            generate_default(prompt=tf.constant([["a", "b"]]))


def test_generation_settings_fill_and_check_the_recipe_block():
    assert (language_model_serving.generation_settings({})
            == language_model_serving.GENERATION_DEFAULTS)
    settings = language_model_serving.generation_settings({"sampler": "top_k", "k": 10,
                                                       "temperature": 1, "max_length": 64})
    assert settings["temperature"] == 1.0 and settings["num_beams"] == 4
    for block, message in [({"sampler": "nucleus"}, "serving.generation.sampler"),
                           ({"k": 0}, "serving.generation.k"),
                           ({"p": 1.2}, "serving.generation.p"),
                           ({"temperature": 0}, "serving.generation.temperature"),
                           ({"max_length": 1}, "serving.generation.max_length"),
                           ({"num_beams": 0}, "serving.generation.num_beams"),
                           ({"top_k": 3}, r"unknown key\(s\) \['top_k'\]")]:
        with pytest.raises(ValueError, match=message):
            language_model_serving.generation_settings(block)
