"""The RNNsearch decoder (Bahdanau et al. 2015 §3.1, Appendix A.2.2): a recurrent network
that, at every target position i, aligns its previous state s_{i-1} with the source
annotations, reads their weighted sum (the context c_i), updates its state from the
previous target word and c_i, and emits a deep-output feature vector t_i.

keras-nlp has no attention-conditioned recurrent decoder, so the step is written here;
the recurrence itself is a Keras `GRUCell` / `LSTMCell` and the alignment `Alignment`.

One step (the tokens y_{i-1} -> features t_i):

    alpha_i = softmax_j(a(s_{i-1}, h_j))             (§3.1 eq. 6, masked over padding)
    c_i     = sum_j alpha_ij h_j                        (eq. 5)
    s_i     = f(s_{i-1}, [E y_{i-1}; c_i])              (eq. 4 / §A.2.2: the GRU input is
                                                         the word embedding and the context)
    t~_i    = U_o s_i + V_o E y_{i-1} + C_o c_i         (§A.2.2, deep output, Pascanu 2014)
    t_i     = [max(t~_{i,2k-1}, t~_{i,2k})]_{k=1..l}     (maxout, Goodfellow et al. 2013)

The paper's appendix writes the readout with s_{i-1}; its §3.1 eq. (4) conditions p(y_i)
on s_i, y_{i-1} and c_i, which is what is done here (and in the authors' GroundHog code).
The output layer p(y_i) = softmax(W_o t_i) is the task head's (`Seq2SeqLM`).

The GRU follows §A.1.1: the reset gate applies before the recurrent product
(``reset_after=False``). With an LSTM cell the state is (h, c) and h plays s's role.
Positions where the decoder padding mask is 0 keep the previous state (so left padding
does not disturb the real positions; right padding is never read back).

Weights (Appendix B.1): recurrent matrices orthogonal, every other weight matrix from
N(0, 0.01^2), biases zero.
"""

import keras
from keras import ops

from lmfactory.models import backend
from lmfactory.models.rnnsearch.alignment import Alignment

CELL_TYPES = ("gru", "lstm")


def paper_initializer():
    """N(0, 0.01^2): every weight matrix of the paper that is neither recurrent nor part
    of the alignment model (Appendix B.1)."""
    return keras.initializers.RandomNormal(stddev=0.01)


def recurrent_cell(cell_type, units, dtype=None, name=None):
    """A Keras GRU (§A.1.1, reset gate before the recurrent product) or LSTM cell with the
    paper's initialisation."""
    if cell_type not in CELL_TYPES:
        raise ValueError(f"cell_type must be one of {CELL_TYPES}, got {cell_type!r}")
    common = dict(kernel_initializer=paper_initializer(), recurrent_initializer="orthogonal",
                  bias_initializer="zeros", dtype=dtype, name=name)
    if cell_type == "gru":
        return keras.layers.GRUCell(units, reset_after=False, **common)
    return keras.layers.LSTMCell(units, **common)


