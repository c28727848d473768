"""The network of Bengio, Ducharme, Vincent, Jauvin 2003, "A Neural Probabilistic Language
Model" (JMLR 3:1137-1155), without its output layer: the shared word feature matrix C and
the tanh hidden layer over the concatenated features of the n-1 previous words (§2)."""

import keras
from keras import ops

from lmfactory.models.backbone import Backbone

NNLM_INPUTS = ("token_ids", "padding_mask")


def lecun_uniform():
    """The weights' initialiser. The paper does not state how it initialised the network
    (§4 gives only the learning-rate schedule and the weight decay); the tanh networks of its
    time drew weights uniformly with fan-in scaling (LeCun, Bottou, Orr, Müller 1998,
    "Efficient BackProp" §4.6), which is Keras' ``lecun_uniform``."""
    return keras.initializers.LecunUniform()


class NgramContext(keras.layers.Layer):
    """The ids of the n-1 words each position conditions on (§2: the context
    w_{t-1}, ..., w_{t-n+1} of the word w_t it predicts).

    Here position t predicts the NEXT word w_{t+1}, so its context is w_t, w_{t-1}, ...,
    w_{t-n+2}, most recent first as in the paper's x = (C(w_{t-1}), ..., C(w_{t-n+1})).
    A context slot before the first word of the row, or on a padded position (left padding
    acts as the start of the text; right padding comes after every real word, so it never
    enters a real position's window), holds ``start_id``: the row of C the backbone keeps
    for "no word here" (the paper does not say how it conditioned the first n-1 words of a
    text). keras-nlp has no fixed-window n-gram gather, hence this layer.

    Args:
        order: n, the order of the n-gram model (>= 2): n - 1 context words.
        start_id: the id filling context slots without a word.

    Call args:
        token_ids: int [batch, seq_len].
        padding_mask: bool/int [batch, seq_len] (1 = real word), or None (all real).

    Returns:
        int32 [batch, seq_len, order - 1], slot k holding the id of w_{t-k}.
    """

    def __init__(self, order, start_id, **kwargs):
        super().__init__(**kwargs)
        self.order = order
        self.start_id = start_id

    def call(self, token_ids, padding_mask=None):
        token_ids = ops.cast(token_ids, "int32")
        if padding_mask is not None:
            token_ids = ops.where(ops.cast(padding_mask, "bool"), token_ids, self.start_id)
        history = ops.full((ops.shape(token_ids)[0], self.order - 2), self.start_id,
                           dtype="int32")
        return self.windows(ops.concatenate([history, token_ids], axis=1))

    def windows(self, ids):
        """``ids`` [batch, order - 2 + L]: the n - 2 words before the first position, then L
        positions -> [batch, L, order - 1], the window of each of the L positions, most
        recent word first."""
        history = self.order - 2
        total = ops.shape(ids)[1]
        columns = [ids[:, history - k: total - k] for k in range(self.order - 1)]
        return ops.stack(columns, axis=-1)

    def compute_output_shape(self, token_ids_shape, padding_mask_shape=None):
        return tuple(token_ids_shape) + (self.order - 1,)

    def get_config(self):
        config = super().get_config()
        config.update({"order": self.order, "start_id": self.start_id})
        return config


