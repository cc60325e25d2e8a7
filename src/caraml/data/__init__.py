"""Datasets on disk and `caraml data ...`: Megatron's indexed token files (.bin/.idx), the GPT-2 tokenizer,
synthetic FNO files; each subcommand in a module of its own."""
