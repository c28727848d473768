"""GPT-1 as a left-to-right language model: the unsupervised pre-training of Radford et al.
2018 §3.1."""

from lmfactory.models.gpt2.gpt2_causal_lm import GPT2CausalLM


class Gpt1CausalLM(GPT2CausalLM):
    """A `Gpt1Backbone` with the tied output layer, trained on next-token prediction.

    §3.1 "Unsupervised pre-training": given a corpus of tokens U = {u_1, ..., u_n}, maximise

        L1(U) = sum_i log P(u_i | u_{i-k}, ..., u_{i-1}; Θ),   P(u) = softmax(h_n W_e^T),

    with the context window k the model's positions (512) and W_e the token embedding, so
    the output layer is the transposed token embedding. This is the objective, output layer
    and decoding of GPT-2, which inherited them from GPT-1; everything is `GPT2CausalLM`'s:
    `compute_loss` (token-weighted mean negative log-likelihood over the global batch, i.e.
    -L1 / number of tokens), the `nll` metric, and `generate_ids` with a keras-nlp sampler
    over the backbone's decoding state, its key/value cache (`Gpt1Backbone.call_with_state`;
    the code is `CausalLMGeneration`, models/generation.py).

    Inputs (dict, int32 [batch, seq_len]): `token_ids`, `padding_mask`.
    Output: next-token logits [batch, seq_len, vocabulary_size].
    Targets for `fit` (CONTRACTS §3 `causal_lm`): y = the ids shifted by one [B, L],
        sample_weight [B, L] (0 on padding).

    Args:
        backbone: a `Gpt1Backbone`.
    """

    def __init__(self, backbone, **kwargs):
        for method in ("initial_state", "call_with_state"):
            if not callable(getattr(backbone, method, None)):
                raise TypeError(f"Gpt1CausalLM needs a decoder backbone with {method}() "
                                f"(a Gpt1Backbone), got {type(backbone).__name__}")
        super().__init__(backbone, **kwargs)
