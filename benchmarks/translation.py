"""An encoder-decoder trained from scratch on Multi30k English -> German on the CPU for a
fixed wall-clock budget, then scored with sacreBLEU on the 2016 Flickr test set, greedy and
with length-normalised beam search: RNNsearch-small (Bahdanau et al. 2015; writes the
attention heat map of one test sentence), with ``--architecture transformer``,
Transformer-small (Vaswani et al. 2017), or the Quaternion Transformer-small (Tay et al.
2019, "Quaternion Transformer": every attention and feed-forward projection a Hamilton
product)
``quaternion_transformer`` and the same code and sizes built real-valued,
``quaternion_transformer_real`` (the paper's comparison with the real Transformer).

    .venv/bin/python benchmarks/translation.py --minutes 8 --out-dir benchmarks/out/translation
    .venv/bin/python benchmarks/translation.py --architecture transformer --minutes 25
    .venv/bin/python benchmarks/translation.py --architecture quaternion_transformer \
        --steps 400 --warmup-steps 200 --no-unnormalised-beam

Per architecture (`ARCHITECTURES`): RNNsearch with a joint word vocabulary, Adam at 2e-3
(global-norm clip 1.0), beam length penalty alpha 1.0; the Transformer with a joint
SentencePiece subword vocabulary (the ``sentencepiece`` kind, case and accents kept; the
paper: a shared BPE, §5.1) and, the same for both quaternion entries, Adam with beta2
0.98, eps 1e-9 and the inverse-square-root schedule (§5.3; ``--warmup-steps``, peak
``--learning-rate``), label smoothing 0.1 (its head's, §5.4), beam 4 with alpha 0.6
(§6.1). All train on batches of 64 sentence pairs.

The pieces are the pipeline's own (components/tasks/translation.py): the parallel reader's
punctuation splitting, a joint vocabulary of both sides learned by VocabularyGen's
learner (the ``word`` or ``sentencepiece`` kind, at most ``--vocab-size`` tokens),
`Seq2SeqPreprocessor` (sources and targets of at most ``--sequence-length`` tokens),
the architecture's `seq2seq_lm` head trained by teacher forcing with Adam (RNNsearch's
paper: Adadelta for about 5 days on a GPU; not reproducible in minutes on a CPU), the
serving module's beam search, sacreBLEU
(13a tokenization) against the test references, and the report's heat-map plot. Training
stops after ``--minutes`` of wall time (at an epoch boundary of 100 steps) or after exactly
``--steps`` steps (two models compared on a shared, loaded CPU); the figures are
those of a model trained that long, far from the papers' converged models (on WMT'14
En-Fr / En-De, different tasks: no published Multi30k figure is compared here).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import keras_nlp  # noqa: E402
import tensorflow as tf  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

from lmfactory import models  # noqa: E402
from lmfactory.components.evaluator import report as report_lib  # noqa: E402
from lmfactory.components.example_gen.parallel import split_punctuation  # noqa: E402
from lmfactory.components.tasks import translation  # noqa: E402
from lmfactory.components.trainer.optimization import InverseSqrtDecay  # noqa: E402
from lmfactory.components.tasks.translation_serving import TranslationServing  # noqa: E402
from lmfactory.components.vocabulary import executor as vocabulary_executor  # noqa: E402

MULTI30K = os.path.join(os.path.dirname(common.REPO), "shared", "data", "multi30k")


def read_pairs(split: str) -> tuple[list[str], list[str]]:
    sides = []
    for language in ("en", "de"):
        with gzip.open(os.path.join(MULTI30K, f"{split}.{language}.gz"), "rt",
                       encoding="utf-8") as f:
            sides.append([split_punctuation(line.rstrip("\n")) for line in f])
    return sides[0], sides[1]


def _rnnsearch_optimizer(learning_rate, warmup_steps):
    del warmup_steps
    return keras.optimizers.Adam(learning_rate or 2e-3, clipnorm=1.0)


def _transformer_optimizer(learning_rate, warmup_steps):
    schedule = InverseSqrtDecay.from_peak(learning_rate or 1e-3, warmup_steps)
    return keras.optimizers.Adam(schedule, beta_1=0.9, beta_2=0.98, epsilon=1e-9)


# Benchmark entry -> (registered architecture, its backbone overrides, display name,
# tokenizer kind, beam length-penalty alpha, optimizer(peak learning rate or None for the
# default, warmup steps)). The two quaternion entries are one architecture built with
# ``quaternion`` on and off (Tay et al. 2019 compare the Quaternion Transformer with the real
# one of the same sizes): everything else is the Transformer entry's.
ARCHITECTURES = {
    "rnnsearch": ("rnnsearch", {}, "RNNsearch-small", "word", 1.0, _rnnsearch_optimizer),
    "transformer": ("transformer", {}, "Transformer-small", "sentencepiece", 0.6,
                    _transformer_optimizer),
    "quaternion_transformer": ("quaternion_transformer", {"quaternion": True},
                               "Quaternion Transformer-small", "sentencepiece", 0.6,
                               _transformer_optimizer),
    "quaternion_transformer_real": ("quaternion_transformer", {"quaternion": False},
                                    "Quaternion Transformer-small, quaternion: false (real)",
                                    "sentencepiece", 0.6, _transformer_optimizer),
}


def learn_vocabulary(lines: list[str], out_dir: str, vocab_size: int,
                     architecture: str = "rnnsearch") -> str:
    registered, _, _, kind = ARCHITECTURES[architecture][:4]
    extra = {"strip_accents": False} if kind == "sentencepiece" else {}
    config = vocabulary_executor.VocabularyConfig(
        kind=kind, vocab_size=vocab_size, min_frequency=2, lowercase=False,
        special_tokens=models.get(registered).special_tokens, **extra)
    counts = vocabulary_executor.count_words([line for line in lines if line], config)
    vocab_dir = os.path.join(out_dir, "vocabulary")
    os.makedirs(vocab_dir, exist_ok=True)
    vocabulary_executor.learn_and_write(counts, vocab_dir, config, "multi30k train")
    return vocab_dir


class StopAfter(keras.callbacks.Callback):
    """Stops training at the first epoch end after ``seconds`` of wall time."""

    def __init__(self, seconds: float):
        super().__init__()
        self.seconds, self.started = seconds, time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        if time.perf_counter() - self.started > self.seconds:
            self.model.stop_training = True


def translate_all(translate, sources: list[str], batch_size: int = 100) -> list[str]:
    outputs = []
    for start in range(0, len(sources), batch_size):
        batch = tf.constant(sources[start:start + batch_size])
        outputs += [t.decode("utf-8") for t in translate(batch).numpy().tolist()]
    return outputs


def projection_parameters(model) -> int:
    """Parameters of the attention and feed-forward projections: every weight of the
    model's keras-nlp Transformer encoder / decoder blocks (the quaternion blocks subclass
    them) but their LayerNorms; 0 for a model without such blocks (RNNsearch)."""
    blocks = (keras_nlp.layers.TransformerEncoder, keras_nlp.layers.TransformerDecoder)
    total = 0
    for layer in model._flatten_layers(include_self=False):
        if isinstance(layer, blocks):
            total += layer.count_params() - sum(
                norm.count_params() for norm in layer._flatten_layers(include_self=False)
                if isinstance(norm, keras.layers.LayerNormalization))
    return total


def run(scales=(1,), out_dir="benchmarks/out/translation", quick=False, minutes=8.0,
        vocab_size=8000, sequence_length=40, batch_size=64, seed=0, architecture="rnnsearch",
        learning_rate=None, warmup_steps=800, steps=None,
        unnormalised_beam=True) -> common.Result:
    """Trains for ``minutes`` of wall time or, when ``steps`` is given (a multiple of 100),
    for exactly that many steps (a fair comparison of two models on a loaded machine).
    Decodes greedily, with beam 4 and the entry's length penalty, and (``unnormalised_beam``)
    with beam 4 and alpha 0."""
    del scales
    if architecture not in ARCHITECTURES:
        raise ValueError(f"architecture must be one of {sorted(ARCHITECTURES)}, got "
                         f"{architecture!r}")
    if steps is not None and (steps < 100 or steps % 100):
        raise ValueError(f"steps must be a positive multiple of 100, got {steps!r}")
    registered, overrides, title, _, alpha_paper, make_optimizer = ARCHITECTURES[architecture]
    started = time.perf_counter()
    os.makedirs(out_dir, exist_ok=True)
    keras.utils.set_random_seed(seed)
    train_en, train_de = read_pairs("train")
    test_en, test_de = read_pairs("test_2016_flickr")
    if quick:
        test_en, test_de = test_en[:100], test_de[:100]
    vocab_dir = learn_vocabulary(train_en + train_de, out_dir, vocab_size, architecture)
    preprocessor = translation.preprocessor_for(vocab_dir, sequence_length)
    vocabulary = preprocessor.tokenizer.vocabulary_size()
    backbone = models.build(registered, "small", vocabulary_size=vocabulary, **overrides)
    model = models.get(registered).head("seq2seq_lm")(backbone)
    model.compile(optimizer=make_optimizer(learning_rate, warmup_steps))
    data = (tf.data.Dataset.from_tensor_slices((train_en, train_de)).shuffle(30_000, seed=seed)
            .repeat().batch(batch_size).map(preprocessor.training_inputs)
            .prefetch(tf.data.AUTOTUNE))
    load_before = os.getloadavg()
    history = model.fit(data, epochs=steps // 100 if steps else 10_000, steps_per_epoch=100,
                        verbose=2, callbacks=[] if steps else [StopAfter(60 * minutes)])
    load_after = os.getloadavg()
    train_seconds = time.perf_counter() - started
    steps = 100 * len(history.history["loss"])
    rows, figures = [], {}
    decodings = [("greedy", 1, 0.0), (f"beam 4, alpha {alpha_paper}", 4, alpha_paper)]
    if unnormalised_beam:
        decodings.append(("beam 4, alpha 0", 4, 0.0))
    for name, beams, alpha in decodings:
        serving = TranslationServing(preprocessor, model, sequence_length + 1, beams, alpha)
        decode = tf.function(serving.translate)
        t0 = time.perf_counter()
        hypotheses = translate_all(decode, test_en)
        seconds = time.perf_counter() - t0
        bleu = translation.corpus_bleu(hypotheses, test_de)
        rows.append([name, bleu, seconds])
        figures[name] = {"bleu": bleu, "seconds": seconds, "examples": [
            {"source": s, "reference": r, "translation": h}
            for s, r, h in list(zip(test_en, test_de, hypotheses))[:3]]}
    heatmap = translation.attention_of(model, preprocessor, test_en[0])
    plots = []
    if heatmap is not None:  # a backbone with `attention_weights` (RNNsearch)
        plots.append(os.path.join(out_dir, "attention_heatmap.png"))
        report_lib.plot_attention(heatmap, plots[0])
    figures.update(steps=steps, train_seconds=train_seconds, vocabulary=vocabulary,
                   parameters=model.count_params(),
                   projection_parameters=projection_parameters(model),
                   final_loss=history.history["loss"][-1],
                   load_average_before_training=load_before,
                   load_average_after_training=load_after, final_nll=history.history["nll"][-1],
                   test_sentences=len(test_en), heatmap=heatmap)
    table = common.Table(
        f"{title}, Multi30k en->de, test_2016_flickr ({len(test_en)} sentences)",
        ["decoding", "sacreBLEU", "seconds"], rows,
        note=f"{steps} steps of batch {batch_size} in {train_seconds / 60:.1f} min on the "
             f"CPU (load average {load_before[0]:.1f} before, {load_after[0]:.1f} after); "
             f"{model.count_params():,} parameters ({projection_parameters(model):,} in the "
             f"attention and feed-forward projections), vocabulary {vocabulary}; final "
             f"training NLL {history.history['nll'][-1]:.3f}, loss "
             f"{history.history['loss'][-1]:.3f}.")
    with open(os.path.join(out_dir, "translation.json"), "w", encoding="utf-8") as f:
        json.dump(figures, f, indent=2)
    return common.Result("translation", [table], plots=plots, figures=figures,
                         seconds=time.perf_counter() - started)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", default="benchmarks/out/translation")
    parser.add_argument("--minutes", type=float, default=8.0)
    parser.add_argument("--steps", type=int, default=None,
                        help="train exactly this many steps (a multiple of 100) instead of "
                             "for --minutes")
    parser.add_argument("--no-unnormalised-beam", action="store_true",
                        help="skip the beam 4 / alpha 0 decoding (the Transformer's beam "
                             "search takes minutes on the CPU)")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--architecture", choices=sorted(ARCHITECTURES), default="rnnsearch")
    parser.add_argument("--learning-rate", type=float, default=None,
                        help="Adam's (peak) learning rate; default 2e-3 for RNNsearch, 1e-3 "
                             "for the Transformer")
    parser.add_argument("--warmup-steps", type=int, default=800,
                        help="warmup of the Transformer's inverse-square-root schedule")
    args = parser.parse_args()
    result = run(out_dir=args.out_dir, quick=args.quick, minutes=args.minutes,
                 architecture=args.architecture, learning_rate=args.learning_rate,
                 warmup_steps=args.warmup_steps, steps=args.steps,
                 unnormalised_beam=not args.no_unnormalised_beam)
    print(result.markdown())


if __name__ == "__main__":
    main()
