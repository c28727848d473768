"""The SavedModel of a causal language model: raw-text prompts in, generated text out.

Two signatures (TF Serving signatures have no optional inputs, so the defaults get their
own):

``serving_default(prompt, max_length, sampler, temperature, k, p)``
    prompt: string [batch], the prompts (UTF-8, possibly empty).
    max_length: int32 scalar, the length of each output in tokens, the prompt included
        (and the start token, see below); clamped to the model's `max_sequence_length`;
        at least 2.
    sampler: string scalar, one of "greedy", "top_k", "top_p", "beam", "random"
        (keras-nlp's `GreedySampler`, `TopKSampler`, `TopPSampler`, `BeamSampler`,
        `RandomSampler`; the beam width is the recipe's `num_beams`).
    temperature: float32 scalar > 0, divides the logits before the softmax (every sampler;
        greedy decoding does not depend on it).
    k: int32 scalar >= 1, top-k's k (values above the vocabulary size act as the whole
        vocabulary); read only by "top_k".
    p: float32 scalar in (0, 1], top-p's nucleus mass; read only by "top_p".

``generate_default(prompt)``
    The same with the recipe's ``serving.generation`` block as the settings
    (``max_length``, ``sampler``, ``temperature``, ``k``, ``p``, ``num_beams``, ``seed``;
    `generation_settings` fills and checks them).

Both return ``generated_text`` (string [batch]: the prompt followed by its continuation,
end-of-text tokens removed) and ``num_generated_tokens`` (int32 [batch]: the tokens decoded
after the prompt, the end-of-text token included when one was generated).

Every prompt is prefixed with the end-of-text token (GPT-2's document separator, so the
model sees a document start and an empty prompt is valid); a prompt longer than
``max_length - 2`` tokens keeps its last ``max_length - 2`` tokens, so that at least one
token is generated. A row stops at its first generated end-of-text token; decoding ends
when every row has stopped or is ``max_length`` tokens long. Decoding runs through the
model's decoding state (`CausalLMGeneration.generate_ids` and its decoding-state protocol,
models/generation.py; a Transformer's is its key/value cache).

A request with bad inputs fails with an InvalidArgumentError whose message names the input
(``serving_default: k must be >= 1``).
"""

from __future__ import annotations

import contextlib
import functools
import logging

import keras_nlp
import tensorflow as tf

from lmfactory.models import saved_model
from lmfactory.models.tokenizers import load_tokenizer, read_tokenizer_config

