"""Datasets on disk: Megatron's indexed token files (.bin/.idx), the GPT-2 tokenizer, `caraml data ...`."""
