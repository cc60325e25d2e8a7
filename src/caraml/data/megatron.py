"""Megatron-LM's indexed dataset (a `.bin` + `.idx` pair, MMIDIDX version 1): read it, write it, cut GPT samples.

The `.idx` file, little-endian, as Megatron's preprocess_data.py writes it:

    9 bytes   b"MMIDIDX\\x00\\x00"
    <Q        version, 1
    <B        token dtype code (DTYPES)
    <Q        S, the number of sequences
    <Q        D, the number of document-index entries (documents + 1)
    int32[S]  sequence lengths, in tokens
    int64[S]  sequence pointers: byte offsets of the sequences in the .bin
    int64[D]  document indices: the sequence each document starts at, from 0, ending with S

The `.bin` file is the sequences' tokens back to back in that dtype. With preprocess_data.py's defaults
(no sentence splitting) a document is one sequence.
"""

from __future__ import annotations

import os
import secrets
import struct
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np

from caraml.errors import BadInput

MAGIC = b"MMIDIDX\x00\x00"
VERSION = 1
HEADER_BYTES = len(MAGIC) + 8 + 1 + 8 + 8
# Megatron's DType codes (megatron/core/datasets/indexed_dataset.py)
DTYPES = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 6: np.float64, 7: np.float32,
          8: np.uint16}
CODES = {np.dtype(t): code for code, t in DTYPES.items()}
EXPECTED = "expected MMIDIDX v1 from Megatron's preprocess_data.py or `caraml data prepare`"


def dtype_for_vocab(vocab_size: int) -> type[np.number]:
    """The token dtype Megatron picks: uint16 while the vocabulary fits (its cut-off is 65500), else int32."""
    return np.uint16 if vocab_size < 65500 else np.int32


def split_prefix(path: str | os.PathLike) -> Path:
    """`x`, `x.bin` or `x.idx` -> the prefix `x`."""
    path = Path(path)
    return path.with_suffix("") if path.suffix in (".bin", ".idx") else path


def idx_path(prefix: Path) -> Path:
    return prefix.parent / (prefix.name + ".idx")  # not with_suffix: prefixes may hold dots


def bin_path(prefix: Path) -> Path:
    return prefix.parent / (prefix.name + ".bin")


def locate(prefix: str, data_root: str | None) -> Path:
    """A dataset prefix as given or, when relative and not there, under data_root (CARAML_DATA)."""
    given = split_prefix(prefix)
    candidates = [given] + ([Path(data_root) / given] if data_root and not given.is_absolute() else [])
    for candidate in candidates:
        if idx_path(candidate).is_file():
            return candidate
    if given.is_absolute():  # looked for there only: CARAML_DATA does not help
        idx = idx_path(given)
        raise BadInput(f"no Megatron dataset at {given}: {idx} {'is not a file' if idx.exists() else 'does not exist'}"
                       " (make one with `caraml data prepare`)")
    where = " or ".join(str(idx_path(c)) for c in candidates)
    hint = "" if data_root else "; set CARAML_DATA to the folder that holds it"
    raise BadInput(f"no Megatron dataset {where}{hint} (make one with `caraml data prepare`)")


def _map(path: Path) -> np.ndarray:
    """The file's bytes, memory-mapped read-only (an empty array for an empty file, which mmap refuses)."""
    if path.stat().st_size == 0:
        return np.empty(0, np.uint8)
    return np.memmap(path, dtype=np.uint8, mode="r")


@dataclass(frozen=True)
class Index:
    """A validated `.idx` file; its arrays are views of the memory-mapped file."""

    path: Path
    dtype: np.dtype
    sequence_lengths: np.ndarray  # int32[S]
    sequence_pointers: np.ndarray  # int64[S], bytes
    document_indices: np.ndarray  # int64[D]

    @property
    def sequences(self) -> int:
        return len(self.sequence_lengths)

    @property
    def documents(self) -> int:
        return len(self.document_indices) - 1

    @cached_property
    def tokens(self) -> int:
        return int(self.sequence_lengths.sum(dtype=np.int64))

    @cached_property
    def bin_bytes(self) -> int:
        """The size of the .bin this index describes: up to the end of its last sequence."""
        if not self.sequences:
            return 0
        ends = self.sequence_pointers + self.sequence_lengths.astype(np.int64) * self.dtype.itemsize
        return int(ends.max())


