"""Left-to-right decoding for every model that generates token by token, with keras-nlp's
samplers over a decoding state: the one generation loop (`CausalLMGeneration.generate_ids`)
and the decoding-state protocol it drives every model through.

GPT-2 §2 (Radford et al. 2019): a language model factorises p(x) = prod_i p(s_i | s_<i), so
text is produced one token at a time, each drawn from the model's distribution given the
prefix. How it is drawn is the sampler's business: greedy (argmax), beam search, top-k
(GPT-2 §3 samples with k = 40 for its qualitative results), nucleus / top-p (Holtzman et al.
2020) or the full distribution, each optionally sharpened or flattened by a temperature.
These are `keras_nlp.samplers`; this module only feeds them.

The decoding-state protocol
---------------------------
What a model remembers of the positions it has run, so that a step runs only the newest
token, is its decoding state. A backbone (or a decoder task model) provides:

* ``initial_state(batch_size, max_length, **context) -> state``: the state before the first
  position, for ``batch_size`` rows of at most ``max_length`` positions (both may be scalar
  tensors inside a `tf.function`). ``context`` is what the state needs from outside the
  decoded sequence, e.g. an encoder-decoder's encoder outputs and their padding mask
  (`generate_ids` passes its ``state_context``). It creates no weights.
* ``call_with_state(token_ids, state, index)``: runs ``token_ids`` int [batch, n], the
  tokens at positions ``index, ..., index + n - 1`` (``index`` an int scalar, possibly a
  tensor: the position of ``token_ids[:, 0]``), and returns ``(hidden, state)`` on a
  backbone, ``(logits, hidden, state)`` on a task model: hidden [batch, n, H], logits
  [batch, n, V] and the updated state. The loop calls it once with the prompts (index 0,
  n = the prompt width), then with n = 1 per step.

A state is any nested structure of tensors (dicts, tuples and lists, nested freely; a
single tensor is one too), under these rules (`check_state` tests the first two):

1. Batch axis first on every leaf, which is a tensor of rank >= 1 (no None, no Python
   numbers). The samplers carry the state through `keras.tree.map_structure`: beam search
   repeats every leaf ``num_beams`` times along axis 0 and, after each step, reorders
   axis 0 to follow the surviving beams; the contrastive sampler does the same with its k
   candidates. Something shared by all rows stays on the model, not in the state.
2. Fixed structure, shapes and dtypes: ``call_with_state`` returns the structure it was given
   (same containers: a tuple stays a tuple), every leaf with its shape and dtype, since the
   sampler's `while_loop` carries the state as loop variables. Buffers are therefore sized
   by ``max_length``, not by the number of positions run so far.
3. Position-addressed: what ``call_with_state(token_ids, state, index)`` computes depends on
   the state only through its static leaves (rule 4) and what positions < ``index`` left in
   it, and the call rewrites what positions ``index, ..., index + n - 1`` leave. The loop relies on this: its prompt pass
   runs all T prompt columns (padding included in rows with shorter prompts), decoding
   starts at the shortest prompt's length and every step feeds the token at ``index - 1``,
   so positions are run again and must overwrite what they left before; the contrastive
   sampler also runs a position again. A state that naturally holds only "the latest"
   values keeps them per position.
4. Static leaves: a leaf no step changes (encoder outputs and mask, cross-attention keys
   and values computed once in ``initial_state``) is returned as it came in. It still
   follows rule 1 (beam search repeats and reorders it with the rest; the beams of one row
   share its values).

How architectures map onto it:

* Transformer decoder (GPT-2, GPT-1, GPT-3 with its banded layers, the character
  Transformer): per block a pair of key and value buffers [batch, num_heads, max_length,
  head_dim] (a tuple of pairs, `models/decoder_cache.py`); a call writes the keys/values of
  positions ``index, ...`` and each position attends over those up to itself.
* LSTM (ELMo, AWD-LSTM, an RNN seq2seq decoder): per layer the (h, c) after each position,
  e.g. a list of (h, c) pairs, h and c [batch, max_length + 1, units], slot 0 the state
  before the first position (zeros, or the encoder's final state given as context) and slot
  p + 1 the state after position p; a call reads slot ``index`` and writes slots
  ``index + 1, ..., index + n``. tests/test_generation.py decodes such a model.
* Transformer-XL / XLNet: the memory each layer attends to, hidden states [batch,
  num_layers, memory_length + max_length, hidden]: the previous segment's memory (from
  context), then one slot per decoded position, written at ``memory_length + index, ...``;
  relative positions follow from ``index``.
* Encoder-decoder (Transformer, T5): a dict of the decoder's self-attention key/value
  buffers ``"self_attention"`` (per layer, as above, written per position), and static
  leaves set up in ``initial_state`` from the encoder outputs and mask passed as context:
  ``"cross_attention"`` (the keys/values of the encoder outputs, computed once: [batch, 2,
  source_length, num_heads, head_dim] per layer for the Transformer, one [batch,
  num_layers, 2, source_length, num_heads, head_dim] tensor for T5), ``"encoder_outputs"`` [batch, source_length, hidden] and
  ``"encoder_padding_mask"`` [batch, source_length].

`CausalLMGeneration` is a mixin for a task model (a `keras.Model`) that decodes this way.
The host provides:

* ``call_with_state(token_ids, state, index) -> (logits, hidden, state)``;
* ``initial_state(batch_size, max_length, **context)``: inherited from the mixin as the
  backbone's ``initial_state``, overridden by a host whose state is more than that;
* ``backbone.max_sequence_length``, the longest output `generate_ids` allows.
"""

