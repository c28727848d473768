"""Multiple-choice fine-tuning on any encoder backbone (Devlin et al. 2019 §4.4, SWAG)."""

import keras
from keras import ops

from lmfactory.models.task_losses import sentence_objective, with_regularization
from lmfactory.models.task_model import Task, first_token_vector, int_inputs
from lmfactory.models.tasks.fold_choices import FoldChoices

MULTIPLE_CHOICE_INPUTS = ("token_ids", "padding_mask", "segment_ids")


class MultipleChoice(Task):
    """Scores each of C (context, choice) sequences and normalises across the choices.

    BERT §4.4 (SWAG): "we construct four input sequences, each containing the
    concatenation of the given sentence (sentence A) and a possible continuation
    (sentence B). The only task-specific parameters introduced is a vector whose dot
    product with the [CLS] token representation C denotes a score for each choice which is
    normalized with a softmax layer." Here that vector is a ``Dense(1)`` (with a bias, as
    the released ``run_swag``-style heads have; it adds the same constant to every choice,
    so the softmax ignores it) after dropout 0.1 (Appendix A.3) on the backbone's
    ``pooled_output``, or on the first position of ``sequence_output`` for a backbone
    without a pooler (RoBERTa, ELECTRA, DistilBERT: the ``<s>`` / ``[CLS]`` vector).

    The C sequences of a question are folded into the batch (`FoldChoices`), encoded
    independently by the backbone, and their scores unfolded to [B, C].

    Inputs (dict, int32 [batch, num_choices, seq_len]): the backbone's inputs
        (``token_ids``, ``padding_mask`` and, where it has segment embeddings,
        ``segment_ids``; ``models/tasks/multiple_choice_preprocessor.py`` packs them; other
        entries are ignored).
    Output: logits [batch, num_choices] (the softmax over them is the choice distribution).
    Loss (`compute_loss`, compiled with an optimizer only): the mean cross-entropy of the
        softmax over the choices against the index of the correct one (y: [B] ints);
        metrics ``loss`` and ``accuracy``.

    Args:
        backbone: an encoder backbone of the registry (pre-trained or fresh).
        num_choices: C, the number of choices of every question (5 for CommonsenseQA, 4
            for SWAG).
        dropout: dropout rate before the scoring vector.
    """

    def __init__(self, backbone, num_choices, dropout=0.1, **kwargs):
        # === Layers ===
        self.backbone = backbone
        self.fold = FoldChoices(num_choices, name="fold_choices")
        self.output_dropout = keras.layers.Dropout(
            dropout, dtype=backbone.dtype_policy, name="output_dropout")
        self.score = keras.layers.Dense(
            1, kernel_initializer=keras.initializers.TruncatedNormal(stddev=0.02),
            dtype=backbone.dtype_policy, name="choice_score")
        self.unfold = FoldChoices(num_choices, unfold=True, name="unfold_choices")

        # === Functional model ===
        names = [name for name in MULTIPLE_CHOICE_INPUTS if name in backbone.input]
        names += sorted(set(backbone.input) - set(names))
        inputs = int_inputs(names, shape=(num_choices, None))
        outputs = backbone(self.fold(inputs))
        scores = self.score(self.output_dropout(
            first_token_vector(outputs, pooled=True)))  # [B*C, 1]
        logits = ops.squeeze(self.unfold(scores), axis=-1)  # [B, C]
        super().__init__(inputs=inputs, outputs=logits, **kwargs)

        # === Config ===
        self.num_choices = num_choices
        self.dropout = dropout

        # === Metrics ===
        self.loss_tracker = keras.metrics.Mean(name="loss")
        self.accuracy = keras.metrics.SparseCategoricalAccuracy(name="accuracy")

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        loss = sentence_objective(y, y_pred, self.loss_tracker, self.accuracy)
        return with_regularization(self, loss)

    def get_config(self):
        config = super().get_config()
        config.update({"num_choices": self.num_choices, "dropout": self.dropout})
        return config
