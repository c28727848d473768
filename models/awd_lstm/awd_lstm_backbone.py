"""The AWD-LSTM network (Merity, Keskar & Socher 2018, "Regularizing and Optimizing LSTM
Language Models", ICLR), without its softmax layer: the encoder that ULMFiT (Howard & Ruder
2018 §3) pretrains, fine-tunes and classifies with."""

from __future__ import annotations

import keras
import keras_nlp
from keras import ops

from lmfactory.models.awd_lstm.embedding_dropout import EmbeddingDropout
from lmfactory.models.awd_lstm.weight_drop_lstm import WeightDropLSTM
from lmfactory.models.backbone import Backbone
from lmfactory.models.task_model import int_inputs

BACKBONE_INPUTS = ("token_ids", "padding_mask")


class AwdLstmBackbone(Backbone):
    """A stack of weight-dropped LSTMs over a word embedding (§2, §4, §5).

    * Embedding (`token_embedding`, a keras-nlp `ReversibleEmbedding` so the language
      model's softmax is tied to it, §4.5 weight tying), initialised U(-0.1, 0.1) as the
      reference code does, then embedding dropout (§4.3, whole rows of the matrix:
      `EmbeddingDropout`, rate `dropout_embedding`).
    * Variational ("locked") dropout (§4.2: "a dropout mask only once upon the first call
      and then ... the locked dropout mask for all repeated connections within the forward
      and backward pass") on the LSTM inputs (`dropout_input`, dropouti) and between the
      LSTM layers (`dropout_hidden`, dropouth): Keras's `SpatialDropout1D`, whose mask
      [B, 1, D] is drawn once per sequence and broadcast over time, is exactly that mask.
      The output dropout before the softmax (`dropout`, 0.4) is applied by the language
      model head (`AwdLstmCausalLM`), which also needs the undropped output for TAR.
    * `num_layers` LSTMs with DropConnect on their hidden-to-hidden weights (§2,
      `WeightDropLSTM`, rate `dropout_weight`); the inner layers have `lstm_units` units
      and the last one `embedding_dim`, so its output can be tied to the embedding (§4.5,
      §5: "the final LSTM layer ... dimensionality equal to the embedding size").

    Called as a Keras model, the LSTM state starts at zero for every sequence.
    `call_from_state` runs the same network from a given (h, c) per layer and returns the
    final one, so a language model can carry the state from one BPTT window to the next of
    a continuous stream (§4 / the reference code's ``hidden = repackage_hidden(hidden)``;
    `AwdLstmCausalLM` with ``stream_batch_size``). No positions are learned, so any length
    runs; `max_sequence_length` only bounds generation and the served inputs.

    Inputs (dict, int32 [batch, seq_len]): `token_ids`, `padding_mask` (1 = real token; the
        LSTM state is carried unchanged over padded positions, so padding on either side
        does not change real positions).
    Outputs (dict): `sequence_output` [batch, seq_len, embedding_dim], the last LSTM
        layer's hidden states (before output dropout).

    Decoding state (models/generation.py): per layer a pair (h, c), each
    [batch, max_length + 1, units], slot 0 the zero state before the first position and
    slot p + 1 the state after position p (`initial_state` / `call_with_state`).

    Args:
        vocabulary_size: number of words.
        num_layers: LSTM layers (3).
        embedding_dim: embedding size, also the last LSTM layer's (400).
        lstm_units: hidden size of the other LSTM layers (1150).
        dropout: output dropout, applied by the language model head (0.4).
        dropout_hidden: locked dropout between LSTM layers (0.3 on WikiText-2).
        dropout_input: locked dropout on the embedding output (0.65).
        dropout_embedding: embedding (word) dropout (0.1).
        dropout_weight: DropConnect on the recurrent weights (0.5).
        max_sequence_length: the longest sequence generation and serving take.
        dtype: Keras dtype policy.
    """

    def __init__(self, vocabulary_size, num_layers=3, embedding_dim=400, lstm_units=1150,
                 dropout=0.4, dropout_hidden=0.3, dropout_input=0.65, dropout_embedding=0.1,
                 dropout_weight=0.5, max_sequence_length=512, dtype=None, **kwargs):
        if num_layers < 1:
            raise ValueError(f"num_layers must be >= 1, got {num_layers}")
        # === Layers ===
        self.token_embedding = keras_nlp.layers.ReversibleEmbedding(
            vocabulary_size, embedding_dim, tie_weights=True,
            embeddings_initializer=keras.initializers.RandomUniform(-0.1, 0.1),
            dtype=dtype, name="token_embedding")
        self.embedding_dropout = EmbeddingDropout(dropout_embedding, vocabulary_size,
                                                  dtype=dtype, name="embedding_dropout")
        self.input_dropout = keras.layers.SpatialDropout1D(dropout_input, dtype=dtype,
                                                           name="input_dropout")
        self.lstm_layers = [
            WeightDropLSTM(embedding_dim if layer == num_layers - 1 else lstm_units,
                           dropout_weight, dtype=dtype, name=f"lstm_{layer}")
            for layer in range(num_layers)]
        self.hidden_dropouts = [
            keras.layers.SpatialDropout1D(dropout_hidden, dtype=dtype,
                                          name=f"hidden_dropout_{layer}")
            for layer in range(num_layers - 1)]

        # === Functional model ===
        inputs = int_inputs(BACKBONE_INPUTS)
        x = self.token_embedding(inputs["token_ids"])
        x = self.embedding_dropout(x, inputs["token_ids"])
        x = self.input_dropout(x)
        for layer, lstm in enumerate(self.lstm_layers):
            x = lstm(x, padding_mask=inputs["padding_mask"])
            if layer < num_layers - 1:
                x = self.hidden_dropouts[layer](x)
        super().__init__(inputs=inputs, outputs={"sequence_output": x}, dtype=dtype,
                         arguments=locals(), **kwargs)

    # ------------------------------------------------------------------ carried state

    def zero_states(self, batch_size):
        """Per layer (h, c), each [batch, units] of zeros: the state before a stream."""
        return [lstm.zero_state(batch_size) for lstm in self.lstm_layers]

    def call_from_state(self, inputs, states, training=False):
        """The backbone's forward pass (the same layers and dropouts as the functional
        model) with the LSTM of layer l starting from ``states[l]`` = (h, c) [B, units].

        Returns:
            (sequence_output [B, T, embedding_dim], final states: per layer (h, c) after
            the last real position; a padded position carries the state unchanged).
        """
        token_ids = ops.convert_to_tensor(inputs["token_ids"], "int32")
        x = self.token_embedding(token_ids)
        x = self.embedding_dropout(x, token_ids, training=training)
        x = self.input_dropout(x, training=training)
        final = []
        for layer, (lstm, start) in enumerate(zip(self.lstm_layers, states)):
            h_seq, c_seq = lstm.sequence_states(x, inputs["padding_mask"],
                                                initial_state=start, training=training)
            final.append((h_seq[:, -1], c_seq[:, -1]))
            x = h_seq
            if layer < len(self.lstm_layers) - 1:
                x = self.hidden_dropouts[layer](x, training=training)
        return x, final

    # ------------------------------------------------------------------ decoding state

    def initial_state(self, batch_size, max_length):
        """Per layer (h, c), each [batch, max_length + 1, units] of zeros (the protocol of
        models/generation.py)."""
        return [tuple(ops.zeros((batch_size, max_length + 1, lstm.units),
                                dtype=self.compute_dtype) for _ in range(2))
                for lstm in self.lstm_layers]

    def call_with_state(self, token_ids, state, index):
        """Runs ``token_ids`` [B, n] at positions ``index, ..., index + n - 1`` from the
        states left in slot ``index`` and writes slots ``index + 1, ..., index + n``.

        Returns:
            (hidden [B, n, embedding_dim], updated state).
        """
        x = self.token_embedding(ops.convert_to_tensor(token_ids, "int32"))
        updated = []
        for lstm, (h_all, c_all) in zip(self.lstm_layers, state):
            start = (ops.take(h_all, index, axis=1), ops.take(c_all, index, axis=1))
            h_seq, c_seq = lstm.sequence_states(x, initial_state=start)
            h_all = ops.slice_update(h_all, [0, index + 1, 0], ops.cast(h_seq, h_all.dtype))
            c_all = ops.slice_update(c_all, [0, index + 1, 0], ops.cast(c_seq, c_all.dtype))
            updated.append((h_all, c_all))
            x = h_seq
        return x, updated


__all__ = ["AwdLstmBackbone", "BACKBONE_INPUTS"]
