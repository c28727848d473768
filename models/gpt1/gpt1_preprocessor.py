"""GPT-1's task-specific input transformations (Radford et al. 2018 §3.3, Figure 1)."""

from __future__ import annotations

import keras

from lmfactory.models import masked_packing
from lmfactory.models.backend import tf

GPT1_TASKS = ("classification", "entailment", "similarity", "multiple_choice")
# The vocabulary roles of GPT-1's fine-tuning tokens (models/gpt1/__init__.py).
SPECIAL_ROLES = {"start_token_id": "start", "delimiter_token_id": "delimiter",
                 "extract_token_id": "extract", "pad_token_id": "pad"}


def _to_ragged(value, what: str) -> tf.RaggedTensor:
    """A batch of token id sequences as a RaggedTensor [batch, (tokens)] (or deeper)."""
    if isinstance(value, (list, tuple)):
        value = tf.ragged.constant(value)
    if isinstance(value, tf.RaggedTensor):
        return value
    value = tf.convert_to_tensor(value)
    if value.shape.rank is None or value.shape.rank < 2:
        raise ValueError(f"Gpt1Preprocessor: {what} must be a batch of token sequences "
                         f"(rank >= 2), got shape {value.shape}; tokenize strings with a "
                         f"tokenizer first or give the layer one")
    # Every dimension after the batch ragged, as `merge_dims` and the packer expect.
    return tf.RaggedTensor.from_tensor(value, ragged_rank=value.shape.rank - 1)


