"""ELECTRA's pre-training task: replaced token detection (Clark et al. 2020 §2, Figure 2)."""

import keras
from keras import ops

from lmfactory.models import backend
from lmfactory.models.backend import tf
from lmfactory.models.bert.bert_backbone import bert_kernel_initializer
from lmfactory.models.electra.electra_backbone import ELECTRA_BACKBONE_INPUTS
from lmfactory.models.electra.electra_generator import ElectraGenerator
from lmfactory.models.electra.electra_presets import default_generator_size
from lmfactory.models.encoder_utils import require_inputs
from lmfactory.models.task_losses import (masked_lm_loss, masked_lm_weights, sum_over_replicas,
                                          track_loss, with_regularization)
from lmfactory.models.task_model import SubclassedTask

ELECTRA_PRETRAINER_INPUTS = ELECTRA_BACKBONE_INPUTS + ("mask_positions",)


def generator_dimensions(backbone, generator_size: float) -> dict:
    """The generator's sizes for a discriminator `backbone` (Table 6 "Generator Size": a
    multiplier of the hidden size, the FFN size and the number of attention heads; the
    number of layers is kept). The head count is lowered until it divides the width."""
    hidden_dim = max(1, int(round(backbone.hidden_dim * generator_size)))
    intermediate_dim = max(1, int(round(backbone.intermediate_dim * generator_size)))
    num_heads = max(1, int(round(backbone.num_heads * generator_size)))
    while hidden_dim % num_heads:
        num_heads -= 1
    return {"num_layers": backbone.num_layers, "num_heads": num_heads,
            "hidden_dim": hidden_dim, "intermediate_dim": intermediate_dim}


