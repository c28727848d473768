"""CheckpointImporter: a published checkpoint (Hugging Face folder or original TF checkpoint)
-> a Model artifact, so a recipe can start fine-tuning from published weights instead of
pretraining."""
