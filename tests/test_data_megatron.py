"""Megatron indexed datasets (.bin/.idx), the GPT-2 tokenizer, `caraml data prepare/info`, GPT samples."""

from __future__ import annotations

import errno
import json
import pickle
import struct

import numpy as np
import pytest
from conftest import SHARED_DATA, caraml, cli, cli_env, needs_shared_data

from caraml.data.megatron import GPTSamples, IndexedDataset, IndexedDatasetWriter, locate, read_index
from caraml.data.tokenizer import GPT2Tokenizer
from caraml.errors import BadInput

REAL_IDX = SHARED_DATA / "oscar_text_document.idx"
REAL_VOCAB, REAL_MERGES = SHARED_DATA / "gpt2-vocab.json", SHARED_DATA / "gpt2-merges.txt"
needs_real_index = needs_shared_data(REAL_IDX.name)
needs_real_bpe = needs_shared_data(REAL_VOCAB.name, REAL_MERGES.name)


def write(prefix, docs, dtype=np.uint16):
    with IndexedDatasetWriter(prefix, dtype) as w:
        for doc in docs:
            w.add_document(doc)
    return prefix


def one_line_error(proc, *fragments) -> str:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize("dtype", [np.uint16, np.int32, np.uint8, np.int64])
def test_round_trip(tmp_path, dtype):
    rng = np.random.default_rng(0)
    high = min(np.iinfo(dtype).max, 50257)
    docs = [rng.integers(0, high, n) for n in (7, 1, 0, 300, 2)]
    ds = IndexedDataset(write(tmp_path / "rt", docs, dtype))
    assert len(ds) == 5 and ds.index.documents == 5 and ds.index.dtype == np.dtype(dtype)
    assert ds.index.tokens == sum(map(len, docs))
    for doc, got in zip(docs, (ds[i] for i in range(len(ds)))):
        assert np.array_equal(doc, got)
    assert list(ds.get(3, 10, 5)) == list(docs[3][10:15])
    assert list(ds.get(0, 5, 100)) == list(docs[0][5:])  # clipped at the sequence's end


def test_writer_layout_is_megatrons(tmp_path):
    """The .idx for lengths 3, 0, 5 of uint16 tokens, spelled out field by field from the format."""
    write(tmp_path / "lay", [[1, 2, 3], [], [4, 5, 6, 7, 65535]])
    expected = (b"MMIDIDX\x00\x00" + struct.pack("<Q", 1) + struct.pack("<B", 8) + struct.pack("<Q", 3)
                + struct.pack("<Q", 4) + struct.pack("<3i", 3, 0, 5) + struct.pack("<3q", 0, 6, 6)
                + struct.pack("<4q", 0, 1, 2, 3))
    assert (tmp_path / "lay.idx").read_bytes() == expected
    assert (tmp_path / "lay.bin").read_bytes() == struct.pack("<8H", 1, 2, 3, 4, 5, 6, 7, 65535)


def test_prefixes_with_dots_and_lookup_under_caraml_data(tmp_path):
    write(tmp_path / "corpus.v2_text_document", [[1, 2, 3]])
    assert (tmp_path / "corpus.v2_text_document.idx").is_file()
    assert list(IndexedDataset(tmp_path / "corpus.v2_text_document.bin")[0]) == [1, 2, 3]  # .bin/.idx also name it
    assert locate("corpus.v2_text_document", str(tmp_path)) == tmp_path / "corpus.v2_text_document"
    with pytest.raises(BadInput, match="set CARAML_DATA"):
        locate("corpus.v2_text_document", None)


def test_writer_refuses_tokens_that_do_not_fit(tmp_path):
    with pytest.raises(BadInput, match="do not fit uint16"):
        write(tmp_path / "big", [[1, 70000]])
    assert not (tmp_path / "big.bin").exists() and not (tmp_path / "big.idx").exists()


@needs_real_index
def test_real_caraml_index():
    index = read_index(REAL_IDX)
    assert (index.sequences, index.documents, index.tokens) == (790, 790, 2_340_256)
    assert index.dtype == np.uint16 and len(index.document_indices) == 791
    assert index.bin_bytes == 4_680_512  # the size of CARAML's oscar_text_document.bin
    assert (index.sequence_lengths.min(), index.sequence_lengths.max()) == (1025, 140_519)


@needs_real_index
def test_writer_reproduces_the_real_index_byte_for_byte(tmp_path):
    lengths = read_index(REAL_IDX).sequence_lengths
    write(tmp_path / "copy", (np.zeros(n, np.uint16) for n in lengths))
    assert (tmp_path / "copy.idx").read_bytes() == REAL_IDX.read_bytes()


@pytest.mark.subprocess
@needs_real_index
def test_info_on_the_real_index_without_its_bin():
    out = caraml("data", "info", REAL_IDX, check=0).stdout
    assert "sequences  790\n" in out and "tokens     2340256\n" in out and "uint16" in out and "missing" in out


def _corrupt(prefix, how):
    idx, bin_ = prefix.with_suffix(".idx"), prefix.with_suffix(".bin")
    raw = bytearray(idx.read_bytes())
    if how == "magic":
        raw[:9] = b"NOTANIDX\x00"
    elif how == "version":
        raw[9:17] = struct.pack("<Q", 2)
    elif how == "dtype":
        raw[17] = 9
    elif how == "short":
        raw = raw[:20]
    elif how == "truncated":
        raw = raw[:-8]
    elif how == "document-index":
        raw[-8:] = struct.pack("<q", 1)  # the last entry must be the sequence count, 3
    elif how == "bin-short":
        bin_.write_bytes(bin_.read_bytes()[:-2])
    elif how == "bin-other":  # a .bin from another dataset
        bin_.write_bytes(bin_.read_bytes() * 2)
    elif how == "no-idx":
        idx.unlink()
        return
    idx.write_bytes(bytes(raw))


@pytest.mark.parametrize("how,says", [
    ("magic", "not a Megatron index (magic b'NOTANIDX"), ("version", "version 2, not 1"),
    ("dtype", "dtype code 9"), ("short", "shorter than the 34-byte header"), ("truncated", "truncated"),
    ("document-index", "document index"), ("bin-short", "mismatched or truncated"),
    ("bin-other", "mismatched or truncated"), ("no-idx", "does not exist"),
])
@pytest.mark.subprocess
def test_bad_files_are_one_line_exit_2(tmp_path, how, says):
    prefix = write(tmp_path / "bad", [[1, 2], [3], [4, 5, 6]])
    _corrupt(prefix, how)
    line = one_line_error(caraml("data", "info", prefix), says)
    assert str(tmp_path / "bad.") in line  # names the file


def test_samples_need_the_bin(tmp_path):
    prefix = write(tmp_path / "nobin", [[1, 2, 3]])
    (tmp_path / "nobin.bin").unlink()
    with pytest.raises(BadInput, match="nobin.bin does not exist"):
        GPTSamples(prefix, 2, 0)


def test_samples_overlap_by_one_and_cover_each_epoch(tmp_path):
    docs = [np.arange(n) + 1000 * k for k, n in enumerate((5, 0, 9, 1, 13, 4), 1)]
    tokens = sum(map(len, docs))  # 32
    ds = GPTSamples(write(tmp_path / "s", docs), seq_length=4, seed=3)
    assert len(ds) == (tokens - 1) // 4
    samples = [ds[i] for i in range(len(ds))]
    assert all(s.dtype == np.int64 and len(s) == 5 for s in samples)
    for a, b in zip(samples, samples[1:]):
        assert a[-1] == b[0]  # the last label of one sample is the first input of the next
    stream = np.concatenate([s[:-1] for s in samples] + [samples[-1][-1:]])
    order, _ = ds._epoch(0)
    assert np.array_equal(stream, np.concatenate([docs[d] for d in order])[:len(stream)])
    with pytest.raises(IndexError):
        ds[len(ds)]