def read_index(path: str | os.PathLike) -> Index:
    """Read and check a `.idx` file; any problem is a BadInput naming the file."""
    path = Path(path)
    if not path.is_file():
        raise BadInput(f"{path} does not exist; {EXPECTED}")
    size = path.stat().st_size
    if size < HEADER_BYTES:
        raise BadInput(f"{path} is {size} bytes, shorter than the {HEADER_BYTES}-byte header; {EXPECTED}")
    raw = _map(path)
    magic = bytes(raw[:len(MAGIC)])
    if magic != MAGIC:
        raise BadInput(f"{path} is not a Megatron index (magic {magic!r}); {EXPECTED}")
    version, code, sequences, entries = struct.unpack_from("<QBQQ", raw, len(MAGIC))
    if version != VERSION:
        raise BadInput(f"{path} is MMIDIDX version {version}, not {VERSION}; {EXPECTED}")
    if code not in DTYPES:
        raise BadInput(f"{path} has token dtype code {code}; Megatron's codes are 1-8 "
                       f"({', '.join(f'{c} {np.dtype(t).name}' for c, t in DTYPES.items())})")
    need = HEADER_BYTES + sequences * (4 + 8) + entries * 8
    if size != need:
        raise BadInput(f"{path} is {size} bytes but its header ({sequences} sequences, {entries} document "
                       f"entries) needs {need}: truncated or damaged; {EXPECTED}")
    dtype = np.dtype(DTYPES[code])
    offset = HEADER_BYTES
    lengths = np.frombuffer(raw, np.int32, sequences, offset)
    offset += lengths.nbytes
    pointers = np.frombuffer(raw, np.int64, sequences, offset)
    offset += pointers.nbytes
    documents = np.frombuffer(raw, np.int64, entries, offset)
    if sequences and (lengths.min() < 0 or pointers.min() < 0 or (pointers % dtype.itemsize).any()):
        raise BadInput(f"{path} has negative sequence lengths or pointers that are not whole {dtype.name} tokens; "
                       f"{EXPECTED}")
    if entries == 0 or documents[0] != 0 or documents[-1] != sequences or (np.diff(documents) < 0).any():
        raise BadInput(f"{path} has a document index that does not rise from 0 to its {sequences} sequences; "
                       f"{EXPECTED}")
    return Index(path, dtype, lengths, pointers, documents)


class IndexedDataset:
    """The sequences of a `.bin`/`.idx` pair: `ds[i]` is sequence i's tokens (a view of the memory-mapped .bin)."""

    def __init__(self, prefix: str | os.PathLike):
        self.prefix = split_prefix(prefix)
        self.index = read_index(idx_path(self.prefix))
        tokens_path = bin_path(self.prefix)
        if not tokens_path.is_file():
            raise BadInput(f"{tokens_path} does not exist; it is the token half of {self.index.path} "
                           f"(`caraml data prepare` writes both)")
        size = tokens_path.stat().st_size
        if size != self.index.bin_bytes:
            raise BadInput(f"{tokens_path} is {size} bytes but {self.index.path.name} describes "
                           f"{self.index.bin_bytes} ({self.index.tokens} {self.index.dtype.name} tokens): "
                           f"the pair is mismatched or truncated; write both again with `caraml data prepare`")
        self.tokens = _map(tokens_path).view(self.index.dtype)
        self._starts = self.index.sequence_pointers // self.index.dtype.itemsize  # in tokens

    def __len__(self) -> int:
        return self.index.sequences

    def __getstate__(self) -> dict:  # DataLoader workers reopen the files rather than pickle the tokens
        return {"prefix": self.prefix}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["prefix"])

    def __getitem__(self, i: int) -> np.ndarray:
        return self.get(i)

    def get(self, i: int, offset: int = 0, length: int | None = None) -> np.ndarray:
        """Tokens offset .. offset+length of sequence i (to its end when length is None)."""
        size = int(self.index.sequence_lengths[i])
        end = size if length is None else min(size, offset + length)
        start = int(self._starts[i])
        return self.tokens[start + offset:start + end]


