"""`caraml data prepare`: text or JSONL -> GPT-2 tokens in a Megatron .bin/.idx pair (as preprocess_data.py).

Input: JSONL (`.jsonl`/`.json`, or --format jsonl): one JSON object per line, the document's text under
--json-key. Plain text (any other name, or --format text): one document per line. Blank lines are skipped;
documents without tokens are skipped and counted (preprocess_data.py writes them as empty documents, which
GPT training never reads). An existing dataset is replaced only with --overwrite, and only once the new pair is
written whole (the writer renames it into place); an input that is one of the outputs is refused.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

from caraml.errors import BadInput
from caraml.measure.stops import Interrupting

BATCH = 1000  # documents tokenized together (the tokenizers library spreads a batch over threads)


def add_parser(group) -> None:
    prep = group.add_parser("prepare", help="tokenize text or JSONL into a Megatron .bin/.idx pair",
                            description="Tokenize a text file (one document per line) or JSONL ({\"text\": ...} "
                                        "per line) with the GPT-2 BPE into PREFIX.bin + PREFIX.idx, as Megatron's "
                                        "preprocess_data.py does (uint16 tokens while the vocabulary fits).")
    prep.add_argument("input", help="a .jsonl/.json file, or a text file with one document per line")
    prep.add_argument("--output-prefix", required=True, help="writes PREFIX.bin and PREFIX.idx")
    prep.add_argument("--vocab", help="gpt2-vocab.json (default: $CARAML_DATA/gpt2-vocab.json)")
    prep.add_argument("--merges", help="gpt2-merges.txt (default: $CARAML_DATA/gpt2-merges.txt)")
    prep.add_argument("--json-key", default="text", help="the JSONL key holding the text (default: %(default)s)")
    prep.add_argument("--append-eod", action="store_true", help="end each document with <|endoftext|>")
    prep.add_argument("--format", default="auto", choices=("auto", "jsonl", "text"),
                      help="auto: JSONL for .jsonl/.json names, plain text otherwise")
    prep.add_argument("--overwrite", action="store_true",
                      help="replace an existing PREFIX.bin/.idx (only once the new pair is written whole)")
    prep.set_defaults(func=run)


def documents(path: Path, jsonl: bool, key: str) -> Iterator[str]:
    """The input's documents, in order; a bad line is a BadInput naming its line number."""
    lineno = 0
    try:
        with open(path, encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                if not jsonl:
                    yield line.rstrip("\r\n")
                    continue
                yield _json_text(path, lineno, line, key)
    except UnicodeDecodeError as exc:
        raise BadInput(f"{path}:{lineno + 1}: not UTF-8 text ({exc.reason}); expected UTF-8 text or JSONL") from None


def _json_text(path: Path, lineno: int, line: str, key: str) -> str:
    try:
        record = json.loads(line.strip())
    except json.JSONDecodeError as exc:
        raise BadInput(f"{path}:{lineno}: not JSON ({exc.msg} at column {exc.colno}); expected one JSON object "
                       f"per line, e.g. {{\"{key}\": \"...\"}}") from None
    except RecursionError:
        raise BadInput(f"{path}:{lineno}: JSON nested too deeply to read; expected one JSON object per line, "
                       f"e.g. {{\"{key}\": \"...\"}}") from None
    if not isinstance(record, dict) or key not in record:
        keys = ", ".join(map(str, record)) if isinstance(record, dict) else type(record).__name__
        raise BadInput(f"{path}:{lineno}: no key '{key}' (found: {keys}); pass --json-key with the key that "
                       f"holds the text")
    if not isinstance(record[key], str):
        raise BadInput(f"{path}:{lineno}: '{key}' is {type(record[key]).__name__}, not a string")
    return record[key]


def run(args) -> int:
    from caraml.data.megatron import IndexedDatasetWriter, dtype_for_vocab
    from caraml.data.tokenizer import GPT2Tokenizer, default_files

    path = Path(args.input)
    if not path.is_file():
        raise BadInput(f"{path} is not a file; give a text file (one document per line) or JSONL")
    check_outputs(path, args.output_prefix, args.overwrite)
    jsonl = args.format == "jsonl" or (args.format == "auto" and path.suffix in (".jsonl", ".json"))
    vocab, merges = args.vocab, args.merges
    if not (vocab and merges):
        default_vocab, default_merges = default_files(os.environ.get("CARAML_DATA"))
        vocab, merges = vocab or default_vocab, merges or default_merges
    tokenizer = GPT2Tokenizer(vocab, merges)
    skipped = 0
    # SIGTERM or SIGHUP mid-way: the writer drops its temporary files on the way out, as for Ctrl-C
    with Interrupting(), IndexedDatasetWriter(args.output_prefix, dtype_for_vocab(tokenizer.vocab_size)) as writer:
        for batch in _batches(documents(path, jsonl, args.json_key), BATCH):
            for ids in tokenizer.encode_batch(batch):
                if not ids:  # as preprocess_data.py: no tokens, no end-of-document either
                    skipped += 1
                    continue
                writer.add_document(ids + [tokenizer.eod] if args.append_eod else ids)
    note = f" ({skipped} empty documents skipped)" if skipped else ""
    print(f"wrote {writer.documents} documents, {writer.tokens} tokens ({writer.dtype.name}) to "
          f"{writer.bin_path} and {writer.idx_path.name}{note}")
    return 0


def check_outputs(source: Path, prefix: str, overwrite: bool) -> None:
    """Before anything is written: the input is not one of the outputs, and an existing dataset is replaced
    only with --overwrite."""
    from caraml.data.megatron import bin_path, idx_path, split_prefix

    outputs = [bin_path(split_prefix(prefix)), idx_path(split_prefix(prefix))]
    for out in outputs:
        try:
            same = os.path.samefile(source, out)
        except OSError:  # the output is not there (or cannot be looked at): it cannot be the input
            same = False
        if same:
            raise BadInput(f"the input {source} is the output {out} itself; give another --output-prefix")
    existing = [str(out) for out in outputs if os.path.lexists(out)]
    if existing and not overwrite:
        verb = "exist" if len(existing) > 1 else "exists"
        raise BadInput(f"{' and '.join(existing)} already {verb}; pass --overwrite to replace the dataset, or "
                       "give another --output-prefix")


def _batches(items: Iterator[str], size: int) -> Iterator[list[str]]:
    batch = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch
