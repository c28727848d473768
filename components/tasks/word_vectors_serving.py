"""The serving SavedModel of trained word vectors (the ``word_vectors`` task kind): raw
words in.

Signatures:

* ``serving_default(words [N] string) -> {vectors [N, d] float32, known [N] bool,
  ids [N] int32}``: a word is the vocabulary's tokenizer applied to the string (so the
  same lower-casing as training); a string that is not exactly one vocabulary word (an
  unknown word, the empty string, several words, a special token) is ``known = False``
  and gets a zero vector and id -1.
* ``nearest_neighbours(words [N] string) -> {neighbours [N, k] string, scores [N, k]
  float32, known [N] bool}``: the k words of highest cosine similarity to each known word
  (the word itself and the special tokens excluded); rows of unknown words hold "" and 0.

The tokenizer and the vectors are attributes of the `tf.Module`, so the SavedModel owns
their tables (see serving.py).
"""

from __future__ import annotations

import logging

import numpy as np
import tensorflow as tf

from lmfactory.models import saved_model
from lmfactory.components.trainer.serving import (SERVING_SIGNATURE, _check_batch_of_strings,
                                                  _string_batch_spec)

NEIGHBOURS_SIGNATURE = "nearest_neighbours"


class WordVectorServing(tf.Module):
    """``tokenizer``: the vocabulary's keras-nlp tokenizer; ``vectors`` [V, d] (row = id);
    ``words`` [V] the vocabulary (row = id); ``special_ids`` ids that are not words;
    ``top_k`` neighbours returned per word."""

    def __init__(self, tokenizer, vectors: np.ndarray, words: list, special_ids, top_k: int):
        super().__init__(name="word_vector_serving")
        vectors = np.asarray(vectors, dtype=np.float32)
        if len(words) != len(vectors):
            raise ValueError(f"{len(words)} words for {len(vectors)} vectors")
        self.top_k = int(min(top_k, max(1, len(words) - len(set(special_ids)) - 1)))
        is_word = np.ones(len(words), dtype=bool)
        is_word[list(special_ids)] = False
        norms = np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        self.tokenizer = tokenizer
        self.vectors = tf.Variable(vectors, trainable=False, name="vectors")
        self.unit_vectors = tf.Variable(vectors / norms, trainable=False, name="unit_vectors")
        self.words = tf.Variable([word.encode("utf-8") for word in words],
                                 trainable=False, name="words", dtype=tf.string)
        self.is_word = tf.Variable(is_word, trainable=False, name="is_word")

    def lookup(self, words):
        """``(ids [N] int32, -1 where unknown; known [N] bool)``."""
        tokens = self.tokenizer(words)
        if not isinstance(tokens, tf.RaggedTensor):
            tokens = tf.RaggedTensor.from_tensor(tokens)
        one_token = tf.equal(tokens.row_lengths(), 1)
        first = tf.cast(tokens.to_tensor(default_value=0, shape=[None, 1])[:, 0], tf.int32)
        known = tf.logical_and(one_token, tf.gather(self.is_word, first))
        return tf.where(known, first, -1), known

    def vectors_of(self, words):
        words = _check_batch_of_strings("words", words)
        ids, known = self.lookup(words)
        vectors = tf.gather(self.vectors, tf.maximum(ids, 0))
        vectors = tf.where(known[:, None], vectors, tf.zeros_like(vectors))
        return {"vectors": vectors, "known": known, "ids": ids}

    def neighbours_of(self, words):
        words = _check_batch_of_strings("words", words)
        ids, known = self.lookup(words)
        query = tf.gather(self.unit_vectors, tf.maximum(ids, 0))
        scores = tf.matmul(query, self.unit_vectors, transpose_b=True)
        excluded = tf.logical_or(
            tf.logical_not(self.is_word)[None, :],
            tf.equal(tf.range(tf.shape(scores)[1])[None, :], ids[:, None]))
        scores = tf.where(excluded, tf.fill(tf.shape(scores), -np.inf), scores)
        top = tf.math.top_k(scores, k=self.top_k)
        neighbours = tf.where(known[:, None], tf.gather(self.words, top.indices), "")
        values = tf.where(known[:, None], top.values, 0.0)
        return {"neighbours": neighbours, "scores": values, "known": known}

    def signatures(self) -> dict:
        spec = [_string_batch_spec("words")]
        return {SERVING_SIGNATURE: tf.function(
                    self.vectors_of, input_signature=spec, autograph=False
                ).get_concrete_function(),
                NEIGHBOURS_SIGNATURE: tf.function(
                    self.neighbours_of, input_signature=spec, autograph=False
                ).get_concrete_function()}


def save_word_vectors(module: WordVectorServing, export_dir: str) -> None:
    saved_model.save(module, export_dir, module.signatures())
    logging.info("Exported word vectors (%s) to %s", ", ".join(module.signatures()),
                 export_dir)


def write_projector_files(folder: str, vectors: np.ndarray, words: list, special_ids) -> None:
    """TensorBoard projector files: ``vectors.tsv`` (one vector a line, tab-separated),
    ``metadata.tsv`` (one word a line, the same order; single column, so no header) and
    ``projector_config.pbtxt`` pointing at them. Special tokens are left out."""
    tf.io.gfile.makedirs(folder)
    special = set(special_ids)
    rows = [i for i in range(len(words)) if i not in special]
    with tf.io.gfile.GFile(f"{folder}/vectors.tsv", "w") as f:
        for i in rows:
            f.write("\t".join(f"{value:.6g}" for value in vectors[i]) + "\n")
    with tf.io.gfile.GFile(f"{folder}/metadata.tsv", "w") as f:
        for i in rows:
            f.write(words[i].replace("\t", " ").replace("\n", " ") + "\n")
    with tf.io.gfile.GFile(f"{folder}/projector_config.pbtxt", "w") as f:
        f.write('embeddings {\n  tensor_name: "word_vectors"\n  tensor_path: "vectors.tsv"\n'
                '  metadata_path: "metadata.tsv"\n}\n')