import keras
import keras_nlp
from keras import ops

from lmfactory.models import backend
from lmfactory.models.backend import tf

SAMPLER_NAMES = ("greedy", "top_k", "top_p", "beam", "random", "contrastive")


def _path_name(path):
    return "state" + "".join(f"[{key!r}]" for key in path)


def _static_shape(leaf):
    """The shape of ``leaf`` as a tuple (None for unknown dimensions), or None when it has
    no shape or (while tracing) an unknown rank."""
    shape = getattr(leaf, "shape", None)
    if shape is None or getattr(shape, "rank", 0) is None:
        return None
    return tuple(shape)


def check_state(state, batch_size=None, previous=None):
    """Raises unless ``state`` follows rules 1 and 2 of the decoding-state protocol (module
    docstring) as far as shapes known while tracing tell.

    Args:
        state: a decoding state (a nested structure of tensors).
        batch_size: the number of rows; checked against every leaf's static first
            dimension when it is a Python int.
        previous: the state that ``state`` was computed from; ``state`` must then have its
            structure and every leaf its dtype and (known) shape.

    Raises:
        TypeError: a leaf is not a tensor of rank >= 1, or the structure or a dtype changed.
        ValueError: a leaf's batch axis or shape does not match.
    """
    leaves = keras.tree.flatten_with_path(state)
    for path, leaf in leaves:
        if not hasattr(leaf, "shape") or not hasattr(leaf, "dtype") \
                or _static_shape(leaf) == ():
            raise TypeError(f"Decoding state leaf {_path_name(path)} must be a tensor with "
                            f"the batch axis first, got {leaf!r}")
        shape = _static_shape(leaf)
        if isinstance(batch_size, int) and shape and shape[0] is not None \
                and shape[0] != batch_size:
            raise ValueError(f"Decoding state leaf {_path_name(path)} has shape {shape}; "
                             f"its first axis must be the batch ({batch_size})")
    if previous is None:
        return
    try:
        keras.tree.assert_same_structure(previous, state)
    except (TypeError, ValueError) as error:
        raise TypeError(f"call_with_state must return the structure of the state it was "
                        f"given: {error}") from None
    for (path, before), (_, after) in zip(keras.tree.flatten_with_path(previous), leaves):
        if keras.backend.standardize_dtype(before.dtype) != \
                keras.backend.standardize_dtype(after.dtype):
            raise TypeError(f"call_with_state changed the dtype of {_path_name(path)} from "
                            f"{before.dtype} to {after.dtype}")
        before, after = _static_shape(before), _static_shape(after)
        if before is None or after is None:
            continue
        compatible = len(before) == len(after) and all(
            a is None or b is None or a == b for a, b in zip(before, after))
        if not compatible:
            raise ValueError(f"call_with_state changed the shape of {_path_name(path)} from "
                             f"{before} to {after}")