def test_samples_are_deterministic_per_seed_and_run_on_across_epochs(tmp_path):
    docs = [np.arange(n) + 100 * k for k, n in enumerate((6, 3, 8, 2, 7, 5, 9, 4), 1)]
    prefix = write(tmp_path / "d", docs)
    a, b, c = GPTSamples(prefix, 8, 42, 20), GPTSamples(prefix, 8, 42, 20), GPTSamples(prefix, 8, 7, 20)
    assert len(a) == 20 > a.samples_per_epoch  # 44 tokens: 5 samples an epoch
    picked = pickle.loads(pickle.dumps(a))  # as a DataLoader worker gets it
    for i in range(20):
        assert np.array_equal(a[i], b[i]) and np.array_equal(a[i], picked[i])
    assert any(not np.array_equal(a[i], c[i]) for i in range(20))
    assert not np.array_equal(a._epoch(0)[0], a._epoch(1)[0])  # a new order each epoch
    # sample 5 starts at token 40 of epoch 0 and runs 4 tokens into epoch 1
    epoch0 = np.concatenate([docs[d] for d in a._epoch(0)[0]])
    epoch1 = np.concatenate([docs[d] for d in a._epoch(1)[0]])
    assert np.array_equal(a[5], np.concatenate([epoch0[40:], epoch1[:5]]))


def test_too_few_tokens_for_one_sample(tmp_path):
    prefix = write(tmp_path / "tiny", [[1, 2, 3], [4]])
    assert len(GPTSamples(prefix, 3, 0)) == 1
    with pytest.raises(BadInput, match="holds 4 tokens, fewer than one sample of seq_length \\+ 1 = 5"):
        GPTSamples(prefix, 4, 0)


@needs_real_bpe
def test_gpt2_tokenizer_on_the_real_files():
    tok = GPT2Tokenizer(REAL_VOCAB, REAL_MERGES)
    assert tok.encode("Hello world") == [15496, 995]
    assert tok.encode(" Hello") == [18435]
    assert (tok.eod, tok.vocab_size) == (50256, 50257)
    assert tok.encode("<|endoftext|>") == [27, 91, 437, 1659, 5239, 91, 29]  # plain text, as Megatron's
    text = "Grüße, 世界!  two  spaces\n\nit's"
    assert tok.decode(tok.encode(text)) == text


def test_tokenizer_bad_files(tmp_path):
    with pytest.raises(BadInput, match="does not exist"):
        GPT2Tokenizer(tmp_path / "gpt2-vocab.json", tmp_path / "gpt2-merges.txt")
    (tmp_path / "v.json").write_text("{not json")
    (tmp_path / "m.txt").write_text("#version: 0.2\n")
    with pytest.raises(BadInput, match="is not JSON"):
        GPT2Tokenizer(tmp_path / "v.json", tmp_path / "m.txt")
    (tmp_path / "v.json").write_text('{"a": 0}')
    with pytest.raises(BadInput, match="no '<|endoftext|>' entry"):
        GPT2Tokenizer(tmp_path / "v.json", tmp_path / "m.txt")
    (tmp_path / "v.json").write_text('{"a": 0, "<|endoftext|>": 1}')
    (tmp_path / "m.txt").write_text("#version: 0.2\nq z\n")
    with pytest.raises(BadInput, match="not GPT-2 BPE files") as err:
        GPT2Tokenizer(tmp_path / "v.json", tmp_path / "m.txt")
    assert "\n" not in str(err.value)


