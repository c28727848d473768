"""Distiller: a Trainer with a teacher (knowledge distillation)."""
