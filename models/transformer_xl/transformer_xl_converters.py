"""Hugging Face TransfoXL checkpoints -> `TransformerXLBackbone` / `TransformerXLCausalLM`."""

def from_huggingface(path):
    raise NotImplementedError