@pytest.fixture
def bpe_files(tmp_path):
    """The real GPT-2 files when there; else a byte-level BPE without merges (one token per byte) to test with."""
    if REAL_VOCAB.is_file() and REAL_MERGES.is_file():
        return REAL_VOCAB, REAL_MERGES
    from tokenizers import pre_tokenizers

    vocab = {ch: i for i, ch in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    vocab["<|endoftext|>"] = len(vocab)
    (tmp_path / "gpt2-vocab.json").write_text(json.dumps(vocab))
    (tmp_path / "gpt2-merges.txt").write_text("#version: 0.2\n")
    return tmp_path / "gpt2-vocab.json", tmp_path / "gpt2-merges.txt"


TEXTS = ["The quick brown fox jumps over the lazy dog.", "Zwölf Boxkämpfer jagen Viktor quer über den Sylter Deich.",
         "", "Megatron cuts documents into samples of seq_length + 1 tokens.", "short", "Ünïcödé ✓ 世界"]


@pytest.mark.subprocess
def test_prepare_info_and_samples_end_to_end(tmp_path, bpe_files):
    vocab, merges = bpe_files
    src = tmp_path / "docs.jsonl"
    src.write_text("".join(json.dumps({"id": i, "body": t}) + "\n" for i, t in enumerate(TEXTS)) + "\n")
    prefix = tmp_path / "out" / "docs"
    proc = caraml("data", "prepare", src, "--output-prefix", prefix, "--vocab", vocab, "--merges", merges,
                  "--json-key", "body", "--append-eod", check=0)
    tok = GPT2Tokenizer(vocab, merges)
    ids = [tok.encode(t) + [tok.eod] for t in TEXTS if t]
    tokens = sum(map(len, ids))
    assert f"wrote 5 documents, {tokens} tokens (uint16)" in proc.stdout and "1 empty documents skipped" in proc.stdout
    info = caraml("data", "info", prefix, check=0).stdout
    assert "sequences  5\n" in info and "documents  5\n" in info and f"tokens     {tokens}\n" in info
    assert "matches the index" in info
    ds = IndexedDataset(prefix)
    assert [list(ds[i]) for i in range(len(ds))] == ids

    seq = 8
    samples = GPTSamples(prefix, seq, seed=1, num_samples=-(-tokens // seq))  # just past the first epoch
    stream = np.concatenate([samples[i][:-1] for i in range(len(samples))])[:tokens]
    texts = tok.decode(stream).split("<|endoftext|>")
    assert texts[-1] == "" and sorted(texts[:-1]) == sorted(t for t in TEXTS if t)


@pytest.mark.subprocess
def test_prepare_plain_text_one_document_per_line(tmp_path, bpe_files):
    vocab, merges = bpe_files
    (tmp_path / "docs.txt").write_text("first document\n\nsecond one\n")
    caraml("data", "prepare", tmp_path / "docs.txt", "--output-prefix", tmp_path / "t", "--vocab", vocab,
           "--merges", merges, check=0)
    tok = GPT2Tokenizer(vocab, merges)
    ds = IndexedDataset(tmp_path / "t")
    assert [tok.decode(ds[i]) for i in range(len(ds))] == ["first document", "second one"]


@pytest.mark.parametrize("case,says", [
    ("missing-input", "nope.jsonl is not a file"), ("bad-json", "bad.jsonl:2: not JSON"),
    ("missing-key", "bad.jsonl:3: no key 'text' (found: body)"), ("unwritable", "cannot write"),
    ("no-tokenizer", "no tokenizer files"),
])
@pytest.mark.subprocess
def test_prepare_bad_input_is_one_line_exit_2(tmp_path, bpe_files, case, says):
    vocab, merges = bpe_files
    src = tmp_path / "bad.jsonl"
    lines = {"bad-json": ['{"text": "a"}', '{"text": "b"'], "missing-key": ['{"text": "a"}', "", '{"body": "b"}']}
    src.write_text("\n".join(lines.get(case, ['{"text": "a"}'])) + "\n")
    (tmp_path / "a-file").write_text("")
    prefix = tmp_path / ("a-file/x" if case == "unwritable" else "out")
    args = ["data", "prepare", tmp_path / "nope.jsonl" if case == "missing-input" else src, "--output-prefix", prefix]
    env = cli_env()
    env.pop("CARAML_DATA", None)
    if case != "no-tokenizer":
        args += ["--vocab", vocab, "--merges", merges]
    one_line_error(caraml(*args, env=env), says)
    assert not list(tmp_path.glob("out.*"))  # nothing half-written is left behind


# no data loss: an existing dataset is replaced only whole, only when asked, never by its own input --------
def _prepare(tmp_path, bpe_files, source, prefix, *extra):
    vocab, merges = bpe_files
    return cli("data", "prepare", source, "--output-prefix", prefix, "--vocab", vocab, "--merges", merges, *extra)


def _dataset_bytes(prefix):
    return prefix.with_suffix(".bin").read_bytes(), prefix.with_suffix(".idx").read_bytes()


def _no_temporaries(folder):
    return not [p for p in folder.iterdir() if p.name.endswith(".tmp")]


@pytest.mark.parametrize("half", [".bin", ".idx"])
def test_prepare_refuses_an_input_that_is_one_of_its_outputs(tmp_path, bpe_files, half):
    prefix = write(tmp_path / "self", [[1, 2, 3], [4, 5]])
    before = _dataset_bytes(prefix)
    proc = _prepare(tmp_path, bpe_files, prefix.with_suffix(half), prefix, "--format", "jsonl", "--overwrite")
    one_line_error(proc, f"the input {prefix.with_suffix(half)} is the output", "another --output-prefix")
    assert _dataset_bytes(prefix) == before


def test_prepare_keeps_an_existing_dataset_unless_told_to_overwrite(tmp_path, bpe_files):
    prefix = write(tmp_path / "keep", [[1, 2, 3]])
    before = _dataset_bytes(prefix)
    (tmp_path / "new.txt").write_text("a new document\n")
    one_line_error(_prepare(tmp_path, bpe_files, tmp_path / "new.txt", prefix), "already exist", "--overwrite")
    assert _dataset_bytes(prefix) == before
    assert _prepare(tmp_path, bpe_files, tmp_path / "new.txt", prefix, "--overwrite").returncode == 0
    assert _dataset_bytes(prefix) != before and len(IndexedDataset(prefix)) == 1
    assert _no_temporaries(tmp_path)


def test_a_failed_prepare_leaves_the_existing_dataset_whole(tmp_path, bpe_files):
    prefix = write(tmp_path / "keep", [[1, 2, 3]])
    before = _dataset_bytes(prefix)
    (tmp_path / "latin1.txt").write_bytes("first line\nZw\xf6lf\n".encode("latin-1"))
    one_line_error(_prepare(tmp_path, bpe_files, tmp_path / "latin1.txt", prefix, "--overwrite"), "not UTF-8")
    assert _dataset_bytes(prefix) == before and _no_temporaries(tmp_path)


def test_re_preparing_keeps_the_file_a_reader_has_mapped(tmp_path, bpe_files):
    """A run reading the dataset keeps its mapped .bin (its inode): the new pair is renamed into place."""
    prefix = write(tmp_path / "ds", [np.arange(4096) % 250])
    old_bin = prefix.with_suffix(".bin")
    inode = old_bin.stat().st_ino
    mapped = np.memmap(old_bin, dtype=np.uint16, mode="r")
    (tmp_path / "tiny.txt").write_text("tiny\n")
    assert _prepare(tmp_path, bpe_files, tmp_path / "tiny.txt", prefix, "--overwrite").returncode == 0
    # Had the old file been truncated in place, reading the mapping would be SIGBUS: check the inode first.
    assert old_bin.stat().st_ino != inode
    assert np.array_equal(mapped, np.arange(4096) % 250)
    assert IndexedDataset(prefix).index.documents == 1 and IndexedDataset(prefix).index.tokens < 10


def test_prepare_on_a_deeply_nested_jsonl_line_is_one_line_exit_2(tmp_path, bpe_files):
    (tmp_path / "deep.jsonl").write_text('{"text": "a"}\n' + "[" * 100_000 + "]" * 100_000 + "\n")
    one_line_error(_prepare(tmp_path, bpe_files, tmp_path / "deep.jsonl", tmp_path / "deep"),
                   "deep.jsonl:2: JSON nested too deeply")
    assert not list(tmp_path.glob("deep.bin")) and _no_temporaries(tmp_path)


class _FullDisk:
    """A file on a full disk: writes (or the flush at close) fail with ENOSPC."""

    def __init__(self, real, fail_on):
        self.real, self.fail_on = real, fail_on

    def write(self, data):
        if self.fail_on == "write":
            raise OSError(errno.ENOSPC, "No space left on device")
        return self.real.write(data)

    def close(self):
        self.real.close()
        if self.fail_on == "close":
            raise OSError(errno.ENOSPC, "No space left on device")


@pytest.mark.parametrize("fail_on", ["write", "close"])
def test_a_full_disk_during_prepare_is_one_line_and_keeps_the_old_dataset(tmp_path, bpe_files, monkeypatch, fail_on):
    from caraml.data import megatron

    prefix = write(tmp_path / "keep", [[1, 2, 3]])
    before = _dataset_bytes(prefix)
    def open_on_a_full_disk(path, mode="r", *args, **kw):
        real = open(path, mode, *args, **kw)
        return _FullDisk(real, fail_on) if mode == "xb" and ".bin." in str(path) else real  # the temporary .bin

    monkeypatch.setattr(megatron, "open", open_on_a_full_disk, raising=False)
    (tmp_path / "new.txt").write_text("a new document\n")
    proc = _prepare(tmp_path, bpe_files, tmp_path / "new.txt", prefix, "--overwrite")
    one_line_error(proc, f"cannot write {prefix}.bin (No space left on device)", "left as it was")
    assert _dataset_bytes(prefix) == before and _no_temporaries(tmp_path)