class AttentionDecoder(keras.layers.Layer):
    """The attention decoder's recurrence over target positions.

    Args:
        hidden_dim: n, the decoder state size.
        embedding_dim: m, the target word embedding size.
        annotation_dim: 2n, the width of the source annotations.
        attention_dim: n', the alignment model's width.
        maxout_dim: l, the deep output's size (2l pre-activations, max over pairs).
        cell_type: ``"gru"`` or ``"lstm"``.
        attention: the alignment similarity (`alignment.SIMILARITIES`).
    """

    def __init__(self, hidden_dim, embedding_dim, annotation_dim, attention_dim, maxout_dim,
                 cell_type="gru", attention="additive", **kwargs):
        super().__init__(**kwargs)
        self.hidden_dim = hidden_dim
        self.embedding_dim = embedding_dim
        self.annotation_dim = annotation_dim
        self.attention_dim = attention_dim
        self.maxout_dim = maxout_dim
        self.cell_type = cell_type
        self.attention = attention
        dtype = self.dtype_policy
        self.alignment = Alignment(attention_dim, hidden_dim, annotation_dim, attention,
                                   dtype=dtype, name="alignment")
        self.cell = recurrent_cell(cell_type, hidden_dim, dtype=dtype, name="cell")
        self.cell.build((None, embedding_dim + annotation_dim))
        self.deep_output = keras.layers.Dense(
            2 * maxout_dim, kernel_initializer=paper_initializer(), dtype=dtype,
            name="deep_output")  # [U_o, V_o, C_o] on [s_i; E y_{i-1}; c_i]
        self.deep_output.build((None, hidden_dim + embedding_dim + annotation_dim))
        self.built = True

    @property
    def num_state_tensors(self):
        """How many tensors make the recurrent state: s (GRU) or (h, c) (LSTM)."""
        return 1 if self.cell_type == "gru" else 2

    def step(self, states, embedding, step_mask, annotations, keys, encoder_mask):
        """One target position: ``states`` (list of [B, n]) and the previous word's
        ``embedding`` [B, m] -> (new states, t_i [B, l], alpha_i [B, S])."""
        weights = self.alignment(states[0], keys, encoder_mask)
        context = ops.einsum("bs,bsd->bd", ops.cast(weights, annotations.dtype), annotations)
        _, new_states = self.cell(ops.concatenate([embedding, context], axis=-1), states)
        new_states = list(new_states) if isinstance(new_states, (list, tuple)) \
            else [new_states]
        keep = step_mask[:, None]
        new_states = [ops.where(keep, new, old) for new, old in zip(new_states, states)]
        pre_maxout = self.deep_output(
            ops.concatenate([new_states[0], embedding, context], axis=-1))
        pairs = ops.reshape(pre_maxout, (-1, self.maxout_dim, 2))
        return new_states, ops.max(pairs, axis=-1), weights

    def call(self, embeddings, step_mask, annotations, keys, encoder_mask, initial_states):
        """Runs the decoder over all positions of ``embeddings`` [B, T, m] from
        ``initial_states`` (list of [B, n]).

        Returns a dict: ``features`` t [B, T, l], ``states`` a list of [B, T, n] (s_i; for
        an LSTM h_i then c_i) and ``attention`` alpha [B, T, S]."""
        step_mask = ops.cast(step_mask, "bool")
        encoder_mask = ops.cast(encoder_mask, "bool")

        # `backend.scan_stacked` (tf.scan's contract) stacks the carry at every step, so the
        # carry holds the step's features and attention weights next to the states.
        def body(carry, inputs):
            embedding, mask = inputs
            states, features, weights = self.step(list(carry[0]), embedding, mask,
                                                  annotations, keys, encoder_mask)
            return tuple(states), features, weights

        batch = ops.shape(embeddings)[0]
        start = (tuple(initial_states),
                 ops.zeros((batch, self.maxout_dim), dtype=initial_states[0].dtype),
                 ops.zeros((batch, ops.shape(annotations)[1]), dtype="float32"))
        time_major = (ops.transpose(embeddings, (1, 0, 2)), ops.transpose(step_mask, (1, 0)))
        states, features, weights = backend.scan_stacked(body, time_major, start)
        outputs = {"features": ops.transpose(features, (1, 0, 2)),
                   "attention": ops.transpose(weights, (1, 0, 2))}
        outputs["states"] = [ops.transpose(state, (1, 0, 2)) for state in states]
        return outputs

    def compute_output_spec(self, embeddings, step_mask, annotations, keys, encoder_mask,
                            initial_states):
        batch, length = embeddings.shape[0], embeddings.shape[1]
        dtype = self.compute_dtype
        return {
            "features": keras.KerasTensor((batch, length, self.maxout_dim), dtype=dtype),
            "attention": keras.KerasTensor((batch, length, annotations.shape[1]),
                                           dtype="float32"),
            "states": [keras.KerasTensor((batch, length, self.hidden_dim), dtype=dtype)
                       for _ in range(self.num_state_tensors)],
        }

    def get_config(self):
        config = super().get_config()
        config.update({"hidden_dim": self.hidden_dim, "embedding_dim": self.embedding_dim,
                       "annotation_dim": self.annotation_dim,
                       "attention_dim": self.attention_dim, "maxout_dim": self.maxout_dim,
                       "cell_type": self.cell_type, "attention": self.attention})
        return config
