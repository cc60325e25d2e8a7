"""Which engine made a number, and CARAML's own columns carrying CARAML's figures. In process, hand-written records."""

from __future__ import annotations

import json

from conftest import cli
from handmade import fno, image, llm, write


def _rows(results, *args):
    return json.loads(cli("result", "--results", results, "--format", "rows-json", *args, check=0).stdout)


def _headers(results, *args):
    return cli("result", "--results", results, "--format", "csv", *args, check=0).stdout.splitlines()[0].split(",")


# which engine ----------------------------------------------------------------------------------------------------
def _llm_pair(results, second="megatron-core"):
    native = llm("H100", "800M", 4, 1, 1, 256, 400_000.0)
    other = llm("H100", "800M", 4, 1, 1, 256, 380_000.0, started="2026-12-01T11:00:00.000+00:00")
    other["params"]["backend"] = second
    from handmade import config_id_of

    other["id"] = config_id_of("llm_training", other["params"], "H100", 4, 1)  # a run's: the engine is configuration
    write(results, native)
    write(results, other)


def test_native_and_megatron_core_figures_are_two_rows_that_name_their_engine(tmp_path):
    _llm_pair(tmp_path)
    rows = _rows(tmp_path)
    assert sorted((r["engine"], r["throughput"]) for r in rows) == [("megatron-core", 380_000.0),
                                                                     ("native", 400_000.0)]
    assert "Engine" in _headers(tmp_path)


def test_the_engine_shows_beside_the_columns_asked_for_when_rows_differ_in_it(tmp_path):
    _llm_pair(tmp_path)
    assert _headers(tmp_path, "--columns", "system,throughput") == ["System", "Engine", "Tokens/s"]


def test_one_engine_needs_no_engine_column(tmp_path):
    write(tmp_path, llm("H100", "800M", 4, 1, 1, 256, 400_000.0))
    write(tmp_path, llm("A100", "800M", 4, 1, 1, 256, 200_000.0))
    assert "Engine" not in _headers(tmp_path) and "Engine" not in _headers(tmp_path, "--columns", "system")


def test_image_classification_names_torch_and_poptorch_rows(tmp_path):
    write(tmp_path, image("H100", 64, "bf16", 2500.0))
    ipu = image("GC200", 64, "bf16", 1500.0)
    ipu["params"]["backend"] = "poptorch"
    from handmade import config_id_of

    ipu["id"] = config_id_of("image_classification", ipu["params"], "GC200", 1, 1)
    write(tmp_path, ipu)
    rows = _rows(tmp_path, "--columns", "system,throughput")
    assert sorted((r["system"], r["engine"]) for r in rows) == [("GC200", "poptorch"), ("H100", "torch")]


def test_a_comparison_of_mixed_engines_names_them(tmp_path):
    _llm_pair(tmp_path)
    write(tmp_path, llm("A100", "800M", 4, 1, 1, 256, 200_000.0, started="2026-12-01T12:00:00.000+00:00"))
    text = cli("compare", "--results", tmp_path, "--by", "system", "--format", "csv", check=0).stdout
    assert "Engine" in text.splitlines()[1] and "megatron-core" in text and "native" in text


# CARAML's headers carry CARAML's figures ---------------------------------------------------------------------------
def _caraml_log_run(results, caraml_config="2024"):
    rec = llm("GH200", "800M", 1, 1, 1, 512, 100_000.0, extra_metrics={
        "caraml_iterations": 120, "caraml_time_per_iteration_s": 11.5, "caraml_tflops_per_device": 380.0,
        "caraml_tokens_per_s": {"value": 91_000.0, "unit": "tokens/s", "convention": "caraml-log"}})
    rec["params"].update(caraml_config=caraml_config, convention="caraml-log")
    write(results, rec)
    return rec


# the README's command for CARAML's `jube result` table
README_COLUMNS = ("job_id,system,version,queue,job_time,runtime_min,model,model_size,dataset,caraml_iterations,"
                  "caraml_time_per_iteration_s,caraml_tokens_per_s,caraml_tflops_per_device,time_to_report_s,"
                  "energy_file")


def test_caramls_llm_headers_show_caramls_figures_and_ours_show_ours(tmp_path):
    rec = _caraml_log_run(tmp_path)
    ours = "iterations,time_per_iteration_s,throughput,tflops_caraml_per_device"
    text = cli("result", "--results", tmp_path, "--format", "csv", "--columns", README_COLUMNS + "," + ours,
               check=0).stdout.splitlines()
    row = dict(zip(text[0].split(","), text[1].split(",")))
    m = rec["metrics"]
    assert (row["Iterations"], row["Time/iteration(s)"], row["Tokens/second"], row["Avg_TFLOPs/GPU"]) == (
        "120", "11.5", "91000.0", "380.0")
    assert (row["MeasuredSteps"], row["Tokens/s"]) == ("20", "100000.0")
    assert float(row["IterationTime s"]) == m["time_per_iteration_s"]
    assert float(row["TFLOP/s/GPU (CARAML formula)"]) == m["tflops_caraml_per_device"]


def test_a_caraml_header_asked_for_by_name_is_caramls_figure(tmp_path):
    _caraml_log_run(tmp_path)
    [row] = _rows(tmp_path, "--columns", "Tokens/second,Time/iteration(s),Avg_TFLOPs/GPU")
    assert (row["caraml_tokens_per_s"], row["caraml_time_per_iteration_s"], row["caraml_tflops_per_device"]) == (
        91_000.0, 11.5, 380.0)
    # a key wins over a header: `iterations` is ours, and says so in its header
    assert _headers(tmp_path, "--columns", "iterations,caraml_iterations") == ["MeasuredSteps", "Iterations"]


def test_a_steady_run_leaves_caramls_headers_out(tmp_path):
    write(tmp_path, llm("H100", "800M", 4, 1, 1, 256, 400_000.0))
    headers = _headers(tmp_path)
    assert "Tokens/s" in headers and "Tokens/second" not in headers and "Iterations" not in headers


def test_the_llms_version_is_caramls_configuration(tmp_path):
    _caraml_log_run(tmp_path / "a", "2024")
    _caraml_log_run(tmp_path / "b", "2025")
    write(tmp_path / "c", llm("H100", "800M", 4, 1, 1, 256, 400_000.0))
    versions = [_rows(tmp_path / d, "--columns", "version")[0]["version"] for d in "abc"]
    assert versions == ["2024.01", "2025.01", None]


def test_fnos_compile_mode_reads_eager_where_nothing_is_compiled(tmp_path):
    eager = fno("H100", "RBC2D", 1, 20, "fp16", "default", 3000.0, train=2900.0)
    eager["params"]["compile"] = "none"
    write(tmp_path, eager)
    write(tmp_path, fno("A100", "RBC2D", 1, 20, "fp16", "max-autotune", 2000.0, train=1900.0))
    rows = _rows(tmp_path, "--columns", "system,compile,compile_mode")
    assert sorted((r["system"], r["compile_mode"]) for r in rows) == [("A100", "max-autotune"), ("H100", "eager")]
    [row] = _rows(tmp_path, "--columns", "system", "--where", "compile_mode=eager")  # CARAML's word filters too
    assert row["system"] == "H100"
