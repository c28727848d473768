"""RNNsearch (Bahdanau, Cho & Bengio 2015, "Neural Machine Translation by Jointly Learning
to Align and Translate", ICLR): an RNN encoder-decoder whose decoder attends over the
annotations of a bidirectional encoder."""

import keras
from keras import ops

from lmfactory.models.backbone import Backbone
from lmfactory.models.rnnsearch.attention_decoder import (CELL_TYPES, AttentionDecoder,
                                                          paper_initializer)

INPUT_NAMES = ("encoder_token_ids", "encoder_padding_mask", "decoder_token_ids",
               "decoder_padding_mask")


def _recurrent_layer(cell_type, units, **kwargs):
    """A Keras GRU (reset gate before the recurrent product, §A.1.1) or LSTM layer with the
    paper's initialisation (Appendix B.1: orthogonal recurrent matrices, N(0, 0.01^2)
    input matrices, zero biases)."""
    if cell_type not in CELL_TYPES:
        raise ValueError(f"cell_type must be one of {CELL_TYPES}, got {cell_type!r}")
    common = dict(return_sequences=True, return_state=True,
                  kernel_initializer=paper_initializer(), recurrent_initializer="orthogonal",
                  bias_initializer="zeros", **kwargs)
    if cell_type == "gru":
        return keras.layers.GRU(units, reset_after=False, **common)
    return keras.layers.LSTM(units, **common)