def _new_sampler(name, sampler_kwargs):
    """keras-nlp's sampler ``name``; on TensorFlow its seed variable is created eagerly,
    even mid-trace (`tf.init_scope`)."""
    config = {"class_name": name, "config": dict(sampler_kwargs)}
    if not backend.is_tensorflow():
        return keras_nlp.samplers.get(config)
    with tf.init_scope():
        return keras_nlp.samplers.get(config)


class CausalLMGeneration:
    """Mixin: `get_sampler` and `generate_ids` for a model that decodes through the
    decoding-state protocol (module docstring), and `initial_state` from its backbone.

    Put it first in the bases (``class GPT2CausalLM(CausalLMGeneration, Task)``); it has no constructor. Named samplers are kept on the model (an
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
        if getattr(self, "sampler_state", None) is None and backend.is_tensorflow():
            self.sampler_state = tf.Module(name="sampler_state")
            self.sampler_state.seeds = []
        # Off TensorFlow there is no SavedModel to reach the seeds: nothing tracks them.
        return self._samplers, getattr(self, "sampler_state", None)

    def initial_state(self, batch_size, max_length, **context):
        """The decoding state before the first position: the backbone's
        ``initial_state(batch_size, max_length, **context)``. A host whose state holds more
        than its backbone's (e.g. cross-attention keys/values it computes from the encoder
        outputs in ``context``) overrides this."""
        return self.backbone.initial_state(batch_size, max_length, **context)

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
                samplers[key] = _new_sampler(sampler, sampler_kwargs)
            sampler = samplers[key]
        elif sampler_kwargs:
            raise ValueError(f"Sampler kwargs {sorted(sampler_kwargs)} need a sampler name, "
                             f"got the instance {sampler!r}")
        if state is not None:
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
        state_context=None,
        **sampler_kwargs,
    ):
        """Continues each prompt up to `max_length` tokens, one token per step.

        The prompts first run through the network once to fill the decoding state
        (`initial_state`, then `call_with_state` at index 0; see the protocol in the module
        docstring); every later step feeds only the newest token (`call_with_state`), so no
        past position is recomputed (for a Transformer a step costs the same however long
        the text already is, up to the attention over the key/value cache). Built from
        `keras.ops` and the sampler's `while_loop`, it traces inside a `tf.function` (batch
        size, prompt length and `max_length` may be tensors there).

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
            state_context: optional dict of keyword arguments for `initial_state` (e.g. an
                encoder-decoder's encoder outputs and mask), tensors with the batch axis
                first.
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

        # Fill the state with one pass over the prompts' T columns (not all max_length:
        # the positions after them are computed as they are generated). What positions
        # past a row's own prompt leave in the state is overwritten as those positions are
        # generated, before any later position reads it (protocol rule 3).
        initial = self.initial_state(batch_size, max_length, **(state_context or {}))
        check_state(initial, batch_size)
        _, hidden, state = self.call_with_state(token_ids[:, :prompt_length], initial, 0)
        check_state(state, batch_size, previous=initial)
        # Hidden states of every output position (the contrastive sampler reads those
        # before the decoding index); zeros where nothing is computed yet.
        hidden = ops.pad(hidden, [[0, 0], [0, extra], [0, 0]])
        # Decoding starts at the first position that is not prompt in some row; rows with
        # longer prompts keep their prompt tokens there (the sampler honours `mask`).
        index = ops.min(ops.sum(ops.cast(padding_mask, "int32"), axis=-1))

        def next(prompt, state, index):
            # Feed the token at index - 1 to predict the one at index. The samplers call
            # the loop variable `cache`; it is the decoding state, any nested structure.
            step_ids = ops.slice(prompt, [0, index - 1], [ops.shape(prompt)[0], 1])
            logits, hidden, state = self.call_with_state(step_ids, state, index - 1)
            return ops.squeeze(logits, axis=1), ops.squeeze(hidden, axis=1), state

        token_ids = sampler(
            next=next,
            prompt=token_ids,
            cache=state,
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


__all__ = ["CausalLMGeneration", "SAMPLER_NAMES", "check_state"]