class IndexedDatasetWriter:
    """Writes `PREFIX.bin` as documents come and `PREFIX.idx` at finalize(), byte-compatible with Megatron.

    Both are written to temporary files in the prefix's folder and renamed into place only by finalize(). As a
    context manager it finalizes on success and deletes the temporary files when the body raises.
    """

    def __init__(self, prefix: str | os.PathLike, dtype: type[np.number] = np.uint16):
        self.prefix = split_prefix(prefix)
        self.dtype = np.dtype(dtype)
        if self.dtype not in CODES:
            raise BadInput(f"token dtype {self.dtype.name} is not one of Megatron's: "
                           f"{', '.join(np.dtype(t).name for t in DTYPES.values())}")
        self.bin_path, self.idx_path = bin_path(self.prefix), idx_path(self.prefix)
        # Written under temporary names beside the outputs and renamed into place by finalize(): until then an
        # existing dataset stays whole, and a reader that has the old .bin mapped keeps its file (its inode).
        tag = f".{os.getpid()}.{secrets.token_hex(4)}.tmp"
        self._tmp_bin = self.bin_path.parent / f".{self.bin_path.name}{tag}"
        self._tmp_idx = self.idx_path.parent / f".{self.idx_path.name}{tag}"
        try:
            self.bin_path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise BadInput(f"cannot write {self.bin_path} ({exc.strerror}); "
                           "choose a prefix in a writable folder") from None
        # Opened at the first write, inside the caller's `with` body: a stop signal that lands between creating
        # the file and entering the block would otherwise leave it behind with no __exit__ to remove it.
        self._bin = None
        self._lengths: list[int] = []
        self._documents: list[int] = [0]

    def add_document(self, token_ids) -> None:
        """One document of one sequence."""
        tokens = np.asarray(token_ids)
        if tokens.ndim != 1:
            raise ValueError(f"a document is a flat list of token ids, not shape {tokens.shape}")
        if tokens.size and self.dtype.kind in "iu":
            limits = np.iinfo(self.dtype)
            if tokens.min() < limits.min or tokens.max() > limits.max:
                raise BadInput(f"token ids {tokens.min()}..{tokens.max()} do not fit {self.dtype.name}; "
                               f"write with a wider dtype (int32)")
        try:
            self._opened().write(tokens.astype(self.dtype, copy=False).tobytes())
        except OSError as exc:  # a full disk, a quota
            self.abort()
            raise BadInput(f"cannot write {self.bin_path} ({exc.strerror}); the dataset there is left as it was: "
                           "free space, or choose a prefix elsewhere") from None
        self._lengths.append(len(tokens))
        self._documents.append(len(self._lengths))

    @property
    def documents(self) -> int:
        return len(self._documents) - 1

    @property
    def tokens(self) -> int:
        return sum(self._lengths)

    def _opened(self):
        if self._bin is None:
            try:
                self._bin = open(self._tmp_bin, "xb")
            except OSError as exc:
                raise BadInput(f"cannot write {self.bin_path} ({exc.strerror}); "
                               "choose a prefix in a writable folder") from None
        return self._bin

    def finalize(self) -> Index:
        try:
            self._opened().close()  # writes what is buffered: may find the disk full
        except OSError as exc:
            self.abort()
            raise BadInput(f"cannot write {self.bin_path} ({exc.strerror}); the dataset there is left as it was: "
                           "free space, or choose a prefix elsewhere") from None
        lengths = np.asarray(self._lengths, np.int32)
        pointers = np.zeros(len(lengths), np.int64)
        np.cumsum(lengths[:-1].astype(np.int64) * self.dtype.itemsize, out=pointers[1:])
        documents = np.asarray(self._documents, np.int64)
        header = MAGIC + struct.pack("<QBQQ", VERSION, CODES[self.dtype], len(lengths), len(documents))
        try:
            with open(self._tmp_idx, "xb") as f:
                f.write(header + lengths.tobytes() + pointers.tobytes() + documents.tobytes())
            read_index(self._tmp_idx)  # what is renamed into place is a valid index
            os.replace(self._tmp_bin, self.bin_path)
            os.replace(self._tmp_idx, self.idx_path)
        except OSError as exc:
            self._remove_temporaries()
            raise BadInput(f"cannot write {self.idx_path} ({exc.strerror}); "
                           "choose a prefix in a writable folder") from None
        except BaseException:
            self._remove_temporaries()
            raise
        return read_index(self.idx_path)

    def abort(self) -> None:
        """Drop what was written; an existing dataset under the prefix is left as it was."""
        try:
            if self._bin is not None:
                self._bin.close()
        except OSError:  # what was buffered cannot be written: it is dropped anyway
            pass
        self._remove_temporaries()

    def _remove_temporaries(self) -> None:
        for tmp in (self._tmp_bin, self._tmp_idx):
            tmp.unlink(missing_ok=True)

    def __enter__(self) -> IndexedDatasetWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.finalize()
        else:
            self.abort()