@keras.saving.register_keras_serializable(package="lmfactory")
class Gpt1Preprocessor(keras.layers.Layer):
    """Turns the inputs of a fine-tuning task into the token sequences GPT-1 reads.

    §3.3: structured inputs are converted "into an ordered sequence that our pre-trained
    model can process", with randomly initialised start and extract tokens and a delimiter
    token `$` (Figure 1):

    * `classification`: `start text extract`;
    * `entailment`: `start premise $ hypothesis extract`;
    * `similarity`: there is no inherent order of the two texts, so both orderings,
      `start a $ b extract` and `start b $ a extract`, are packed, as [batch, 2, length];
      `Gpt1Classifier` processes them independently and adds their extract states;
    * `multiple_choice` (question answering, commonsense reasoning): for a context z and
      answers {a_k}, one sequence `start z $ a_k extract` per answer, as
      [batch, num_answers, length]; `Gpt1Classifier` scores each and softmaxes across them.

    keras-nlp's `MultiSegmentPacker` does the packing (start value, `$` between segments,
    extract at the end, right padding, round-robin truncation of the texts so the extract
    token is always kept).

    Inputs (`call`): classification: a batch of texts; entailment and similarity: a tuple
    `(first, second)`; multiple_choice: a tuple `(context, answers)` with `answers`
    [batch, num_answers] (the same number of answers in every example). Texts are token
    id sequences (lists, dense or ragged int tensors), or strings when the layer has a
    `tokenizer`.
    Outputs: dict with `token_ids` and `padding_mask` (int32, 1 on real tokens), each
    [batch, length], [batch, 2, length] (similarity) or [batch, num_answers, length].

    Args:
        task: one of `GPT1_TASKS`.
        sequence_length: packed length, special tokens included (at most the backbone's
            positions).
        start_token_id, delimiter_token_id, extract_token_id, pad_token_id: the ids of the
            start, `$`, extract and padding tokens (see `from_vocabulary`).
        tokenizer: optional keras-nlp tokenizer applied to string inputs.
        truncate: `MultiSegmentPacker`'s "round_robin" or "waterfall".
    """

    def __init__(self, task="classification", sequence_length=512, start_token_id=None,
                 delimiter_token_id=None, extract_token_id=None, pad_token_id=0,
                 tokenizer=None, truncate="round_robin", **kwargs):
        super().__init__(**kwargs)
        # As keras-nlp's preprocessing layers: TensorFlow tensors in (not backend tensors),
        # and Python lists of ids or strings accepted.
        self._convert_input_args = False
        self._allow_non_tensor_positional_args = True
        if task not in GPT1_TASKS:
            raise ValueError(f"task must be one of {GPT1_TASKS}, got {task!r}")
        ids = {"start_token_id": start_token_id, "delimiter_token_id": delimiter_token_id,
               "extract_token_id": extract_token_id, "pad_token_id": pad_token_id}
        for name, value in ids.items():
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{name} must be a non-negative int, got {value!r}")
        minimum = 3 if task == "classification" else 4
        if int(sequence_length) < minimum:
            raise ValueError(f"sequence_length must hold the special tokens and a token of "
                             f"each text ({minimum} for {task!r}), got {sequence_length}")
        self.task = task
        self.sequence_length = int(sequence_length)
        self.start_token_id = start_token_id
        self.delimiter_token_id = delimiter_token_id
        self.extract_token_id = extract_token_id
        self.pad_token_id = pad_token_id
        self.tokenizer = tokenizer
        self.truncate = truncate
        # One packing gives the ids and the padding mask (the pad id may occur in text, e.g.
        # GPT-2's end-of-text token, so comparing ids with it would not do).
        self.packer = masked_packing.shifted_packer(
            self.sequence_length, start_value=start_token_id, end_value=extract_token_id,
            sep_value=delimiter_token_id, truncate=truncate)

    @classmethod
    def from_vocabulary(cls, vocab_dir: str, task: str = "classification",
                        sequence_length: int = 512, **kwargs) -> "Gpt1Preprocessor":
        """The preprocessor over a vocabulary folder (CONTRACTS §2) whose special tokens
        include the roles `start`, `delimiter`, `extract` and `pad`, with its tokenizer."""
        from lmfactory.models.tokenizers import load_tokenizer, read_tokenizer_config

        specials = read_tokenizer_config(vocab_dir).get("special_tokens", {})
        missing = sorted(role for role in SPECIAL_ROLES.values() if role not in specials)
        if missing:
            raise ValueError(f"Vocabulary folder {vocab_dir!r} has no {missing} special "
                             f"token(s); GPT-1 fine-tuning needs {sorted(SPECIAL_ROLES.values())}"
                             f" (it has {sorted(specials)})")
        tokenizer = load_tokenizer(vocab_dir)
        ids = {name: int(tokenizer.token_to_id(specials[role]))
               for name, role in SPECIAL_ROLES.items()}
        return cls(task=task, sequence_length=sequence_length, tokenizer=tokenizer, **ids,
                   **kwargs)

    def _tokens(self, value, what: str) -> tf.RaggedTensor:
        if self.tokenizer is not None and not isinstance(value, tf.RaggedTensor):
            as_tensor = value if tf.is_tensor(value) else None
            if as_tensor is None and isinstance(value, (list, tuple)) and value \
                    and isinstance(tf.nest.flatten(value)[0], str):
                as_tensor = tf.constant(value)
            if as_tensor is not None and as_tensor.dtype == tf.string:
                if as_tensor.shape.rank == 2:  # [batch, answers]: tokenized one by one
                    tokens = _to_ragged(self.tokenizer(tf.reshape(as_tensor, [-1])), what)
                    value = tf.RaggedTensor.from_uniform_row_length(
                        tokens, tf.shape(as_tensor, out_type=tf.int64)[1])
                else:
                    value = self.tokenizer(as_tensor)
        return _to_ragged(value, what)

    def _pack(self, segments: tuple):
        """`start seg_1 $ seg_2 ... extract` padded to `sequence_length`, and its mask."""
        token_ids, padding_mask, _ = masked_packing.pack(self.packer, segments,
                                                          self.pad_token_id)
        return token_ids, padding_mask

    def _pair(self, inputs):
        if not isinstance(inputs, tuple) or len(inputs) != 2:
            raise ValueError(f"Gpt1Preprocessor({self.task!r}) takes a tuple of two inputs "
                             f"(first, second), got {type(inputs).__name__}")
        return inputs

    def call(self, inputs):
        if self.task == "classification":
            if isinstance(inputs, tuple) and len(inputs) == 1:
                inputs = inputs[0]
            token_ids, padding_mask = self._pack((self._tokens(inputs, "text"),))
        elif self.task == "entailment":
            premise, hypothesis = self._pair(inputs)
            token_ids, padding_mask = self._pack((self._tokens(premise, "premise"),
                                                  self._tokens(hypothesis, "hypothesis")))
        elif self.task == "similarity":
            first, second = self._pair(inputs)
            first, second = self._tokens(first, "first text"), self._tokens(second,
                                                                            "second text")
            forward, forward_mask = self._pack((first, second))
            backward, backward_mask = self._pack((second, first))
            token_ids = tf.stack([forward, backward], axis=1)
            padding_mask = tf.stack([forward_mask, backward_mask], axis=1)
        else:
            context, answers = self._pair(inputs)
            token_ids, padding_mask = self._pack_choices(self._tokens(context, "context"),
                                                         self._tokens(answers, "answers"))
        return {"token_ids": token_ids, "padding_mask": padding_mask}

    def _pack_choices(self, context, answers):
        """`start z $ a_k extract` for every answer a_k: [batch, num_answers, length]."""
        if answers.shape.rank is not None and answers.shape.rank < 3:
            raise ValueError("Gpt1Preprocessor('multiple_choice'): answers must be "
                             "[batch, num_answers, (tokens)]")
        per_example = answers.row_lengths()
        num_answers = per_example[0]
        check = tf.debugging.assert_equal(
            per_example, tf.fill(tf.shape(per_example), num_answers),
            message="Gpt1Preprocessor('multiple_choice'): every example needs the same "
                    "number of answers")
        with tf.control_dependencies([check]):
            rows = tf.repeat(tf.range(context.nrows()), per_example)
        contexts = tf.gather(context, rows)
        token_ids, padding_mask = self._pack((contexts, answers.merge_dims(0, 1)))
        shape = [-1, num_answers, self.sequence_length]
        return tf.reshape(token_ids, shape), tf.reshape(padding_mask, shape)

    def get_config(self):
        config = super().get_config()
        config.update({
            "task": self.task,
            "sequence_length": self.sequence_length,
            "start_token_id": self.start_token_id,
            "delimiter_token_id": self.delimiter_token_id,
            "extract_token_id": self.extract_token_id,
            "pad_token_id": self.pad_token_id,
            "tokenizer": (None if self.tokenizer is None
                          else keras.saving.serialize_keras_object(self.tokenizer)),
            "truncate": self.truncate,
        })
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        if isinstance(config.get("tokenizer"), dict):
            config["tokenizer"] = keras.saving.deserialize_keras_object(config["tokenizer"])
        return cls(**config)


