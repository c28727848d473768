"""Loads Hugging Face ReformerModelWithLMHead checkpoints (filled in below)."""


def from_huggingface(path):
    raise NotImplementedError
