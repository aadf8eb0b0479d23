"""Evaluation of student model versions on the evaluation splits, stored like any policy's episodes."""
