"""A command refused or stopped part-way leaves no file of its own behind: a run refused while building has no
events file beside no record; `data prepare` stopped by SIGTERM or SIGHUP removes its hidden temporary files."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest
from conftest import HANG_S, cli, cli_env, wait_until
from test_data_megatron import bpe_files  # noqa: F401 (a fixture)


def test_a_run_refused_while_building_leaves_no_events_file(tmp_path):
    results = tmp_path / "results"
    proc = cli("run", "fno", "--preset", "smoke-RBC2D", "data=synthetic", "samples=2", "power=off", "--results",
               results, check=2)
    assert proc.stderr.splitlines()[-1].startswith("caraml: error: fno: samples=2 leave 1 for training")
    assert [p.name for p in (results / "runs").iterdir()] == []  # the folder the run checked it could write


def _temporaries(folder):
    return sorted(p.name for p in folder.glob(".*.tmp"))


@pytest.mark.subprocess
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_data_prepare_stopped_by_a_signal_removes_its_temporary_files(tmp_path, bpe_files, sig):  # noqa: F811
    vocab, merges = bpe_files
    src = tmp_path / "big.txt"
    src.write_text("a document that is long enough to take the tokenizer a while to get through\n" * 400_000)
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "caraml", "data", "prepare", str(src), "--output-prefix",
                             str(out / "big"), "--vocab", str(vocab), "--merges", str(merges)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env())
    try:
        wait_until(lambda: out.is_dir() and _temporaries(out), "the hidden .big.bin temporary file", proc=proc)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=HANG_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130 and "caraml: interrupted" in err and "Traceback" not in err, err
    assert _temporaries(out) == [] and not (out / "big.bin").exists() and not (out / "big.idx").exists()


def test_a_dataset_writer_creates_nothing_until_its_first_write(tmp_path):
    """A stop signal between building the writer and entering its `with` block has no __exit__ to clean up
    after it: a loaded machine once left `.big.bin.*.tmp` behind exactly there."""
    import numpy as np

    from caraml.data.megatron import IndexedDatasetWriter

    writer = IndexedDatasetWriter(tmp_path / "out" / "big", np.uint16)
    assert _temporaries(tmp_path / "out") == []
    with writer:
        writer.add_document([1, 2])
        assert len(_temporaries(tmp_path / "out")) == 1
    assert _temporaries(tmp_path / "out") == [] and (tmp_path / "out" / "big.bin").stat().st_size == 4


def test_an_empty_dataset_is_still_written_whole(tmp_path):
    import numpy as np

    from caraml.data.megatron import IndexedDataset, IndexedDatasetWriter

    with IndexedDatasetWriter(tmp_path / "empty", np.uint16):
        pass
    assert len(IndexedDataset(tmp_path / "empty")) == 0 and _temporaries(tmp_path) == []