class NnlmBackbone(Backbone):
    """The neural probabilistic language model of Bengio et al. 2003.

    §2: a word w is mapped to a real vector C(w) in R^m by the feature matrix C, |V| x m,
    shared by all positions of the context. The context of the next word is the
    concatenation x = (C(w_t), C(w_{t-1}), ..., C(w_{t-n+2})) of the features of the n - 1
    most recent words ((n-1) m values), the hidden layer computes tanh(d + H x) with h
    units, and the unnormalised log-probabilities of the next word are
    y = b + W x + U tanh(d + H x) (softmax over the |V| outputs): b the output biases, U
    the hidden-to-output weights (``output_layer``: kernel U, bias b) and W the optional
    direct connections from the word features to the outputs (``direct``: kernel W, no
    bias; None without ``direct_connections``, i.e. W = 0).

    The output layer belongs to the backbone, as GPT-2's tied token embedding does: the
    pipeline warm-starts a later training stage from the backbone's weights alone, which
    are therefore the whole language model. The task model (`NnlmCausalLM`) adds the
    training criterion (with the weight decay of §2) and generation.

    The model sees exactly n - 1 words: any earlier word leaves a position's outputs
    unchanged. Positions are independent given their windows, so the model is causal and
    takes sequences of any length; ``max_sequence_length`` only bounds generation (and a
    serving request), it is no property of the network. C has one row more than the
    vocabulary: row ``vocabulary_size`` is the learned feature vector of an empty context
    slot (before the first word, or padding; see `NgramContext`).

    Initialisation (not stated in the paper): H, U and W uniform with fan-in scaling
    (`lecun_uniform`), b and d zero, C uniform in [-0.05, 0.05] (Keras' embedding default).
    The paper regularises with weight decay only (no dropout, which it predates), so there
    is none.

    Inputs (dict of int32 [batch, seq_len]): `token_ids`, `padding_mask` (1 = real word).
    Outputs (dict): `sequence_output` tanh(d + H x) [batch, seq_len, hidden_dim],
        `context_output` x [batch, seq_len, (order - 1) * embedding_dim] and `logits` y
        [batch, seq_len, vocabulary_size] (the prediction of the next word).

    Args:
        vocabulary_size: |V|, the number of words.
        embedding_dim: m, the size of a word's feature vector C(w).
        hidden_dim: h, the number of hidden tanh units.
        order: n, the n-gram order: each prediction conditions on n - 1 words.
        direct_connections: whether y includes the direct connections W x from the word
            features to the outputs (§2; "direct" in the paper's Tables 1-2).
        max_sequence_length: the longest sequence generation (and serving) produces.
        dtype: Keras dtype policy for the layers.
    """

    def __init__(
        self,
        vocabulary_size,
        embedding_dim,
        hidden_dim,
        order,
        direct_connections=True,
        max_sequence_length=512,
        dtype=None,
        **kwargs,
    ):
        for key, value in (("vocabulary_size", vocabulary_size),
                           ("embedding_dim", embedding_dim), ("hidden_dim", hidden_dim),
                           ("max_sequence_length", max_sequence_length)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{key} must be a positive integer, got {value!r}")
        if isinstance(order, bool) or not isinstance(order, int) or order < 2:
            raise ValueError(f"order (n) must be an integer >= 2 (n - 1 context words), got "
                             f"{order!r}")
        if not isinstance(direct_connections, bool):
            raise ValueError(f"direct_connections must be a bool, got {direct_connections!r}")

        # === Layers ===
        self.ngram_context = NgramContext(order, start_id=vocabulary_size, dtype=dtype,
                                          name="ngram_context")
        # C: |V| + 1 rows, the last one for empty context slots.
        self.word_features = keras.layers.Embedding(
            vocabulary_size + 1, embedding_dim, dtype=dtype, name="word_features")
        self.concatenate_features = keras.layers.Reshape(
            (-1, (order - 1) * embedding_dim), dtype=dtype, name="concatenate_features")
        # H and d.
        self.hidden = keras.layers.Dense(hidden_dim, activation="tanh",
                                         kernel_initializer=lecun_uniform(), dtype=dtype,
                                         name="hidden")
        # U and b.
        self.output_layer = keras.layers.Dense(vocabulary_size,
                                               kernel_initializer=lecun_uniform(),
                                               dtype=dtype, name="output")
        # W (no bias: b is the output layer's).
        self.direct = None
        if direct_connections:
            self.direct = keras.layers.Dense(vocabulary_size, use_bias=False,
                                             kernel_initializer=lecun_uniform(),
                                             dtype=dtype, name="direct")

        # === Functional model ===
        inputs = {name: keras.Input(shape=(None,), dtype="int32", name=name)
                  for name in NNLM_INPUTS}
        context_ids = self.ngram_context(inputs["token_ids"], inputs["padding_mask"])
        outputs = self.context_outputs(context_ids)
        super().__init__(inputs=inputs, outputs=outputs, dtype=dtype, arguments=locals(),
                         **kwargs)

    @property
    def start_id(self):
        """The row of C that fills context slots without a word."""
        return self.vocabulary_size

    def context_outputs(self, context_ids):
        """x = the concatenated features of ``context_ids`` [B, T, n-1], tanh(d + H x) and
        y = b + W x + U tanh(d + H x)."""
        features = self.concatenate_features(self.word_features(context_ids))
        hidden = self.hidden(features)
        logits = self.output_layer(hidden)
        if self.direct is not None:
            logits = ops.add(logits, self.direct(features))
        return {"sequence_output": hidden, "context_output": features, "logits": logits}

    # --------------------------------------------------------------- decoding state

    def initial_state(self, batch_size, max_length, **context):
        """The decoding state (models/generation.py): the ids of the words at every
        position, int32 [batch, order - 2 + max_length], slot ``order - 2 + p`` holding
        position p's word; the n - 2 slots before position 0 (and every position not yet
        run) hold ``start_id``. A step reads the n - 1 slots of each window, so the model
        remembers exactly the words its windows need, written per position (rule 3)."""
        if context:
            raise ValueError(f"NnlmBackbone's state takes no context, got {sorted(context)}")
        return ops.full((batch_size, self.order - 2 + max_length), self.start_id,
                        dtype="int32")

    def call_with_state_outputs(self, token_ids, state, index):
        """Writes ``token_ids`` [B, k] (positions index, ..., index + k - 1) into the state
        and returns (the backbone's output dict for them, the updated state)."""
        token_ids = ops.cast(token_ids, "int32")
        state = ops.slice_update(state, [0, index + self.order - 2], token_ids)
        shape = ops.shape(token_ids)
        window = ops.slice(state, [0, index], [shape[0], shape[1] + self.order - 2])
        return self.context_outputs(self.ngram_context.windows(window)), state

    def call_with_state(self, token_ids, state, index):
        """The decoding-state step of models/generation.py: (tanh(d + H x) [B, k, h],
        updated state)."""
        outputs, state = self.call_with_state_outputs(token_ids, state, index)
        return outputs["sequence_output"], state


__all__ = ["NNLM_INPUTS", "NgramContext", "NnlmBackbone", "lecun_uniform"]