SERVING_SIGNATURE = "serving_default"
DEFAULT_SIGNATURE = "generate_default"
# The sampler names serving_default accepts.
SAMPLERS = ("greedy", "top_k", "top_p", "beam", "random")
# The samplers that draw one token at a time (`RequestSampler`'s rules, in rule order); beam
# search is the other decoding loop.
TOKEN_RULES = tuple(name for name in SAMPLERS if name != "beam")
# What a recipe's serving.generation block may set, and the values of the keys it leaves out.
GENERATION_DEFAULTS = {"max_length": 64, "sampler": "greedy", "temperature": 1.0, "k": 10,
                       "p": 0.9, "num_beams": 4, "seed": None}


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def generation_settings(generation: dict | None) -> dict:
    """The recipe's ``serving.generation`` block with `GENERATION_DEFAULTS` filled in and
    every value checked (a ValueError naming the key otherwise)."""
    generation = dict(generation or {})
    unknown = sorted(set(generation) - set(GENERATION_DEFAULTS))
    if unknown:
        raise ValueError(f"serving.generation: unknown key(s) {unknown}; expected some of "
                         f"{sorted(GENERATION_DEFAULTS)}")
    settings = {**GENERATION_DEFAULTS, **generation}

    def fail(key, expected):
        raise ValueError(f"serving.generation.{key}: must be {expected}, got "
                         f"{settings[key]!r}")

    if settings["sampler"] not in SAMPLERS:
        fail("sampler", f"one of {list(SAMPLERS)}")
    if not _is_int(settings["max_length"]) or settings["max_length"] < 2:
        fail("max_length", "an integer >= 2")
    if not _is_int(settings["k"]) or settings["k"] < 1:
        fail("k", "an integer >= 1")
    if not _is_int(settings["num_beams"]) or settings["num_beams"] < 1:
        fail("num_beams", "an integer >= 1")
    for key, high in (("p", 1.0), ("temperature", None)):
        value = settings[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0 \
                or (high is not None and value > high):
            fail(key, "a number in (0, 1]" if high else "a number > 0")
        settings[key] = float(value)
    if settings["seed"] is not None and not _is_int(settings["seed"]):
        fail("seed", "an integer or null")
    return settings


def _scalar(signature: str, name: str, value, dtype):
    """``value`` as a scalar of ``dtype``; a request with another rank fails, naming it."""
    check = tf.debugging.assert_rank(
        value, 0, message=f"{signature}: {name} must be a scalar")
    with tf.control_dependencies([check]):
        return tf.reshape(tf.cast(value, dtype), [])


def _prompt_batch(signature: str, prompt):
    """``prompt`` as a 1-D batch; a request of another rank fails, naming it."""
    check = tf.debugging.assert_rank(
        prompt, 1, message=f"{signature}: prompt must be a 1-D batch of UTF-8 strings")
    with tf.control_dependencies([check]):
        # reshape, not ensure_shape: a shape error at graph instantiation would pre-empt
        # the message above.
        return tf.reshape(prompt, [-1])


@contextlib.contextmanager
def _sampler_settings(sampler, **values):
    """Sets a keras-nlp sampler's hyper-parameters (`temperature`, `k`, `p`: attributes its
    methods read while being traced) to ``values``, tensors included, and restores them
    afterwards, so one sampler object (and its seed variable) serves every request."""
    saved = {name: getattr(sampler, name) for name in values}
    for name, value in values.items():
        setattr(sampler, name, value)
    try:
        yield sampler
    finally:
        for name, value in saved.items():
            setattr(sampler, name, value)


class RequestSampler(keras_nlp.samplers.Sampler):
    """keras-nlp's token-at-a-time samplers behind one decoding loop, the rule picked per
    request.

    Greedy, top-k, top-p and random sampling differ only in `get_next_token`; this sampler
    runs keras-nlp's loop once and draws each token with ``rules[rule]``, ``rule`` being an
    int32 tensor (a `tf.switch_case`) or a Python int (that rule alone). A SavedModel then
    holds the model's decoding loop once for the four rules instead of once per rule, which
    is what makes exporting and loading a generator slow. Written here because keras-nlp
    has no sampler whose rule is an input; beam search keeps its own loop (it carries
    ``num_beams`` hypotheses per row).

    Args:
        rules: ``{name: keras_nlp.samplers.Sampler}``, the samplers whose `get_next_token`
            this one chooses between, in `rule` order. Their `temperature` is not read:
            this sampler's scales the logits for every rule.
    """

    def __init__(self, rules: dict, temperature=1.0):
        super().__init__(temperature=temperature)
        self.names = tuple(rules)
        self.rules = tuple(rules.values())
        self.rule = 0

    @property
    def variables(self):
        return [variable for rule in self.rules for variable in rule.variables]

    def get_next_token(self, probabilities):
        def draw(rule):
            return tf.cast(rule.get_next_token(probabilities), tf.int32)

        if isinstance(self.rule, int):
            return draw(self.rules[self.rule])
        return tf.switch_case(self.rule, [functools.partial(draw, rule)
                                          for rule in self.rules])


class GeneratorServing(tf.Module):
    """The two generation signatures of a causal LM (see the module docstring).

    Args:
        tokenizer: the keras-nlp tokenizer of the model's vocabulary.
        causal_lm: a task model with `generate_ids` (`CausalLMGeneration`).
        generation: the recipe's ``serving.generation`` block (`generation_settings`).
        end_of_text: the end-of-text token (start of every prompt, stop token).
    """

    def __init__(self, tokenizer, causal_lm, generation: dict | None, end_of_text: str):
        super().__init__(name="generator_serving")
        self.tokenizer = tokenizer
        self.causal_lm = causal_lm
        self.settings = generation_settings(generation)
        self.end_token_id = int(tokenizer.token_to_id(end_of_text))
        backbone = causal_lm.backbone
        self.max_sequence_length = int(backbone.max_sequence_length)
        self.vocabulary_size = int(backbone.vocabulary_size)
        seed = self.settings["seed"]
        # The samplers are built once; their seed variables are created eagerly and tracked
        # by the model's `sampler_state` when `generate_ids` uses them.
        with tf.init_scope():
            token_sampler = RequestSampler({
                "greedy": keras_nlp.samplers.GreedySampler(),
                "top_k": keras_nlp.samplers.TopKSampler(k=self.settings["k"], seed=seed),
                "top_p": keras_nlp.samplers.TopPSampler(p=self.settings["p"], seed=seed),
                "random": keras_nlp.samplers.RandomSampler(seed=seed),
            })
            beam_sampler = keras_nlp.samplers.BeamSampler(
                num_beams=self.settings["num_beams"])
        assert token_sampler.names == TOKEN_RULES
        # Plain Python objects, kept out of TensorFlow's tracking.
        object.__setattr__(self, "_token_sampler", token_sampler)
        object.__setattr__(self, "_beam_sampler", beam_sampler)

    # ------------------------------------------------------------------ decoding

    def _generate_ids(self, sampler, token_ids, lengths, max_length):
        output = self.causal_lm.generate_ids(
            token_ids, prompt_lengths=lengths, max_length=max_length, sampler=sampler,
            end_token_id=self.end_token_id)
        return output["token_ids"], output["padding_mask"]

    def _decode_tokens(self, rule, token_ids, lengths, max_length, temperature, k, p):
        """`generate_ids` with the token rule ``rule`` (an index into `TOKEN_RULES`, int or
        int32 tensor) and these hyper-parameters: one decoding loop for every rule."""
        sampler = self._token_sampler
        top_k = sampler.rules[TOKEN_RULES.index("top_k")]
        top_p = sampler.rules[TOKEN_RULES.index("top_p")]
        with _sampler_settings(sampler, rule=rule, temperature=temperature), \
                _sampler_settings(top_k, k=tf.minimum(k, self.vocabulary_size)), \
                _sampler_settings(top_p, p=p):
            return self._generate_ids(sampler, token_ids, lengths, max_length)

    def _decode_beam(self, token_ids, lengths, max_length, temperature):
        with _sampler_settings(self._beam_sampler, temperature=temperature) as sampler:
            return self._generate_ids(sampler, token_ids, lengths, max_length)

    def generate(self, signature, prompt, max_length, sampler, temperature, k, p):
        """The traced body of the signatures. ``sampler`` is a Python name (that sampler's
        loop alone) or a string tensor (beam search or `RequestSampler`'s loop, by a
        `tf.cond`)."""
        prompt = _prompt_batch(signature, prompt)
        max_length = _scalar(signature, "max_length", max_length, tf.int32)
        temperature = _scalar(signature, "temperature", temperature, tf.float32)
        k = _scalar(signature, "k", k, tf.int32)
        p = _scalar(signature, "p", p, tf.float32)
        checks = [
            tf.debugging.assert_greater_equal(
                max_length, 2, message=f"{signature}: max_length must be >= 2"),
            tf.debugging.assert_greater_equal(
                k, 1, message=f"{signature}: k must be >= 1"),
            tf.debugging.assert_greater(
                p, 0.0, message=f"{signature}: p must be in (0, 1]"),
            tf.debugging.assert_less_equal(
                p, 1.0, message=f"{signature}: p must be in (0, 1]"),
            tf.debugging.assert_greater(
                temperature, 0.0, message=f"{signature}: temperature must be > 0"),
        ]
        if not isinstance(sampler, str):
            sampler = _scalar(signature, "sampler", sampler, tf.string)
            checks.append(tf.debugging.Assert(
                tf.reduce_any(tf.equal(tf.constant(SAMPLERS), sampler)),
                [f"{signature}: sampler must be one of {', '.join(SAMPLERS)}; got", sampler]))
        with tf.control_dependencies(checks):
            max_length = tf.minimum(max_length, self.max_sequence_length)

        # Tokenize, keep each prompt's last max_length - 2 tokens, prefix the start token.
        pieces = self.tokenizer(prompt)
        keep = tf.cast(max_length - 2, pieces.row_splits.dtype)
        starts = pieces.row_starts() + tf.maximum(pieces.row_lengths() - keep, 0)
        pieces = tf.gather(pieces.flat_values, tf.ragged.range(starts, pieces.row_limits()))
        start = tf.fill([tf.shape(prompt)[0], 1], tf.constant(self.end_token_id,
                                                              pieces.dtype))
        pieces = tf.concat([start, pieces], axis=1)
        lengths = tf.cast(pieces.row_lengths(), tf.int32)
        token_ids = pieces.to_tensor(default_value=self.end_token_id)

        prompts = (token_ids, lengths, max_length)
        if isinstance(sampler, str) and sampler == "beam":
            token_ids, mask = self._decode_beam(*prompts, temperature)
        elif isinstance(sampler, str):
            token_ids, mask = self._decode_tokens(TOKEN_RULES.index(sampler), *prompts,
                                                  temperature, k, p)
        else:
            rule = tf.argmax(tf.cast(tf.equal(tf.constant(TOKEN_RULES), sampler), tf.int32),
                             output_type=tf.int32)
            token_ids, mask = tf.cond(
                tf.equal(sampler, "beam"),
                lambda: self._decode_beam(*prompts, temperature),
                lambda: self._decode_tokens(rule, *prompts, temperature, k, p))

        generated = tf.ragged.boolean_mask(token_ids, mask)
        num_generated = tf.cast(generated.row_lengths(), tf.int32) - lengths
        generated = generated[:, 1:]  # drop the start token
        is_text = tf.not_equal(generated, self.end_token_id)
        text = self.tokenizer.detokenize(tf.ragged.boolean_mask(generated, is_text))
        return {"generated_text": text, "num_generated_tokens": num_generated}

    # ------------------------------------------------------------------ signatures

    def signatures(self) -> dict:
        """``{"serving_default": ..., "generate_default": ...}`` concrete functions."""
        # Unknown shapes on purpose: a loaded signature does not enforce its declared
        # shape, and declared shapes would let TensorFlow fold the rank checks away.
        @tf.function(input_signature=[
            tf.TensorSpec(None, tf.string, name="prompt"),
            tf.TensorSpec(None, tf.int32, name="max_length"),
            tf.TensorSpec(None, tf.string, name="sampler"),
            tf.TensorSpec(None, tf.float32, name="temperature"),
            tf.TensorSpec(None, tf.int32, name="k"),
            tf.TensorSpec(None, tf.float32, name="p"),
        ], autograph=False)
        def serving_default(prompt, max_length, sampler, temperature, k, p):
            return self.generate(SERVING_SIGNATURE, prompt, max_length, sampler,
                                 temperature, k, p)

        settings = self.settings

        # The recipe's settings as constant inputs of serving_default's graph: the decoding
        # loops are traced (and saved, and loaded) once for both signatures.
        @tf.function(input_signature=[tf.TensorSpec(None, tf.string, name="prompt")],
                     autograph=False)
        def generate_default(prompt):
            return serving_default(
                _prompt_batch(DEFAULT_SIGNATURE, prompt),
                tf.constant(settings["max_length"], tf.int32),
                tf.constant(settings["sampler"], tf.string),
                tf.constant(settings["temperature"], tf.float32),
                tf.constant(settings["k"], tf.int32), tf.constant(settings["p"], tf.float32))

        return {SERVING_SIGNATURE: serving_default.get_concrete_function(),
                DEFAULT_SIGNATURE: generate_default.get_concrete_function()}


def export_generator(causal_lm, vocab_dir: str, model_config: dict, export_dir: str) -> None:
    """Writes the causal LM's SavedModel (`GeneratorServing`'s two signatures) to
    ``export_dir``, with the vocabulary's tokenizer and end-of-text token and
    ``model_config["generation"]`` (the recipe's ``serving.generation``) as defaults."""
    end_of_text = read_tokenizer_config(vocab_dir).get("special_tokens", {}).get(
        "end_of_text")
    if end_of_text is None:
        raise ValueError(f"Vocabulary {vocab_dir!r} has no 'end_of_text' special token, which "
                         f"causal-LM serving needs (prompt start and stop token)")
    module = GeneratorServing(load_tokenizer(vocab_dir), causal_lm,
                              model_config.get("generation"), end_of_text)
    saved_model.save(module, export_dir, module.signatures())
    logging.info("Exported %s SavedModel to %s", type(module).__name__, export_dir)


__all__ = ["DEFAULT_SIGNATURE", "GENERATION_DEFAULTS", "GeneratorServing", "SAMPLERS",
           "SERVING_SIGNATURE", "export_generator", "generation_settings"]
