"""GPT-1 (Radford et al. 2018). Importing this package registers the "gpt1" architecture."""

from lmfactory.models import registry
from lmfactory.models.gpt1.gpt1_backbone import Gpt1Backbone
from lmfactory.models.gpt1.gpt1_causal_lm import Gpt1CausalLM
from lmfactory.models.gpt1.gpt1_classifier import Gpt1Classifier
from lmfactory.models.gpt1.gpt1_converters import from_huggingface
from lmfactory.models.gpt1.gpt1_preprocessor import (GPT1_TASKS, Gpt1Preprocessor,
                                                     pipeline_preprocessor)
from lmfactory.models.gpt1.gpt1_presets import GPT1_PRESETS
from lmfactory.models.gpt1.gpt1_tokenizer import Gpt1BpeTokenizer

# §3.3: fine-tuning inputs add randomly initialised start and extract tokens and a
# delimiter `$`; the vocabulary reserves them (roles "start", "delimiter", "extract") next
# to GPT-2's end-of-text token, which separates documents in `causal_lm` pretraining data
# and pads.
SPECIAL_TOKENS = {
    "end_of_text": "<|endoftext|>",
    "pad": "<|endoftext|>",
    "start": "<|start|>",
    "delimiter": "<|delimiter|>",
    "extract": "<|extract|>",
}



def multiple_choice_head(backbone, num_choices, **task_args):
    """§3.3 "Question Answering and Commonsense Reasoning": the classifier scores each
    `start z $ a_k extract` sequence (W_y on its extract state), softmax across the answers."""
    return Gpt1Classifier(backbone, num_classes=num_choices, task="multiple_choice",
                          **task_args)


def multiple_choice_preprocessor(vocab_dir, sequence_length, num_text_features, task_args):
    """A context [B] and its answers [B, C] packed as one sequence per answer (§3.3)."""
    del task_args  # the packing of multiple choice has no settings
    return pipeline_preprocessor(vocab_dir, sequence_length, num_text_features,
                                 {"task": "multiple_choice"})


ARCHITECTURE = registry.register(
    registry.Architecture(
        name="gpt1",
        family="decoder",
        backbone_cls=Gpt1Backbone,
        presets=GPT1_PRESETS,
        tokenizer_kind="bpe",
        pretrainers={"causal_lm": Gpt1CausalLM},
        # Fine-tuning (§3.2) with the auxiliary LM loss (finetuning.task_args: lm_weight,
        # task); its inputs are GPT-1's own packing (§3.3, Gpt1Preprocessor), not the
        # cls/sep layouts of the pipeline's ClassifierPreprocessor.
        heads={"classification": Gpt1Classifier, "causal_lm": Gpt1CausalLM,
               "multiple_choice": multiple_choice_head},
        preprocessors={"classification": pipeline_preprocessor,
                       "multiple_choice": multiple_choice_preprocessor},
        special_tokens=SPECIAL_TOKENS,
        converters={"huggingface": from_huggingface},
        hf_model_types=("openai-gpt",),
        paper="Radford et al. 2018, Improving Language Understanding by Generative "
              "Pre-Training (OpenAI)",
    )
)

__all__ = ["ARCHITECTURE", "GPT1_PRESETS", "GPT1_TASKS", "Gpt1Backbone", "Gpt1CausalLM",
           "Gpt1BpeTokenizer", "Gpt1Classifier", "Gpt1Preprocessor", "SPECIAL_TOKENS"]
