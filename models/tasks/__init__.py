"""Fine-tuning task models that work on any encoder backbone in the registry (keras-hub's
Task split): one class per file, each taking ``backbone`` and returning the task's outputs."""