class ElectraPretrainer(SubclassedTask):
    """Generator + discriminator trained jointly on replaced token detection (§2, Figure 2).

    The input is a masked batch (CONTRACTS §3, objective `mlm`): `token_ids` with some
    positions masked, `mask_positions`, and as targets the original ids there. Per step:

    1. The generator G (`ElectraGenerator`, a small masked LM that shares the
       discriminator's embeddings, §3.2 "Weight Sharing") predicts the masked tokens; its
       loss is the masked-LM likelihood L_MLM, averaged over the real predictions
       (`masked_lm_weights` > 0), as BERT's.
    2. The corrupted sequence x_corrupt is the original sequence (the masked input with the
       target ids scattered back into `mask_positions`) in which each masked position holds
       a sample of G's softmax there. Sampling cuts the gradient: "we do not
       back-propagate the discriminator loss through the generator (indeed, we can't
       because of sampling)" (§2).
    3. The discriminator D (the `backbone`, what fine-tuning keeps) gets x_corrupt and
       predicts for every token whether it was replaced: a Dense(H) + GELU + Dense(1)
       head, one sigmoid per token. "If the generator happens to generate the correct
       token, that token is considered 'real' instead of 'fake'" (§2), so a token is
       labelled replaced only where the sample differs from the original. L_Disc is the
       sigmoid cross-entropy averaged over real (non-padding) tokens.

    Loss: L_MLM + lambda * L_Disc with lambda = `rtd_weight` = 50 (§2 / Appendix A).
    `compute_loss` implements it (train with `compile(optimizer=...)` and no `loss`); under
    a `tf.distribute` strategy the averages divide by global counts and replicas sample
    with different seeds.

    Calling the model runs the generator side (output: `{"mlm": logits [B, P, V]}`); the
    discriminator runs inside `compute_loss` on the corrupted tokens, which need the
    targets (they tell which predictions are real). `discriminate(inputs)` gives D's
    replaced-token logits [B, T] for any tokens.

    Inputs (dict, int32): `token_ids`, `padding_mask`, `segment_ids` [batch, seq_len],
        `mask_positions` [batch, num_predictions].
    Targets for `fit`: y = {"mlm": original ids [B, P]}, sample_weight = {"mlm": [B, P]}.
    Metrics: `mlm_loss`, `rtd_loss`, `rtd_accuracy` (over real tokens) and
        `replaced_fraction` (share of the real masked positions whose sample differs from
        the original token, i.e. 1 - the generator's sampling accuracy).

    Args:
        backbone: an `ElectraBackbone`, the discriminator.
        generator_size: the generator's hidden size, FFN size and head count as a fraction
            of the discriminator's (Table 6); None = Table 6's value for a discriminator of
            a preset's shape (1/3 for base, 1/4 otherwise).
        rtd_weight: lambda, the weight of the discriminator loss.
        sampling_seed: seed of the generator sampling (None = Keras's global seed state).
    """

    # Its vocabulary logits are the backbone's token embedding called in reverse, through
    # models/tied_output.py (checked by tests/conformance/test_tied_output.py).
    ties_output_embedding = True

    def __init__(self, backbone, generator_size=None, rtd_weight=50.0, sampling_seed=None,
                 **kwargs):
        if generator_size is None:
            generator_size = default_generator_size(backbone)
        generator_size = float(generator_size)
        if not 0.0 < generator_size <= 1.0:
            raise ValueError(f"generator_size must be in (0, 1] (a fraction of the "
                             f"discriminator's size), got {generator_size}")
        rtd_weight = float(rtd_weight)
        if rtd_weight < 0:
            raise ValueError(f"rtd_weight must be >= 0, got {rtd_weight}")
        super().__init__(**kwargs)
        # === Layers ===
        self.backbone = backbone
        self.generator = ElectraGenerator(
            backbone.token_embedding,
            dropout=backbone.dropout,
            dtype=backbone.dtype_policy,
            name="generator",
            **generator_dimensions(backbone, generator_size),
        )
        # The discriminator's head (the released code's `discriminator_predictions`).
        self.rtd_dense = keras.layers.Dense(
            backbone.hidden_dim,
            activation="gelu",
            kernel_initializer=bert_kernel_initializer(),
            dtype=backbone.dtype_policy,
            name="rtd_dense",
        )
        self.rtd_logits = keras.layers.Dense(
            1,
            kernel_initializer=bert_kernel_initializer(),
            dtype=backbone.dtype_policy,
            name="rtd_logits",
        )
        self.seed_generator = keras.random.SeedGenerator(sampling_seed, name="sampling_seed")
        # Every variable exists once constructed (so a loaded model gets its weights).
        self.generator.build((None, None, backbone.embedding_dim))
        self.rtd_dense.build((None, None, backbone.hidden_dim))
        self.rtd_logits.build((None, None, backbone.hidden_dim))
        self.built = True

        # === Metrics ===
        self.mlm_loss_tracker = keras.metrics.Mean(name="mlm_loss")
        self.rtd_loss_tracker = keras.metrics.Mean(name="rtd_loss")
        self.rtd_accuracy_tracker = keras.metrics.Mean(name="rtd_accuracy")
        self.replaced_fraction_tracker = keras.metrics.Mean(name="replaced_fraction")

        # === Config ===
        self.generator_size = generator_size
        self.rtd_weight = rtd_weight
        self.sampling_seed = sampling_seed

    def call(self, inputs, training=None):
        """The generator side of Figure 2: G's masked-LM logits [B, P, V] (as `{"mlm": ...}`)
        on the shared embeddings of the masked input."""
        require_inputs("ElectraPretrainer", inputs, ELECTRA_PRETRAINER_INPUTS)
        embedded = self.backbone.embed(inputs, training=training)
        return {"mlm": self.generator(embedded, inputs["padding_mask"],
                                      inputs["mask_positions"], training=training)}

    # ------------------------------------------------------------------ discriminator

    def discriminate(self, inputs, training=False):
        """D's replaced-token logits [batch, seq_len] (sigmoid > 0.5 = "replaced")."""
        require_inputs("discriminate()", inputs, ELECTRA_BACKBONE_INPUTS)
        inputs = {name: ops.convert_to_tensor(inputs[name], "int32")
                  for name in ELECTRA_BACKBONE_INPUTS}
        encoded = self.backbone(inputs, training=training)["sequence_output"]
        return ops.squeeze(self.rtd_logits(self.rtd_dense(encoded)), axis=-1)

    # ------------------------------------------------------------------ corruption

    def sample(self, mlm_logits):
        """One token per prediction from the generator's softmax, [B, P] int32; no gradient.

        On TensorFlow each replica of a `tf.distribute` strategy folds its id into the seed
        (stateless sampling). On JAX the step is one global program under jit, so one
        draw from the seed generator covers the global batch."""
        logits = ops.cast(ops.stop_gradient(mlm_logits), "float32")
        vocabulary_size = ops.shape(logits)[-1]
        if not backend.is_tensorflow():
            samples = keras.random.categorical(ops.reshape(logits, (-1, vocabulary_size)), 1,
                                               seed=self.seed_generator, dtype="int32")
            return ops.reshape(samples, ops.shape(logits)[:-1])
        seed = tf.cast(self.seed_generator.next(), tf.int32)
        context = tf.distribute.get_replica_context()
        if context is not None and context.num_replicas_in_sync > 1:
            seed = tf.random.experimental.stateless_fold_in(
                seed, context.replica_id_in_sync_group)
        samples = tf.random.stateless_categorical(
            tf.reshape(logits, (-1, vocabulary_size)), 1, seed=seed, dtype=tf.int32)
        return tf.reshape(samples, tf.shape(logits)[:-1])

    def corrupt(self, x, mlm_labels, mlm_weights, mlm_logits):
        """Builds the discriminator's input from a masked batch and the generator's logits.

        Returns a dict: `original_ids` (the masked input with `mlm_labels` scattered back
        into the real `mask_positions`), `corrupted_ids` (the same with generator samples
        there), `replaced` [B, T] int32 (1 where the two differ) and `sampled` [B, P].
        Predictions of weight 0 (padding) change nothing.
        """
        token_ids = ops.cast(x["token_ids"], "int32")
        positions = ops.cast(x["mask_positions"], "int32")
        real = ops.cast(mlm_weights, "float32") > 0
        current = ops.take_along_axis(token_ids, positions, axis=1)
        sampled = self.sample(mlm_logits)
        batch_index = ops.broadcast_to(ops.arange(ops.shape(positions)[0])[:, None],
                                       ops.shape(positions))
        indices = ops.reshape(ops.stack([batch_index, positions], axis=-1), (-1, 2))

        def scattered(values):  # token_ids with `values` [B, P] at mask_positions
            return ops.scatter_update(token_ids, indices, ops.reshape(values, (-1,)))

        original_ids = scattered(ops.where(real, ops.cast(mlm_labels, "int32"), current))
        corrupted_ids = scattered(ops.where(real, sampled, current))
        replaced = ops.cast(ops.not_equal(original_ids, corrupted_ids), "int32")
        replaced = replaced * ops.cast(x["padding_mask"], "int32")
        return {"original_ids": original_ids, "corrupted_ids": corrupted_ids,
                "replaced": replaced, "sampled": sampled}

    # ------------------------------------------------------------------ losses

    def compute_losses(self, x, y, y_pred, sample_weight=None, training=False):
        """The two losses of §2 and the figures behind the metrics, as a dict:
        `mlm_loss`, `rtd_loss`, `loss` (= mlm_loss + rtd_weight * rtd_loss, this replica's
        share of the global batch's loss), `rtd_accuracy`, `replaced_fraction` (global
        values), and the `corruption` dict of `corrupt`."""
        if not isinstance(y, dict) or "mlm" not in y:
            raise ValueError("ElectraPretrainer targets must be a dict with 'mlm' (the "
                             f"original ids at mask_positions), got {type(y).__name__}")
        mlm_logits = ops.cast(y_pred["mlm"] if isinstance(y_pred, dict) else y_pred,
                              "float32")
        mlm_labels = y["mlm"]
        mlm_weights = masked_lm_weights(sample_weight, ops.shape(mlm_labels))

        # Generator: masked-LM likelihood over the real predictions.
        mlm_loss = masked_lm_loss(mlm_labels, mlm_logits, mlm_weights)

        # Discriminator: per-token replaced / original on the corrupted sequence.
        corruption = self.corrupt(x, mlm_labels, mlm_weights, mlm_logits)
        rtd_logits = ops.cast(self.discriminate(
            {"token_ids": corruption["corrupted_ids"], "padding_mask": x["padding_mask"],
             "segment_ids": x["segment_ids"]}, training=training), "float32")
        rtd_labels = ops.cast(corruption["replaced"], "float32")
        token_weights = ops.cast(x["padding_mask"], "float32")
        rtd_nll = ops.binary_crossentropy(rtd_labels, rtd_logits, from_logits=True)
        global_tokens = sum_over_replicas(ops.sum(token_weights))
        rtd_loss = ops.sum(token_weights * rtd_nll) / (global_tokens + 1e-6)

        correct = ops.cast(ops.equal(ops.cast(rtd_logits > 0, "float32"), rtd_labels),
                           "float32")
        rtd_accuracy = ops.divide_no_nan(
            sum_over_replicas(ops.sum(token_weights * correct)), global_tokens)
        real_predictions = ops.cast(mlm_weights > 0, "float32")
        replaced_at_predictions = ops.cast(ops.not_equal(
            corruption["sampled"], ops.cast(mlm_labels, "int32")), "float32")
        replaced_fraction = ops.divide_no_nan(
            sum_over_replicas(ops.sum(real_predictions * replaced_at_predictions)),
            sum_over_replicas(ops.sum(real_predictions)))
        return {"mlm_loss": mlm_loss, "rtd_loss": rtd_loss,
                "loss": mlm_loss + self.rtd_weight * rtd_loss,
                "rtd_accuracy": rtd_accuracy, "replaced_fraction": replaced_fraction,
                "corruption": corruption}

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        losses = self.compute_losses(x, y, y_pred, sample_weight, training=training)
        track_loss(self.mlm_loss_tracker, losses["mlm_loss"])
        track_loss(self.rtd_loss_tracker, losses["rtd_loss"])
        self.rtd_accuracy_tracker.update_state(ops.stop_gradient(losses["rtd_accuracy"]))
        self.replaced_fraction_tracker.update_state(
            ops.stop_gradient(losses["replaced_fraction"]))
        return with_regularization(self, losses["loss"])

    def get_config(self):
        config = super().get_config()
        config.update({
            "generator_size": self.generator_size,
            "rtd_weight": self.rtd_weight,
            "sampling_seed": self.sampling_seed,
        })
        return config
