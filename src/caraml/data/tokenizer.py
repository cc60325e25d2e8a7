"""The GPT-2 byte-level BPE tokenizer from gpt2-vocab.json + gpt2-merges.txt, as Megatron's GPT2BPETokenizer.

Built on the `tokenizers` library (imported when a tokenizer is made). Like Megatron's tokenizer it adds no
special tokens and gives no prefix space; `<|endoftext|>` in the text is plain text, and `eod` is its id.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from caraml.errors import BadInput

EOD = "<|endoftext|>"
VOCAB_FILE, MERGES_FILE = "gpt2-vocab.json", "gpt2-merges.txt"
# Where Megatron-LM's instructions (and CARAML's data set-up) fetch the two files: GPT-2's own, MIT-licensed.
SOURCE = "https://s3.amazonaws.com/models.huggingface.co/bert/"
FETCH = f"fetch them with: wget {SOURCE}{VOCAB_FILE} {SOURCE}{MERGES_FILE}"


def default_files(data_root: str | None) -> tuple[Path, Path]:
    """gpt2-vocab.json and gpt2-merges.txt in data_root (CARAML_DATA)."""
    if not data_root:
        raise BadInput(f"no tokenizer files: pass --vocab {VOCAB_FILE} --merges {MERGES_FILE}, or set CARAML_DATA "
                       f"to the folder that holds them; {FETCH}")
    return Path(data_root) / VOCAB_FILE, Path(data_root) / MERGES_FILE


def _one_line(exc: Exception) -> str:
    return " ".join(str(exc).split())


class GPT2Tokenizer:
    def __init__(self, vocab_file: str | os.PathLike, merges_file: str | os.PathLike):
        vocab_file, merges_file = Path(vocab_file), Path(merges_file)
        for path, kind in ((vocab_file, VOCAB_FILE), (merges_file, MERGES_FILE)):
            if not path.is_file():
                raise BadInput(f"{path} does not exist; expected the GPT-2 {kind} that Megatron's "
                               f"GPT2BPETokenizer reads; {FETCH}")
        try:
            vocab = json.loads(vocab_file.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError) as exc:
            raise BadInput(f"{vocab_file} is not JSON ({_one_line(exc)}); expected the GPT-2 {VOCAB_FILE}") from None
        if not isinstance(vocab, dict) or EOD not in vocab:
            raise BadInput(f"{vocab_file} has no '{EOD}' entry; expected the GPT-2 {VOCAB_FILE} (token -> id)")

        from tokenizers import Tokenizer, decoders, models, pre_tokenizers

        try:
            bpe = models.BPE.from_file(str(vocab_file), str(merges_file))
        except Exception as exc:  # noqa: BLE001 - tokenizers raises plain Exceptions for unreadable files
            raise BadInput(f"{vocab_file} / {merges_file} are not GPT-2 BPE files ({_one_line(exc)}); "
                           f"expected {VOCAB_FILE} and {MERGES_FILE}") from None
        self._tok = Tokenizer(bpe)
        self._tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        self._tok.decoder = decoders.ByteLevel()
        self.eod = int(vocab[EOD])
        self.vocab_size = self._tok.get_vocab_size()

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [e.ids for e in self._tok.encode_batch(texts, add_special_tokens=False)]

    def decode(self, ids) -> str:
        return self._tok.decode([int(i) for i in ids], skip_special_tokens=False)
