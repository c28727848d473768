"""ELMo's bidirectional language model (Peters et al. 2018, "Deep contextualized word
representations", NAACL; §3.1 and §3.4)."""

from __future__ import annotations

import keras
from keras import ops

from lmfactory.models.backbone import Backbone
from lmfactory.models.elmo.elmo_character_encoder import ElmoCharacterEncoder
from lmfactory.models.elmo.elmo_lstm_cell import ElmoLstmCell


def neighbour_targets(token_ids, mask) -> tuple:
    """The biLM's targets at each position: the id of the next token (forward LM) and of the
    previous token (backward LM) where that token is real, else -1. Padding is a contiguous
    block at either end, so the neighbours of a real token are its sentence neighbours."""
    token_ids = ops.cast(token_ids, "int32")
    none = ops.full_like(token_ids[:, :1], -1)
    real = ops.logical_and(mask[:, 1:], mask[:, :-1])
    forward = ops.where(real, token_ids[:, 1:], -1)
    backward = ops.where(real, token_ids[:, :-1], -1)
    return (ops.concatenate([forward, none], axis=1),
            ops.concatenate([none, backward], axis=1))


class ElmoBackbone(Backbone):
    """The biLM: a character CNN token encoder, then a forward and a backward stack of
    projected LSTMs over the sentence.

    §3.1: a forward LM computes p(t_k | t_1..t_{k-1}) and a backward LM p(t_k | t_{k+1}..t_N),
    each from a context-independent token representation x_k^LM (shared) passed through L
    layers of LSTMs; the two directions share the token representation and the softmax
    (the softmax lives in the pre-trainer, `ElmoBiLM`) but have separate LSTMs. §3.4 (the
    original configuration, preset ``original``): L = 2 biLSTM layers of 4096 units with 512
    projections, "a residual connection from the first to second layer", and the token
    encoder of `ElmoCharacterEncoder` (2048 character filters, two highway layers, a
    projection to 512). The LSTMs are `ElmoLstmCell`s (projection, cell and projection
    clipping at 3). During training dropout (``dropout``, 0.1 in the released biLM) is
    applied to the input of every LSTM layer; the second layer's output adds its (dropped)
    input, as the original's residual wrapper does.

    The backward LM runs over the sequence reversed: `keras.layers.RNN` with
    ``go_backwards`` and the padding mask, whose masked steps keep the state, so with right
    or left padding each real position's backward state depends only on the real tokens
    from it to the end of the sentence; the result is flipped back to sentence order.
    Padded positions output zeros.

    Inputs (dict): ``token_ids`` int32 [B, T] (word ids), ``character_ids`` [B, T, C]
    (`models/tokenizers/word_characters.py`; C = ``max_characters_per_token``) and
    ``padding_mask`` [B, T] (1 = real token). The LSTMs read each token through its
    characters only (§3.4); the word ids are what the two LMs predict (§3.1), given as the
    ``forward_targets`` / ``backward_targets`` outputs, and what task models embed.
    Outputs (dict):
        ``sequence_output`` [B, T, 2 * projection_dim]: the top layer, [forward; backward]
            (h_{k,L}^LM of §3.2);
        ``layer_outputs`` [B, L + 1, T, 2 * projection_dim]: h_{k,j}^LM for j = 0..L, layer
            0 being the token representation x_k^LM duplicated to both directions (§3.2:
            "h_{k,0}^LM is the token layer"), what the task's scalar mix weighs;
        ``forward_targets`` / ``backward_targets`` int32 [B, T]: the word the forward LM
            predicts at each position (the next real token's id) and the backward LM (the
            previous one), -1 where there is none (the sentence's last / first token, and
            padding).

    Args:
        vocabulary_size: the word vocabulary (the size of the shared softmax; the backbone
            itself reads characters).
        num_layers: L, biLSTM layers (2).
        lstm_units: memory cells per LSTM (4096).
        projection_dim: width of the token representation and of each LSTM's projection
            (512); each direction's output is this wide.
        filters: the character CNN's ``[width, count]`` banks.
        num_highway_layers: highway layers of the token encoder (2).
        character_embedding_dim: character embedding width (16).
        max_characters_per_token: C (50).
        cell_clip, projection_clip: the LSTM's clipping bounds (3, 3).
        dropout: dropout on the LSTM layers' inputs during training.
        dtype: the Keras dtype policy.
    """

    def __init__(self, vocabulary_size, num_layers, lstm_units, projection_dim, filters,
                 num_highway_layers=2, character_embedding_dim=16,
                 max_characters_per_token=50, cell_clip=3.0, projection_clip=3.0,
                 dropout=0.1, dtype=None, **kwargs):
        if int(num_layers) < 1:
            raise ValueError(f"num_layers must be positive, got {num_layers}")
        filters = [[int(width), int(count)] for width, count in filters]
        # === Layers ===
        self.token_encoder = ElmoCharacterEncoder(
            filters, num_highway_layers, projection_dim,
            character_embedding_dim=character_embedding_dim,
            max_characters_per_token=max_characters_per_token, dtype=dtype,
            name="token_encoder")
        self.forward_layers, self.backward_layers = [], []
        for index in range(int(num_layers)):
            for direction, layers in (("forward", self.forward_layers),
                                      ("backward", self.backward_layers)):
                cell = ElmoLstmCell(lstm_units, projection_dim, cell_clip=cell_clip,
                                    projection_clip=projection_clip, dtype=dtype,
                                    name=f"{direction}_cell_{index}")
                layers.append(keras.layers.RNN(
                    cell, return_sequences=True, go_backwards=direction == "backward",
                    zero_output_for_mask=True, dtype=dtype, name=f"{direction}_lstm_{index}"))
        self.lstm_dropout = keras.layers.Dropout(dropout, dtype=dtype, name="lstm_dropout")

        # === Functional model ===
        inputs = {
            "token_ids": keras.Input(shape=(None,), dtype="int32", name="token_ids"),
            "character_ids": keras.Input(shape=(None, int(max_characters_per_token)),
                                         dtype="int32", name="character_ids"),
            "padding_mask": keras.Input(shape=(None,), dtype="int32", name="padding_mask"),
        }
        mask = ops.cast(inputs["padding_mask"], "bool")
        tokens = self.token_encoder(inputs["character_ids"])
        tokens = tokens * ops.cast(mask, tokens.dtype)[..., None]
        forward, backward = self._lstm_stacks(tokens, mask)
        layer_outputs = [ops.concatenate([tokens, tokens], axis=-1)]
        layer_outputs += [ops.concatenate([f, b], axis=-1) for f, b in zip(forward, backward)]
        forward_targets, backward_targets = neighbour_targets(inputs["token_ids"], mask)
        outputs = {"sequence_output": layer_outputs[-1],
                   "layer_outputs": ops.stack(layer_outputs, axis=1),
                   "forward_targets": forward_targets, "backward_targets": backward_targets}
        super().__init__(inputs=inputs, outputs=outputs, dtype=dtype, arguments=locals(),
                         **kwargs)

    def _lstm_stacks(self, tokens, mask) -> tuple:
        """The per-layer outputs of the forward and the backward LSTM stacks, each in
        sentence order, with the residual connection into every layer after the first."""
        stacks = []
        for layers, backward in ((self.forward_layers, False), (self.backward_layers, True)):
            hidden, outputs = tokens, []
            for index, layer in enumerate(layers):
                dropped = self.lstm_dropout(hidden)
                output = layer(dropped, mask=mask)
                if backward:
                    output = ops.flip(output, axis=1)
                hidden = output + dropped if index > 0 else output
                outputs.append(hidden)
            stacks.append(outputs)
        return tuple(stacks)

    @property
    def output_width(self) -> int:
        """Width of every layer in ``layer_outputs``: [forward; backward]."""
        return 2 * int(self.projection_dim)
