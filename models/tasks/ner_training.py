"""Token tagging (NER) data and prediction on the model side: ``(model inputs, labels,
sample_weight)`` batches from tagging records (`tagging_dataset`), the word tags a model
predicts through the graph the serving signature runs (`predict_word_label_ids`,
`predict_tags`), and how many words truncation leaves without a prediction
(`covered_words`), for the ``tagging`` task kind (``components/tasks/tagging.py``) and its
serving export.
"""

from __future__ import annotations


from lmfactory.models.backend import tf
from lmfactory.models.classifier_preprocessor import select_inputs
from lmfactory.models.tasks.token_classification_preprocessor import word_predictions

# The features of a tagging record: bytes lists of equal length, one entry per token
# (written by ``components/example_gen/conll.py``, which imports these names).
TOKENS_FEATURE = "tokens"
TAGS_FEATURE = "tags"
EXAMPLE_SPEC = {TOKENS_FEATURE: tf.io.RaggedFeature(tf.string),
                TAGS_FEATURE: tf.io.RaggedFeature(tf.string)}


def tagging_dataset(serialized, preprocessor, batch_size: int, shuffle: bool = False,
                    repeat: bool = False, seed: int | None = None,
                    input_names=None) -> tf.data.Dataset:
    """``(model inputs, labels, sample_weight)`` batches from serialized tf.train.Examples
    with the ``tokens`` / ``tags`` features (``components/example_gen/conll.py``).

    ``serialized``: a tf.data.Dataset of serialized Examples (e.g. a TFRecordDataset of the
    ingested split) or a list of them. ``input_names``: the model's input names (the packed
    features it takes; ``word_ids`` is never one)."""
    if not isinstance(serialized, tf.data.Dataset):
        serialized = tf.data.Dataset.from_tensor_slices(tf.constant(list(serialized)))
    names = list(input_names or ("token_ids", "padding_mask", "segment_ids"))

    def featurize(batch):
        parsed = tf.io.parse_example(batch, EXAMPLE_SPEC)
        features = preprocessor(parsed[TOKENS_FEATURE], parsed[TAGS_FEATURE])
        return ({name: features[name] for name in names}, features["labels"],
                features["sample_weight"])

    dataset = serialized
    if shuffle:
        dataset = dataset.shuffle(10_000, seed=seed, reshuffle_each_iteration=True)
    if repeat:
        dataset = dataset.repeat()
    dataset = dataset.batch(batch_size, drop_remainder=repeat)
    return dataset.map(featurize, num_parallel_calls=tf.data.AUTOTUNE).prefetch(
        tf.data.AUTOTUNE)


def predict_word_label_ids(model, preprocessor, words, length_multiple: int | None = None):
    """Ragged [B, (words)] strings -> ragged [B, (words)] int32 label ids (the argmax at each
    word's first sub-token; the first label, ``O``, for words with none). With
    ``length_multiple`` the model runs at the batch's longest row
    (models/request_length.py)."""
    from lmfactory.models.request_length import call_on_longest

    features = preprocessor(words)
    logits = call_on_longest(model, select_inputs(model, features), length_multiple,
                             sequence_outputs=True)
    token_predictions = tf.argmax(logits, axis=-1, output_type=tf.int32)
    return word_predictions(token_predictions, features["word_ids"], words.row_lengths(),
                            default_id=0)


def predict_tags(model, preprocessor, sentences, batch_size: int = 64) -> list[list[str]]:
    """The predicted tag of every word of ``sentences`` (lists of words), through the same
    graph the serving signature runs (``components/tasks/tagging_serving.py``)."""
    @tf.function(input_signature=[tf.RaggedTensorSpec([None, None], tf.string, 1,
                                                      tf.int64)])
    def predict(words):
        return predict_word_label_ids(model, preprocessor, words)

    labels = preprocessor.label_vocabulary
    predicted = []
    for start in range(0, len(sentences), batch_size):
        chunk = sentences[start:start + batch_size]
        words = tf.RaggedTensor.from_row_lengths(
            tf.constant([word for sentence in chunk for word in sentence], tf.string),
            tf.constant([len(sentence) for sentence in chunk], tf.int64))
        for row in predict(words).to_list():
            predicted.append([labels[index] for index in row])
    return predicted


def covered_words(preprocessor, sentences, batch_size: int = 256) -> tuple[int, int]:
    """(words with a first sub-token in the packed sequence, all words): how many words
    truncation (or normalisation to nothing) leaves without a prediction of their own."""
    covered = total = 0
    for start in range(0, len(sentences), batch_size):
        chunk = sentences[start:start + batch_size]
        words = tf.ragged.constant(chunk, dtype=tf.string, ragged_rank=1)
        word_ids = preprocessor(words)["word_ids"]
        covered += int(tf.reduce_sum(tf.cast(word_ids >= 0, tf.int32)))
        total += sum(len(sentence) for sentence in chunk)
    return covered, total
