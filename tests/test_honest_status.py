"""Issue 20, honest status: a GPT dataset whose ids the vocabulary cannot hold is refused before training."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import cli

from caraml.data.megatron import IndexedDataset, IndexedDatasetWriter, token_id_range
from caraml.errors import BadInput
from caraml.workloads.llm_training.data import check_token_ids


def dataset(tmp_path, dtype, documents, name="ds") -> IndexedDataset:
    prefix = tmp_path / name
    with IndexedDatasetWriter(prefix, dtype) as writer:
        for doc in documents:
            writer.add_document(np.asarray(doc))
    return IndexedDataset(prefix)


# token ids against the vocabulary ------------------------------------------------------------------------------------
def test_gpt2_ids_under_the_smoke_vocabulary_are_one_line_exit_2(tmp_path):
    rng = np.random.default_rng(0)
    docs = [rng.integers(0, 500, size=200).tolist() for _ in range(3)] + [[7, 50256, 3] * 30]
    dataset(tmp_path, np.uint16, docs, "gpt2")
    proc = cli("run", "llm_training", "--preset", "smoke", "data=oscar", f"data_path={tmp_path / 'gpt2'}", "power=off",
               "--results", tmp_path / "res", check=2)
    err = proc.stderr.strip()
    assert "largest token id 50256" in err and "vocab_size=500" in err and "vocab_size >= 50257" in err, err
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "res" / "runs").exists() or not list((tmp_path / "res" / "runs").glob("*.json"))


@pytest.mark.parametrize("dtype, docs, vocab, says", [
    (np.int16, [[1, 2, 3], [4, -5, 6]], 500, "holds token id -5 (int16 tokens): ids must be 0 or more"),
    (np.int64, [[1, 2, 3], [-70000, 4]], 500, "holds token id -70000 (int64 tokens)"),
    (np.int32, [[1, 2, 70000]], 50257, "largest token id 70000"),
    (np.float32, [[1.0, 2.0, float("nan")]], 500, "stores tokens as float32, which are not token ids"),
    (np.float64, [[1.0, 2.0]], 500, "stores tokens as float64"),
])
def test_dataset_ids_outside_the_vocabulary_are_refused(tmp_path, dtype, docs, vocab, says):
    with pytest.raises(BadInput, match="data=oscar") as err:
        check_token_ids(dataset(tmp_path, dtype, docs), vocab)
    assert says in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("dtype, docs, vocab", [
    (np.uint16, [[0, 499], [17]], 500),  # every id below 500
    (np.uint8, [[0, 255]], 500),  # the dtype cannot hold an id outside the vocabulary: no scan
    (np.int16, [[0, 3, 4]], 5),  # signed, but the scan finds no negative id
    (np.int32, [[0, 50256]], 50257),
])
def test_dataset_ids_inside_the_vocabulary_pass(tmp_path, dtype, docs, vocab):
    check_token_ids(dataset(tmp_path, dtype, docs), vocab)


def test_token_id_range_scans_in_chunks(tmp_path):
    ds = dataset(tmp_path, np.int32, [[5, 9, 2], [40, -3], [7]])
    assert token_id_range(ds) == token_id_range(ds, chunk=2) == token_id_range(ds, chunk=1) == (-3, 40)
