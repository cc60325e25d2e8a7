"""What a fresh clone needs: the README's set-up line installs what the `caraml data` commands import, a command
that needs a file says where it comes from, and a test that needs the shared real data says so when it skips."""

from __future__ import annotations

import re
import sys

import pytest
from conftest import ROOT, SHARED_DATA, needs_shared_data

from caraml import cli


def test_the_readme_set_up_line_installs_the_hdf5_extra_fno_synthetic_imports():
    readme = (ROOT / "README.md").read_text()
    set_up = next(line for line in readme.splitlines() if "pip install" in line and "-e " in line)
    assert re.search(r"-e '?\.\[[^\]]*hdf5", set_up), set_up


def test_fno_synthetic_without_h5py_says_how_to_install_it_in_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "h5py", None)  # `import h5py` raises ImportError, as where it is absent
    assert cli.main(["data", "fno-synthetic", "RBC2D", "--smoke", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "pip install 'caraml[hdf5]'" in err, err


@pytest.mark.parametrize("tokenizer", [[], ["--vocab", "nowhere/gpt2-vocab.json", "--merges", "nowhere/m.txt"]])
def test_data_prepare_without_the_gpt2_files_names_where_they_come_from(tokenizer, tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("CARAML_DATA", raising=False)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("one document\n")
    assert cli.main(["data", "prepare", str(corpus), "--output-prefix", str(tmp_path / "c"), *tokenizer]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0, err
    assert "https://s3.amazonaws.com/models.huggingface.co/bert/gpt2-vocab.json" in err
    assert "https://s3.amazonaws.com/models.huggingface.co/bert/gpt2-merges.txt" in err


def test_a_test_that_needs_absent_shared_data_is_skipped_naming_the_folder_and_the_file():
    mark = needs_shared_data("gpt2-vocab.json", "no-such-file.bin")
    assert mark.args == (True,)
    reason = mark.kwargs["reason"]
    assert str(SHARED_DATA) in reason and "no-such-file.bin" in reason and "real data absent" in reason