class RNNsearchBackbone(Backbone):
    """The RNNsearch encoder-decoder without its output softmax.

    Encoder (§3.2, Appendix A.2.1): the source words' embeddings run through a forward and a
    backward recurrent network (a Keras `Bidirectional` GRU or LSTM, masked by the padding);
    the annotation of word j is h_j = [->h_j ; <-h_j] (2n wide). Decoder (§3.1, §A.2.2,
    `AttentionDecoder`): s_0 = tanh(W_s <-h_1) (the backward network's state at the first
    word), then per target position the alignment over the annotations, the context c_i,
    the recurrent update from [E y_{i-1}; c_i] and the deep output with maxout. The deep
    output lives in the backbone (it reads E y_{i-1} and c_i, which only the decoder step
    has): ``decoder_readout`` is t_i, and the head (`Seq2SeqLM`, which reads the output
    named by `readout_output`) adds W_o and the softmax.

    Inputs (dict, int32): `encoder_token_ids`, `encoder_padding_mask` [B, S],
        `decoder_token_ids` (y_0 = the start token, then the target words shifted right),
        `decoder_padding_mask` [B, T].
    Outputs (dict): `encoder_sequence_output` h [B, S, 2 * hidden_dim],
        `decoder_sequence_output` the decoder states s_i [B, T, hidden_dim],
        `decoder_readout` the deep output t_i [B, T, maxout_dim], `attention_weights`
        alpha_ij [B, T, S] (0 on padded source words; each real row sums to 1).

    Decoding state (models/generation.py): ``initial_state(batch, max_length,
    encoder_token_ids=..., encoder_padding_mask=...)`` runs the encoder once; the state is
    ``{"decoder_states": [s (GRU) or h, c (LSTM)], each [B, max_length + 1, n] with slot
    p + 1 the state after target position p and slot 0 = s_0, "annotations": h [B, S, 2n],
    "keys": U_a h [B, S, n'], "encoder_padding_mask": [B, S]}`` (the last three static).

    Args:
        vocabulary_size: size of the (joint) vocabulary; source and target words have their
            own embedding tables (§A.2: E for the target, a separate one for the source).
        hidden_dim: n, the units of each encoder direction and of the decoder.
        embedding_dim: m, the word embedding size.
        attention_dim: n', the alignment model's hidden units (None: n, as in the paper).
        maxout_dim: l, the deep output's maxout units (None: n / 2, as in the paper).
        cell_type: ``"gru"`` (the paper's gated unit) or ``"lstm"``.
        attention: ``"additive"`` (the paper), ``"dot"`` or ``"cosine"`` (`Alignment`).
        max_sequence_length: the longest target `generate_ids` produces (an RNN has no
            position limit; this bounds decoding).
    """

    # The output the language-model head projects onto the vocabulary (W_o t_i).
    readout_output = "decoder_readout"

    def __init__(self, vocabulary_size, hidden_dim, embedding_dim, attention_dim=None,
                 maxout_dim=None, cell_type="gru", attention="additive",
                 max_sequence_length=80, dtype=None, **kwargs):
        attention_dim = attention_dim or hidden_dim
        maxout_dim = maxout_dim or max(hidden_dim // 2, 1)
        embeddings = dict(embeddings_initializer=paper_initializer(), dtype=dtype)
        # === Layers ===
        self.encoder_embedding = keras.layers.Embedding(
            vocabulary_size, embedding_dim, name="encoder_embedding", **embeddings)
        self.encoder_rnn = keras.layers.Bidirectional(
            _recurrent_layer(cell_type, hidden_dim), merge_mode="concat", dtype=dtype,
            name="encoder_rnn")
        self.initial_state_dense = keras.layers.Dense(
            hidden_dim, activation="tanh", kernel_initializer=paper_initializer(),
            dtype=dtype, name="initial_state_dense")  # W_s
        self.decoder_embedding = keras.layers.Embedding(
            vocabulary_size, embedding_dim, name="decoder_embedding", **embeddings)
        self.decoder = AttentionDecoder(hidden_dim, embedding_dim, 2 * hidden_dim,
                                        attention_dim, maxout_dim, cell_type, attention,
                                        dtype=dtype, name="attention_decoder")

        # === Functional model ===
        inputs = {name: keras.Input(shape=(None,), dtype="int32", name=name)
                  for name in INPUT_NAMES}
        annotations, keys, encoder_mask, initial = self.encode(
            inputs["encoder_token_ids"], inputs["encoder_padding_mask"])
        decoded = self.decoder(self.decoder_embedding(inputs["decoder_token_ids"]),
                               inputs["decoder_padding_mask"], annotations, keys,
                               encoder_mask, initial)
        outputs = {"encoder_sequence_output": annotations,
                   "decoder_sequence_output": decoded["states"][0],
                   "decoder_readout": decoded["features"],
                   "attention_weights": decoded["attention"]}
        super().__init__(inputs=inputs, outputs=outputs, dtype=dtype, arguments=locals(),
                         **kwargs)

    def encode(self, token_ids, padding_mask):
        """The encoder: (annotations h [B, S, 2n], alignment keys U_a h [B, S, n'], the
        padding mask as bool [B, S], the decoder's initial state list (s_0, or h_0 and a
        zero c_0 for an LSTM))."""
        mask = ops.cast(padding_mask, "bool")
        annotations, *final_states = self.encoder_rnn(self.encoder_embedding(token_ids),
                                                      mask=mask)
        backward_first = final_states[len(final_states) // 2]  # <-h_1 (h of the backward)
        initial = [self.initial_state_dense(backward_first)]
        if len(final_states) == 4:  # LSTM: (h, c) per direction; the memory cell starts at 0
            initial.append(ops.zeros_like(initial[0]))
        return annotations, self.decoder.alignment.keys(annotations), mask, initial

    def initial_state(self, batch_size, max_length, encoder_token_ids=None,
                      encoder_padding_mask=None):
        """The decoding state before the first target position (see the class docstring):
        runs the encoder on ``encoder_token_ids`` [B, S] (``encoder_padding_mask``: 1 on
        real words; default ids != 0)."""
        if encoder_token_ids is None:
            raise ValueError("RNNsearch decodes from a source sentence: pass "
                             "state_context={'encoder_token_ids': ..., "
                             "'encoder_padding_mask': ...}")
        encoder_token_ids = ops.convert_to_tensor(encoder_token_ids, "int32")
        if encoder_padding_mask is None:
            encoder_padding_mask = ops.not_equal(encoder_token_ids, 0)
        annotations, keys, mask, initial = self.encode(encoder_token_ids,
                                                       encoder_padding_mask)
        later = ops.zeros((batch_size, max_length, self.hidden_dim), dtype=initial[0].dtype)
        buffers = [ops.concatenate([state[:, None, :], later], axis=1) for state in initial]
        return {"decoder_states": buffers, "annotations": annotations, "keys": keys,
                "encoder_padding_mask": ops.cast(mask, "int32")}

    def call_with_state(self, token_ids, state, index, return_attention=False):
        """Runs the target tokens at positions ``index``, ... (the protocol of
        models/generation.py): (the deep output t [B, n_tokens, l], i.e. what the head's
        W_o reads, as the protocol's hidden; updated state), plus the attention weights
        [B, n_tokens, S] with ``return_attention``."""
        buffers = state["decoder_states"]
        previous = [ops.take(buffer, index, axis=1) for buffer in buffers]
        steps = ops.ones(ops.shape(token_ids), dtype="bool")
        decoded = self.decoder(self.decoder_embedding(token_ids), steps, state["annotations"],
                               state["keys"], state["encoder_padding_mask"], previous)
        buffers = [ops.slice_update(buffer, [0, index + 1, 0], ops.cast(new, buffer.dtype))
                   for buffer, new in zip(buffers, decoded["states"])]
        state = dict(state, decoder_states=buffers)
        if return_attention:
            return decoded["features"], state, decoded["attention"]
        return decoded["features"], state
