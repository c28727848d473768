"""GPT-2 as a left-to-right language model (Radford et al. 2019 §2)."""

import keras
import keras_nlp
import tensorflow as tf
from keras import ops

from lmfactory.models.task_losses import sum_over_replicas, with_regularization
from lmfactory.models.task_model import BackboneTask

CAUSAL_LM_INPUTS = ("token_ids", "padding_mask")


@keras.saving.register_keras_serializable(package="lmfactory")
class GPT2CausalLM(BackboneTask, keras.Model):
    """A `GPT2Backbone` with the tied output layer, trained on next-token prediction.

    §2: language modelling is estimating p(x) = prod_i p(s_i | s_1, ..., s_{i-1}); the
    objective is the negative log-likelihood of each token given its prefix. GPT-1 §3.1:
    P(u) = softmax(h_n W_e^T), the output projection is the transposed token embedding
    matrix W_e.

    Inputs (dict, int32 [batch, seq_len]): `token_ids`, `padding_mask`.
    Output: next-token logits [batch, seq_len, vocabulary_size].
    Targets for `fit` (CONTRACTS §3 `causal_lm`): y = the ids shifted by one [B, L],
        sample_weight [B, L] (0 on padding). `compute_loss` is the weighted mean NLL over
        positions (of the global batch under `tf.distribute`), so the model trains with
        `compile(optimizer=...)` and no `loss`.
    Metrics: `nll` (token-weighted mean NLL; perplexity = exp(nll)).

    `generate_ids` decodes from prompts with a `keras_nlp.samplers` sampler, using the
    backbone's key/value cache (see `GPT2Backbone.call_with_cache`).

    Args:
        backbone: a `GPT2Backbone`.
    """

    def __init__(self, backbone, **kwargs):
        # === Layers ===
        self.backbone = backbone

        # === Functional model ===
        inputs = {
            name: keras.Input(shape=(None,), dtype="int32", name=name)
            for name in CAUSAL_LM_INPUTS
        }
        hidden = backbone(inputs)["sequence_output"]
        logits = backbone.token_embedding(hidden, reverse=True)
        super().__init__(inputs=inputs, outputs=logits, **kwargs)

        # === Metrics ===
        self.nll_tracker = keras.metrics.Mean(name="nll")

        # Samplers are not layers and are not saved with the model: a plain dict, untracked.
        object.__setattr__(self, "_samplers", {})
        # Random samplers own a seed variable. A SavedModel whose function captures it must
        # reach it through tracked objects; a tf.Module is tracked by TensorFlow but is not
        # a Keras layer, so the seeds stay out of the model's Keras weights.
        self.sampler_state = tf.Module(name="sampler_state")
        self.sampler_state.seeds = []

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        logits = ops.cast(y_pred, "float32")
        nll = keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True)
        if sample_weight is None:
            weights = ops.ones(ops.shape(nll), dtype="float32")
        else:
            weights = ops.cast(sample_weight, "float32")
        # max(., 1e-9): a batch that is all padding contributes 0 instead of NaN.
        loss = ops.sum(weights * nll) / ops.maximum(sum_over_replicas(ops.sum(weights)), 1e-9)
        self.nll_tracker.update_state(nll, sample_weight=weights)
        return with_regularization(self, loss)

    def call_with_cache(self, token_ids, cache, cache_update_index):
        """One cached decoding step: (logits [B, n, V], hidden [B, n, H], cache)."""
        hidden, cache = self.backbone.call_with_cache(token_ids, cache, cache_update_index)
        logits = self.backbone.token_embedding(hidden, reverse=True)
        return logits, hidden, cache

    def get_sampler(self, sampler="greedy", **sampler_kwargs):
        """A `keras_nlp.samplers.Sampler` from an instance or a name ("greedy", "top_k",
        "top_p", "beam", "random", "contrastive") plus its kwargs (`k`, `p`, `num_beams`,
        `temperature`, `seed`, ...). Named samplers are cached on the model, so a
        `tf.function` that calls `generate_ids` creates a sampler's seed variable once."""
        if isinstance(sampler, str):
            key = (sampler, tuple(sorted(sampler_kwargs.items())))
            if key not in self._samplers:
                with tf.init_scope():  # create seed variables eagerly, even mid-trace
                    self._samplers[key] = keras_nlp.samplers.get(
                        {"class_name": sampler, "config": dict(sampler_kwargs)}
                    )
            sampler = self._samplers[key]
        elif sampler_kwargs:
            raise ValueError(f"Sampler kwargs {sorted(sampler_kwargs)} need a sampler name, "
                             f"got the instance {sampler!r}")
        tracked = {id(v) for v in self.sampler_state.seeds}
        for variable in getattr(sampler, "variables", []):
            if id(variable) not in tracked:
                self.sampler_state.seeds.append(variable)
        return sampler

    def generate_ids(
        self,
        prompt_token_ids,
        prompt_lengths=None,
        padding_mask=None,
        max_length=None,
        sampler="greedy",
        end_token_id=None,
        pad_token_id=None,
        **sampler_kwargs,
    ):
        """Continues each prompt up to `max_length` tokens, one token per step.

        The prompts first run through the network once to fill the key/value cache; every
        later step feeds only the newest token (`call_with_cache`), so no past position is
        recomputed. Built from `keras.ops` and the sampler's `while_loop`, it traces inside
        a `tf.function` (batch size and prompt length may be unknown there).

        Args:
            prompt_token_ids: int [batch, T] prompts, right-padded, T <= max_length.
            prompt_lengths: int [batch], the number of real tokens of each prompt (>= 1).
            padding_mask: bool/int [batch, T], alternative to `prompt_lengths`; if neither
                is given all T tokens are prompt.
            max_length: total length of the output (prompt + generated); defaults to the
                backbone's `max_sequence_length`.
            sampler: a `keras_nlp.samplers.Sampler` or its name (see `get_sampler`).
            end_token_id: stop a row once it generates this id; decoding ends when every
                row has.
            pad_token_id: fills positions after a row's end token (default `end_token_id`,
                or 0 without one).
            **sampler_kwargs: kwargs for a named sampler (`k`, `p`, `temperature`, ...).

        Returns:
            dict with `token_ids` int32 [batch, max_length] (prompt followed by the
            generated tokens) and `padding_mask` bool [batch, max_length] (True on the
            prompt and the generated tokens up to and including the end token).
        """
        sampler = self.get_sampler(sampler, **sampler_kwargs)
        if max_length is None:
            max_length = self.backbone.max_sequence_length
        if isinstance(max_length, int) and max_length > self.backbone.max_sequence_length:
            raise ValueError(f"max_length={max_length} exceeds the backbone's "
                             f"max_sequence_length={self.backbone.max_sequence_length}")
        if pad_token_id is None:
            pad_token_id = 0 if end_token_id is None else end_token_id

        token_ids = ops.cast(prompt_token_ids, "int32")
        batch_size, prompt_length = ops.shape(token_ids)[0], ops.shape(token_ids)[1]
        if isinstance(prompt_length, int) and isinstance(max_length, int) \
                and prompt_length > max_length:
            raise ValueError(f"Prompts of length {prompt_length} exceed "
                             f"max_length={max_length}")
        if padding_mask is None:
            if prompt_lengths is None:
                padding_mask = ops.ones_like(token_ids, dtype="bool")
            else:
                positions = ops.arange(prompt_length, dtype="int32")
                lengths = ops.cast(prompt_lengths, "int32")
                padding_mask = positions[None, :] < lengths[:, None]
        padding_mask = ops.cast(padding_mask, "bool")

        # Right-pad to the output length. Positions that are not prompt hold a filler that
        # is never the end token, so the sampler does not mistake padding for a stop.
        extra = max_length - prompt_length
        filler = 1 if end_token_id == 0 else 0
        token_ids = ops.concatenate(
            [token_ids, ops.zeros((batch_size, extra), dtype="int32")], axis=1
        )
        padding_mask = ops.concatenate(
            [padding_mask, ops.zeros((batch_size, extra), dtype="bool")], axis=1
        )
        token_ids = ops.where(padding_mask, token_ids, filler)

        # Fill the cache with one pass over the padded prompts. Keys/values at positions
        # past a row's prompt are overwritten as those positions are generated.
        cache = self.backbone.initial_cache(batch_size, max_length)
        _, hidden, cache = self.call_with_cache(token_ids, cache, 0)
        # Decoding starts at the first position that is not prompt in some row; rows with
        # longer prompts keep their prompt tokens there (the sampler honours `mask`).
        index = ops.min(ops.sum(ops.cast(padding_mask, "int32"), axis=-1))

        def next(prompt, cache, index):
            # Feed the token at index - 1 to predict the one at index.
            step_ids = ops.slice(prompt, [0, index - 1], [ops.shape(prompt)[0], 1])
            logits, hidden, cache = self.call_with_cache(step_ids, cache, index - 1)
            return ops.squeeze(logits, axis=1), ops.squeeze(hidden, axis=1), cache

        token_ids = sampler(
            next=next,
            prompt=token_ids,
            cache=cache,
            index=index,
            mask=padding_mask,
            stop_token_ids=None if end_token_id is None else [end_token_id],
            hidden_states=hidden,
            model=self,
        )

        if end_token_id is None:
            output_mask = ops.ones_like(token_ids, dtype="bool")
        else:
            is_end = ops.logical_and(ops.equal(token_ids, end_token_id),
                                     ops.logical_not(padding_mask))
            is_end = ops.cast(is_end, "int32")
            ends_before = ops.cumsum(is_end, axis=-1) - is_end
            output_mask = ops.equal(ends_before, 0)
        token_ids = ops.where(output_mask, token_ids, pad_token_id)
        return {"token_ids": token_ids, "padding_mask": output_mask}