# What a classification task of one or two raw-text features is, by GPT-1's §3.3 input
# transformations (the pipeline's classification data: one label per example).
PIPELINE_TASKS = {1: ("classification",), 2: ("entailment", "similarity")}


def pipeline_preprocessor(vocab_dir: str, sequence_length: int, num_text_features: int,
                          task_args: dict) -> Gpt1Preprocessor:
    """The `Architecture.classifier_preprocessor` of GPT-1: the pipeline's fine-tuning and
    serving inputs (a tuple of one or two batches of raw strings) packed as §3.3 does.

    One text feature: `classification` (`start text extract`); two: `entailment` (`start
    premise $ hypothesis extract`, §3.3 "Textual entailment"), or `similarity` (both
    orderings) when the recipe's `finetuning.task_args` say `task: similarity` (the
    `Gpt1Classifier` then gets the same `task`). `task: multiple_choice` (the
    multiple-choice task kind, components/tasks/multiple_choice.py): a context [B] and its
    answers [B, C], one `start z $ a_k extract` sequence per answer.
    """
    task = task_args.get("task") or PIPELINE_TASKS.get(num_text_features, ("?",))[0]
    if task == "multiple_choice" and num_text_features == 2:
        return Gpt1Preprocessor.from_vocabulary(vocab_dir, task, sequence_length)
    if task not in PIPELINE_TASKS.get(num_text_features, ()):
        raise ValueError(f"GPT-1 fine-tuning on {num_text_features} text feature(s) packs "
                         f"the task(s) {PIPELINE_TASKS.get(num_text_features, ())}, got "
                         f"task {task!r}")
    return Gpt1Preprocessor.from_vocabulary(vocab_dir, task, sequence_length)