class GPTSamples:
    """GPT training samples in Megatron's way: documents in a seeded random order, a new order each epoch,
    concatenated and cut into samples of seq_length + 1 tokens (inputs and shifted labels); sample i starts at
    token i * seq_length, so consecutive samples share one token.

    `len(ds)` is the samples of one epoch, or num_samples when given (as many epochs as they need; a sample
    may run from one epoch into the next). `ds[i]` is an int64 array of seq_length + 1 token ids. Each epoch's
    order is a pure function of (seed, epoch), so any rank can read any sample without building a shared index.
    Samples are read in order, not shuffled again as Megatron's shuffle index does: for a throughput benchmark
    the order of samples does not matter, and the documents are already shuffled.
    """

    def __init__(self, prefix: str | os.PathLike, seq_length: int, seed: int, num_samples: int | None = None):
        if seq_length < 1:
            raise BadInput(f"seq_length={seq_length}; it must be at least 1")
        self.data = IndexedDataset(prefix)
        self.seq_length, self.seed = seq_length, seed
        self.lengths = self.data.index.sequence_lengths.astype(np.int64)
        self.tokens_per_epoch = int(self.lengths.sum())
        if self.tokens_per_epoch < seq_length + 1:
            raise BadInput(f"{self.data.prefix} holds {self.tokens_per_epoch} tokens, fewer than one sample of "
                           f"seq_length + 1 = {seq_length + 1}; use a shorter seq_length or more data")
        self.samples_per_epoch = (self.tokens_per_epoch - 1) // seq_length
        if num_samples is not None and num_samples < 0:
            raise BadInput(f"num_samples={num_samples}; it must be 0 or more")
        self.num_samples = self.samples_per_epoch if num_samples is None else num_samples
        self._epochs: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def __len__(self) -> int:
        return self.num_samples

    def _epoch(self, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        """This epoch's document order and, for each place in it, the token position where that document ends."""
        if epoch not in self._epochs:
            if len(self._epochs) > 2:  # reads move forward: keep the few epochs in use
                self._epochs.clear()
            order = np.random.default_rng((self.seed, epoch)).permutation(len(self.lengths))
            self._epochs[epoch] = order, np.cumsum(self.lengths[order])
        return self._epochs[epoch]

    def __getitem__(self, i: int) -> np.ndarray:
        if i < 0:
            i += self.num_samples
        if not 0 <= i < self.num_samples:
            raise IndexError(f"sample {i} of {self.num_samples}")
        out = np.empty(self.seq_length + 1, np.int64)
        filled = 0
        epoch, position = divmod(i * self.seq_length, self.tokens_per_epoch)
        while filled < len(out):
            order, ends = self._epoch(epoch)
            place = int(np.searchsorted(ends, position, side="right"))  # the document holding `position`
            while place < len(order) and filled < len(out):
                doc = int(order[place])
                offset = position - (int(ends[place]) - int(self.lengths[doc]))
                piece = self.data.get(doc, offset, len(out) - filled)
                out[filled:filled + len(piece)] = piece
                filled += len(piece)
                position += len(piece)
                place += 1
            epoch, position = epoch + 1, 0
        return out


SCAN_TOKENS = 1 << 24  # tokens per chunk of a token-id scan: 64 MiB of int32 at a time


def token_id_range(dataset: IndexedDataset, chunk: int = SCAN_TOKENS) -> tuple[int, int] | None:
    """The smallest and largest token id in the dataset's `.bin`, by a scan of the memory-mapped file in chunks
    (the file is never read whole); None when it holds no token. Integer dtypes only (a float has no id)."""
    tokens = dataset.tokens
    if dataset.index.dtype.kind not in "iu":
        raise ValueError(f"token dtype {dataset.index.dtype.name} holds no integer ids")
    if not len(tokens):
        return None
    lo, hi = None, None
    for start in range(0, len(tokens), max(1, chunk)):
        part = tokens[start:start + chunk]
        a, b = int(part.min()), int(part.max())
        lo, hi = a if lo is None else min(lo, a), b if hi is None else max(hi, b)
    return lo, hi
