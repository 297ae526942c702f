"""Evaluation during training and the built-in eval tasks: graders, generation and grading of
items, results files, and opening the model under test."""
