"""Beam search with length normalisation (Wu et al. 2016, "Google's Neural Machine
Translation System", §7): hypotheses are ranked by log P(Y|X) / lp(Y) with
lp(Y) = ((5 + |Y|) / 6)^alpha, so that a sum of log-probabilities, which only falls as a
hypothesis grows, does not favour short translations.

keras-nlp's `BeamSampler` lets a beam that has emitted the end token keep growing (and
collecting log-probabilities) and ranks by the raw sum; this sampler is written here for
what it lacks: a finished beam is frozen (it can only repeat the end token, at probability
1, keeping its score), and the final choice among the beams divides each score by lp of
its length (the generated tokens up to and including the end token). With ``alpha = 0``
it is plain beam search over finished hypotheses. It plugs into
`CausalLMGeneration.generate_ids` like any keras-nlp sampler (``sampler=`` an instance).
"""

import keras
import keras_nlp
from keras import ops

_IMPOSSIBLE = -1e9


def length_penalty(lengths, alpha):
    """lp(Y) = ((5 + |Y|) / 6)^alpha (Wu et al. 2016 eq. 14) for int ``lengths``."""
    return ops.power((5.0 + ops.cast(lengths, "float32")) / 6.0, alpha)


def hypothesis_lengths(token_ids, prompt_mask, stop_token_id):
    """The number of generated tokens of each row, up to and including its first stop
    token (all generated tokens when it has none)."""
    generated = ops.logical_not(prompt_mask)
    is_stop = ops.cast(ops.logical_and(ops.equal(token_ids, stop_token_id), generated),
                       "int32")
    before_stop = ops.equal(ops.cumsum(is_stop, axis=-1) - is_stop, 0)
    return ops.sum(ops.cast(ops.logical_and(generated, before_stop), "int32"), axis=-1)


def _same_shape(new, old):
    """``new`` with the static shape of ``old`` (a while-loop variable keeps its shape)."""
    if keras.config.backend() == "tensorflow":
        import tensorflow as tf

        return tf.ensure_shape(new, old.shape)
    return new


class LengthNormalizedBeamSampler(keras_nlp.samplers.Sampler):
    """Beam search over ``num_beams`` hypotheses, finished ones frozen, the best chosen by
    length-normalised log-probability.

    Args:
        num_beams: the beam width.
        alpha: the length-penalty exponent (0: no normalisation; Wu et al. use 0.6-0.7,
            1 divides by about the length).
    """

    def __init__(self, num_beams=5, alpha=1.0, **kwargs):
        super().__init__(**kwargs)
        self.num_beams = num_beams
        self.alpha = alpha

    def __call__(self, next, prompt, cache=None, index=0, mask=None, stop_token_ids=None,
                 hidden_states=None, model=None):
        if not stop_token_ids or len(stop_token_ids) != 1:
            raise ValueError("LengthNormalizedBeamSampler needs exactly one end token "
                             "(generate_ids(end_token_id=...))")
        stop = stop_token_ids[0]
        beams = self.num_beams
        batch_size, max_length = ops.shape(prompt)[0], ops.shape(prompt)[1]
        index = ops.cast(index, "int32")
        mask = ops.zeros_like(prompt, dtype="bool") if mask is None \
            else ops.cast(mask, "bool")

        def repeat(x):
            return ops.repeat(x, beams, axis=0)

        def split(x):  # [B * K, ...] -> [B, K, ...]
            return ops.reshape(x, (batch_size, beams) + tuple(ops.shape(x)[1:]))

        def merge(x):  # [B, K, ...] -> [B * K, ...]
            return ops.reshape(x, (batch_size * beams,) + tuple(ops.shape(x)[2:]))

        has_cache = cache is not None
        prompt, mask = repeat(prompt), repeat(mask)
        cache = keras.tree.map_structure(repeat, cache) if has_cache else ()
        scores = merge(ops.repeat(ops.array([[0.0] + [_IMPOSSIBLE] * (beams - 1)],
                                            dtype="float32"), batch_size, axis=0))

        def finished(prompt, mask):
            ended = ops.logical_and(ops.equal(prompt, stop), ops.logical_not(mask))
            return ops.any(ended, axis=-1)

        def cond(prompt, cache, index, mask, scores):
            return ops.logical_not(ops.all(finished(prompt, mask)))

        def body(prompt, cache, index, mask, scores):
            logits, _, cache = next(prompt, cache, index)
            vocabulary_size = ops.shape(logits)[-1]
            log_probs = ops.log(ops.maximum(self.compute_probabilities(logits), 1e-30))
            frozen = ops.where(ops.arange(vocabulary_size) == stop, 0.0, _IMPOSSIBLE)
            log_probs = ops.where(finished(prompt, mask)[:, None], frozen[None, :], log_probs)
            candidates = ops.reshape(log_probs + scores[:, None], (batch_size, -1))
            best, flat = ops.top_k(candidates, k=beams, sorted=False)
            parents = flat // vocabulary_size

            def follow(x):
                x = split(x)
                indices = parents
                for axis in range(2, len(x.shape)):
                    indices = ops.expand_dims(indices, axis=axis)
                return merge(ops.take_along_axis(x, indices, axis=1))

            prompt = follow(prompt)
            cache = keras.tree.map_structure(follow, cache) if has_cache else cache
            token = ops.cast(merge(flat % vocabulary_size), prompt.dtype)
            token = ops.where(mask[:, index], prompt[:, index], token)
            prompt = ops.slice_update(prompt, [0, index], token[:, None])
            return prompt, cache, index + 1, mask, _same_shape(merge(best), scores)

        prompt, _, _, _, scores = self.run_loop(
            cond=cond, body=body, loop_vars=(prompt, cache, index, mask, scores),
            maximum_iterations=(max_length - index), model=model)
        lengths = hypothesis_lengths(prompt, mask, stop)
        normalised = split(scores / length_penalty(ops.maximum(lengths, 1), self.alpha))
        best = ops.argmax(normalised, axis=-1)[:, None, None]
        return ops.squeeze(ops.take_along_axis(split(prompt), best, axis=1), axis=1)

    def get_config(self):
        config = super().get_config()
        config.update({"num_beams": self.num_beams, "alpha": self.alpha})
        return config
