"""Honest status: a GPT dataset whose ids the vocabulary cannot hold is refused before training."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from conftest import cli, needs_shared_data

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


# diverged: measured, but nothing trained ------------------------------------------------------------------------------
def smoke_bench(**overrides):
    from caraml.runner import RunSpec, build_bench

    return build_bench(RunSpec("llm_training", overrides, "smoke"), device="cpu")


def measure(bench, warmup=1, steps=3):
    for _ in range(warmup):
        bench.step()
    bench.begin_measure()
    for _ in range(steps):
        bench.step()
    return bench.health()


def test_a_run_that_trains_is_healthy():
    assert measure(smoke_bench()) is None


def test_a_loss_that_is_not_finite_at_the_end_is_diverged():
    reason = measure(smoke_bench(lr=1e9))
    assert reason.startswith("the loss is nan at the end of the measured window (3 steps)")
    assert "lower lr (now 1e+09)" in reason


def test_fp16_with_every_measured_step_skipped_is_diverged():
    bench = smoke_bench(precision="fp16")
    bench.step()  # one real update before the window: the window's own updates count
    bench.scaler.scale = 1e30  # every scaled gradient overflows fp16 from here on; the loss stays finite
    reason = measure(bench, warmup=0, steps=3)
    assert bench.updates == 1 and bench.scaler.skipped == 3 and all(map(math.isfinite, bench.loss_values()))
    assert reason.startswith("the optimizer never stepped in the 3 measured steps: the fp16 loss scaler skipped")


def test_diverged_run_is_its_own_status_exit_1_shown_and_kept_out_of_comparisons(tmp_path):
    from handmade import llm, write

    from caraml.results.record import validate

    res = tmp_path / "res"
    proc = cli("run", "llm_training", "--preset", "smoke", "lr=1e9", "power=off", "--json", "--results", res)
    assert proc.returncode == 1, proc.stderr
    record = json.loads(proc.stdout)
    assert record["status"] == "diverged" and validate(record) == []
    assert "training diverged" in record["error"] and record["metrics"]["loss"]["finite"] is False
    assert record["metrics"]["throughput"]["value"] > 0  # the figures are kept, the status says what they are
    table = cli("result", "--results", res, check=0).stdout
    assert "diverged" in table

    # compare: a diverged point is no successful run of its configuration, like oom or failed
    both = tmp_path / "both"
    write(both, llm("A100", "800M", 4, 1, 1, 16, 1000.0))
    write(both, llm("H100", "800M", 4, 1, 1, 16, 2000.0, status="diverged"))
    out = json.loads(cli("compare", "--results", both, "--by", "system", "--format", "json", check=0).stdout)
    (group,) = out
    assert group["rows"] == [] and "no successful run for system=H100 (diverged)" in str(group["not_compared"])


# the model_size label is the shape's ----------------------------------------------------------------------------------
def test_a_named_size_on_another_shape_is_one_line_exit_2(tmp_path):
    proc = cli("run", "llm_training", "--preset", "smoke", "model_size=13B", "power=off", "--results", tmp_path,
               check=2)
    err = proc.stderr.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert ("model_size=13B is the shape num_layers=40, hidden_size=5120, num_attention_heads=32, "
            "ffn_hidden_size=20480, but this model has num_layers=2, hidden_size=64") in err
    assert "give model_size=custom" in err


@pytest.mark.parametrize("preset, overrides, says", [
    ("smoke", {"num_layers": 4}, "model_size=smoke is the shape num_layers=2, hidden_size=64, num_attention_heads=4, "
                                 "ffn_hidden_size=256, but this model has num_layers=4;"),
    ("800M", {"ffn_hidden_size": 4096}, "but this model has ffn_hidden_size=4096;"),
    (None, {"model_size": "175B"}, "model_size=175B is the shape num_layers=96"),  # the defaults are 800M's shape
    ("smoke", {"model_size": "custom", "num_layers": 4}, None),
    ("smoke", {"ffn_hidden_size": 256}, None),  # 4 x hidden_size given as a number: the same shape
    ("117M", {}, None), ("800M", {}, None), ("13B", {}, None), ("175B", {}, None), (None, {}, None),
])
def test_size_label_must_match_the_shape(preset, overrides, says):
    from caraml.runner import RunSpec, resolve
    from caraml.workloads.llm_training import WORKLOAD

    values = resolve(RunSpec("llm_training", overrides, preset)).values
    devices = values["tp"] * values["pp"]
    problem = WORKLOAD.launch_problem(values, devices)  # what a sweep asks of each point before it runs
    assert problem is None if says is None else says in problem, problem


@pytest.mark.parametrize("workload, preset", [("image_classification", "smoke"), ("fno", "smoke-RBC2D")])
def test_weights_gone_nan_are_diverged_in_the_other_workloads(tmp_path, workload, preset):
    from caraml.runner import RunSpec, build_bench

    healthy = build_bench(RunSpec(workload, {}, preset), device="cpu")
    for _ in range(2):
        healthy.step()
    assert healthy.health() is None
    healthy.close()
    proc = cli("run", workload, "--preset", preset, "lr=1e30", "measure_steps=3", "power=off", "--json",
               "--results", tmp_path)
    record = json.loads(proc.stdout)
    assert proc.returncode == 1 and record["status"] == "diverged", proc.stderr
    assert "hold NaN or Inf after the run: training diverged" in record["error"] and "lr (now 1e+30)" in record["error"]
    assert record["metrics"]["throughput"]["value"] > 0


@pytest.mark.parametrize("status, rank_0, other_rank", [("diverged", 1, 0), ("interrupted", 1, 0), ("failed", 1, 1),
                                                        ("ok", 0, 0)])
def test_only_rank_0_exits_non_zero_for_a_status_all_ranks_agree_on(monkeypatch, status, rank_0, other_rank):
    """torchrun ends every rank when one exits non-zero: a status every rank reaches together (diverged: the
    global loss; interrupted: an agreed stop) must not end rank 0 before it has saved the record."""
    import types

    import caraml.distributed
    import caraml.runner
    from caraml import cli as cli_mod

    monkeypatch.setattr(caraml.runner, "execute", lambda spec: {"status": status, "path": None})
    args = types.SimpleNamespace(workload="llm_training", params=[], preset="smoke", system=None, force_system=False,
                                 results="r", json=True)
    for main, want in ((True, rank_0), (False, other_rank)):
        monkeypatch.setattr(caraml.distributed, "launch_env", lambda main=main: types.SimpleNamespace(is_main=main))
        assert cli_mod._run(args) == want, (status, main)


@needs_shared_data("gpt2-vocab.json", "gpt2-merges.txt")
def test_the_readme_own_data_path_under_the_smoke_preset_says_which_vocab_size_fits(tmp_path):
    """`caraml data prepare corpus.txt` (GPT-2 ids, with <|endoftext|> = 50256), then the smoke
    preset (vocab_size=500) on it: refused before training, naming vocab_size=50257; with it the run trains."""
    from conftest import SHARED_DATA

    vocab, merges = SHARED_DATA / "gpt2-vocab.json", SHARED_DATA / "gpt2-merges.txt"
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(f"Document {i}: the quick brown fox jumps over the lazy dog.\n" for i in range(40)))
    prefix = tmp_path / "corpus"
    cli("data", "prepare", corpus, "--output-prefix", prefix, "--vocab", vocab, "--merges", merges, "--append-eod",
        check=0)
    run = ("run", "llm_training", "--preset", "smoke", "data=oscar", f"data_path={prefix}", "power=off",
           "measure_steps=2", "--results", tmp_path / "res")
    err = cli(*run, check=2).stderr.strip()
    assert err.endswith("is outside vocab_size=500; use vocab_size >= 50257") and len(err.splitlines()) == 1, err
    assert json.loads(cli(*run, "vocab_size=50257", "--json", check=0).stdout)["status"] == "ok"
