"""Left-to-right decoding for every causal language model, with keras-nlp's samplers over a
key/value cache (`models/decoder_cache.py`).

GPT-2 §2 (Radford et al. 2019): a language model factorises p(x) = prod_i p(s_i | s_<i), so
text is produced one token at a time, each drawn from the model's distribution given the
prefix. How it is drawn is the sampler's business: greedy (argmax), beam search, top-k
(GPT-2 §3 samples with k = 40 for its qualitative results), nucleus / top-p (Holtzman et al.
2020) or the full distribution, each optionally sharpened or flattened by a temperature.
These are `keras_nlp.samplers`; this module only feeds them.

`CausalLMGeneration` is a mixin for a causal LM task model (a `keras.Model`). The host
provides:

* ``call_with_cache(token_ids, cache, cache_update_index) -> (logits, hidden, cache)``:
  logits [B, n, V] and hidden states [B, n, H] of the tokens at positions
  ``cache_update_index, ...``, reusing and updating the cache;
* ``backbone.initial_cache(batch_size, max_length)``: the zero cache;
* ``backbone.max_sequence_length``.
"""

import keras_nlp
import tensorflow as tf
from keras import ops

SAMPLER_NAMES = ("greedy", "top_k", "top_p", "beam", "random", "contrastive")


class CausalLMGeneration:
    """Mixin: `get_sampler` and `generate_ids` for a causal LM with a key/value cache.

    Put it first in the bases (``class GPT2CausalLM(CausalLMGeneration, BackboneTask,
    keras.Model)``); it has no constructor. Named samplers are kept on the model (an
    untracked dict), and the seed variables of random samplers in ``self.sampler_state``
    (a `tf.Module`: tracked by TensorFlow, so a SavedModel whose function uses a sampler
    reaches them, but not a Keras layer, so they stay out of the model's weights). A host
    may call `_generation_state()` in its constructor to create these up front; otherwise
    the first `get_sampler` does.
    """

    def _generation_state(self):
        """The (named samplers dict, seed-tracking `tf.Module`) of this model."""
        if "_samplers" not in self.__dict__:
            # Samplers are not layers and are not saved with the model: untracked.
            object.__setattr__(self, "_samplers", {})
        if getattr(self, "sampler_state", None) is None:
            self.sampler_state = tf.Module(name="sampler_state")
            self.sampler_state.seeds = []
        return self._samplers, self.sampler_state

    def get_sampler(self, sampler="greedy", **sampler_kwargs):
        """A `keras_nlp.samplers.Sampler` from an instance or a name ("greedy", "top_k",
        "top_p", "beam", "random", "contrastive") plus its kwargs (`k`, `p`, `num_beams`,
        `temperature`, `seed`, ...). Named samplers are cached on the model, so a
        `tf.function` that calls `generate_ids` creates a sampler's seed variable once.
        The seed variables of every sampler used (named or given) are tracked in
        `sampler_state`."""
        samplers, state = self._generation_state()
        if isinstance(sampler, str):
            if sampler not in SAMPLER_NAMES:
                raise ValueError(f"Unknown sampler {sampler!r}; expected one of "
                                 f"{list(SAMPLER_NAMES)} or a keras_nlp.samplers.Sampler")
            key = (sampler, tuple(sorted(sampler_kwargs.items())))
            if key not in samplers:
                with tf.init_scope():  # create seed variables eagerly, even mid-trace
                    samplers[key] = keras_nlp.samplers.get(
                        {"class_name": sampler, "config": dict(sampler_kwargs)}
                    )
            sampler = samplers[key]
        elif sampler_kwargs:
            raise ValueError(f"Sampler kwargs {sorted(sampler_kwargs)} need a sampler name, "
                             f"got the instance {sampler!r}")
        tracked = {id(v) for v in state.seeds}
        for variable in getattr(sampler, "variables", []):
            if id(variable) not in tracked:
                state.seeds.append(variable)
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
        recomputed and a step costs the same however long the text already is (up to the
        attention over the cache). Built from `keras.ops` and the sampler's `while_loop`,
        it traces inside a `tf.function` (batch size, prompt length and `max_length` may be
        tensors there).

        Args:
            prompt_token_ids: int [batch, T] prompts, right-padded, T <= max_length.
            prompt_lengths: int [batch], the number of real tokens of each prompt (>= 1).
            padding_mask: bool/int [batch, T], alternative to `prompt_lengths` (True on
                prompt tokens, a prefix of each row); if neither is given all T tokens are
                prompt.
            max_length: total length of the output (prompt + generated); defaults to the
                backbone's `max_sequence_length`. May be a scalar tensor, which the caller
                must keep within `max_sequence_length`.
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
        limit = self.backbone.max_sequence_length
        if max_length is None:
            max_length = limit
        if isinstance(max_length, int) and max_length > limit:
            raise ValueError(f"max_length={max_length} exceeds the backbone's "
                             f"max_sequence_length={limit}")
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

        # Fill the cache with one pass over the prompts' T columns (not all max_length:
        # the positions after them are computed as they are generated). Keys/values at
        # positions past a row's own prompt are overwritten as those positions are
        # generated, before any later position attends to them (causal mask).
        cache = self.backbone.initial_cache(batch_size, max_length)
        _, hidden, cache = self.call_with_cache(token_ids[:, :prompt_length], cache, 0)
        # Hidden states of every output position (the contrastive sampler reads those
        # before the decoding index); zeros where nothing is computed yet.
        hidden = ops.pad(hidden, [[0, 0], [0, extra], [0, 0]])
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


__all__ = ["CausalLMGeneration", "SAMPLER_NAMES"]
