"""Suite expansion: JUBE tag semantics, the safe expression language, shipped suites' point counts, bad input."""

from __future__ import annotations

import json

import pytest
from conftest import caraml

from caraml.campaign import expr, tags
from caraml.campaign import suite as suite_mod
from caraml.campaign.expand import expand
from caraml.errors import BadInput


@pytest.mark.parametrize("text, active, expected", [
    ("H100", {"H100"}, True), ("H100", {"A100"}, False),
    ("!H100", {"A100"}, True), ("!H100", {"H100"}, False),
    ("A100|H100", {"H100"}, True), ("A100|H100", {"MI250"}, False),
    ("800M+!container", {"800M"}, True), ("800M+!container", {"800M", "container"}, False),
    ("a|b+c", {"a"}, True), ("a|b+c", {"b"}, False),  # + binds tighter than |, as in JUBE
    ("!(a|b)+c", {"c"}, True), ("!(a|b)+c", {"a", "c"}, False), ("!!a", {"a"}, True),
    ("a,b", {"b"}, True), ("a,!b", {"a", "b"}, False), ("a,!b", {"a"}, True),  # JUBE's old comma form
])
def test_tag_semantics(text, active, expected):
    assert tags.matches(text, active) is expected


@pytest.mark.parametrize("bad", ["", "a+", "|a", "(a", "a)", "a b", "a&b", "!"])
def test_bad_tag_expressions(bad):
    with pytest.raises(BadInput, match="does not parse"):
        tags.parse(bad)


def test_expressions_are_safe_and_typed():
    names = {"global_batch_size": 256, "devices": 4, "problem": "RBC3D"}
    assert expr.evaluate("global_batch_size / devices", names) == 64
    assert isinstance(expr.evaluate("global_batch_size / devices", names), int)
    assert expr.evaluate("global_batch_size / 3", names) == pytest.approx(85.333, abs=1e-3)
    assert expr.evaluate("max(1, devices // 8)", names) == 1
    assert expr.evaluate("25 if problem in ('RBC3D',) else 16", names) == 25
    for bad in ["__import__('os').system('true')", "open('/etc/passwd')", "devices.__class__", "[x for x in ()]",
                "lambda: 1", "2 ** 1000"]:
        with pytest.raises(BadInput):
            expr.evaluate(bad, names)
    with pytest.raises(BadInput, match="unknown name"):
        expr.evaluate("nodes * 2", names)


def _suite(tmp_path, text):
    path = tmp_path / "s.yaml"
    path.write_text(text)
    return suite_mod.load(str(path))


def test_sweeps_tags_derived_and_last_match_wins(tmp_path):
    s = _suite(tmp_path, """
workload: image_classification
params:
  precision:
    - {value: fp32}
    - {tag: "!CPU", value: [fp16, bf16]}
    - {tag: H100+bf16, value: bf16}
  compile: none,inductor
vars:
  global_batch_size: [64, 128]
derived:
  batch_size: global_batch_size / devices
""")
    cpu = expand(s, set(), "CPU")
    assert len(cpu) == 4 and {p.params["precision"] for p in cpu} == {"fp32"}
    assert sorted(p.params["batch_size"] for p in cpu) == [64, 64, 128, 128]
    h100 = expand(s, set(), "H100")  # 4 devices per node from the profile
    assert len(h100) == 8 and sorted({p.params["batch_size"] for p in h100}) == [16, 32]
    assert len(expand(s, {"bf16"}, "H100")) == 4  # the later, more specific alternative wins
    assert len({p.id for p in h100}) == 8


def test_ids_are_the_record_config_hash(tmp_path):
    from handmade import config_id_of

    s = _suite(tmp_path, "workload: image_classification\nparams:\n  batch_size: 8,16\n")
    a, b = expand(s, set(), "CPU"), expand(s, set(), "CPU")
    assert [p.id for p in a] == [p.id for p in b]
    p = a[0]
    assert p.id == config_id_of("image_classification", p.params, "CPU", 1, 1)


@pytest.mark.parametrize("name, tag_list, system, count", [
    ("image_classification", [], "CPU", 7),
    ("image_classification", ["bf16"], "H100", 7),
    ("image_classification", ["precision", "inductor", "inductor_mode"], "A100", 84),
    ("llm_training", ["800M"], "A100", 9),
    ("llm_training", ["13B"], "H100", 1),
    ("llm_training", ["175B"], "JUPITER", 1),
    ("fno", ["all"], "H100", 8),
    ("fno", ["RBC3D", "eval"], "H100", 1),
])
def test_shipped_suite_point_counts(name, tag_list, system, count):
    points = expand(suite_mod.load(name), set(tag_list), system)
    assert len(points) == count


def test_shipped_suites_values():
    ic = expand(suite_mod.load("image_classification"), set(), "H100")
    assert sorted(p.params["batch_size"] * p.world_size for p in ic) == [32, 64, 128, 256, 512, 1024, 2048]
    big = expand(suite_mod.load("llm_training"), {"175B"}, "JUPITER")[0]
    assert (big.nodes, big.params["tp"], big.params["pp"], big.params["num_layers"]) == (16, 8, 8, 96)
    fno = expand(suite_mod.load("fno"), {"all", "eval"}, "H100")
    assert {p.params["problem"] for p in fno} == {"PIC1D", "PIC2D", "RBC2D", "RBC3D"}
    assert {p.params["mode"] for p in fno} == {"eval"} and {p.devices_per_node for p in fno} == {1}


@pytest.mark.subprocess
def test_dry_run_json_and_listing(tmp_path):
    proc = caraml("sweep", "fno", "--tag", "all", "--system", "H100", "--dry-run", "--json", check=0)
    points = json.loads(proc.stdout)
    assert len(points) == 8 and all(len(p["id"]) == 16 and "params" in p for p in points)
    listed = caraml("sweep", "--list", check=0).stdout
    assert all(name in listed for name in ("image_classification", "llm_training", "fno"))
    text = caraml("sweep", "llm_training", "--tag", "13B", "--system", "H100", "--dry-run", check=0).stdout
    assert "tp=2" in text and "pp=2" in text and "nodes=44" in text


# CARAML's llm_benchmark_nvidia_amd.yaml on H100 (4 GPUs per node): layers, hidden, heads, ffn, tp, pp, dp,
# micro-batch, micro-batches per iteration, global batch, nodes, precision.
CARAML_LLM = {
    "800M": [(16, 2048, 16, 0, 1, 1, 4, 4, gbs // 16, gbs, 1, "fp16")
             for gbs in (16, 32, 64, 128, 256, 512, 1024, 2048, 4096)],
    "13B": [(40, 5120, 32, 20480, 2, 2, 44, 2, 64, 44 * 2 * 64, 44, "fp16")],
    "175B": [(96, 12288, 96, 0, 8, 8, 1, 2, 64, 128, 16, "bf16")],
}


@pytest.mark.subprocess
@pytest.mark.parametrize("size", list(CARAML_LLM))
def test_llm_sweep_is_caramls_table(size):
    points = json.loads(caraml("sweep", "llm_training", "--tag", size, "--dry-run", "--system", "H100", "--json",
                               check=0).stdout)
    got = []
    for point in points:
        p = point["params"]
        dp = point["world_size"] // (p["tp"] * p["pp"])
        got.append((p["num_layers"], p["hidden_size"], p["num_attention_heads"], p["ffn_hidden_size"], p["tp"],
                    p["pp"], dp, p["micro_batch_size"], p["grad_accumulation"], p["global_batch_size"],
                    point["nodes"], p["precision"]))
        assert dp * p["micro_batch_size"] * p["grad_accumulation"] == p["global_batch_size"]
        assert (p["model_size"], p["seq_length"], p["max_position_embeddings"], p["position"]) == (size, 2048, 2048,
                                                                                                  "rope")
        assert (p["recompute"], p["sequence_parallel"], p["distributed_optimizer"], p["seed"]) == ("selective", True,
                                                                                                   "zero1", 42)
        assert point["devices_per_node"] == 4
    assert sorted(got, key=lambda row: row[9]) == CARAML_LLM[size]


def test_llm_sweep_devices_per_node_of_other_systems():
    def first(tag, system):
        return expand(suite_mod.load("llm_training"), {tag}, system)[0]

    mi250 = first("800M", "MI250")  # 8 GCDs per node: the global batch sweep starts at 8 x 4
    assert (mi250.devices_per_node, mi250.params["global_batch_size"], mi250.params["grad_accumulation"]) == (8, 32, 1)
    gh200 = first("13B", "GH200")  # one GPU per node: 44 devices, dp 11
    assert (gh200.world_size, gh200.params["global_batch_size"]) == (44, 11 * 2 * 64)


@pytest.mark.parametrize("args, message", [
    (["image_classification", "--tag", "nosuchtag"], "unknown tag 'nosuchtag'"),
    (["image_classification", "--system", "Z80"], "unknown system 'Z80'"),
    (["nosuchsuite"], "neither a shipped suite"),
    (["llm_training", "--tag", "175B", "--system", "CPU"], "tp*pp = 8*8 = 64 does not divide the 16 devices"),
    (["llm_training", "tp=3", "--tag", "800M", "--system", "CPU"], "tp*pp = 3*1 = 3 does not divide the 1 devices"),
    (["image_classification", "warp=9", "--system", "CPU"], "'warp' is neither a parameter"),
])
@pytest.mark.subprocess
def test_bad_input_is_one_line_exit_2(args, message):
    proc = caraml("sweep", *args, *([] if "not built yet" in message else ["--dry-run"]), check=2)
    assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("body, message", [
    ("workload: image_classification\nparams: {flux: 3}\n", "has no parameter 'flux'"),
    ("workload: image_classification\nparams:\n  precision:\n    - {tag: 'a+', value: fp16}\n", "does not parse"),
    ("workload: image_classification\nparams:\n  batch_size: []\n", "zero points"),
    ("workload: image_classification\nderived: {batch_size: 'open(1)'}\n", "is not allowed"),
    ("workload: image_classification\nlaunch: {gpus: 2}\n", "not a launch key"),
    ("workload: image_classification\nparams: {precision: fp64}\n", "precision=fp64 is not valid"),
])
@pytest.mark.subprocess
def test_bad_suite_files(tmp_path, body, message):
    path = tmp_path / "bad.yaml"
    path.write_text(body)
    proc = caraml("sweep", str(path), "--system", "CPU", "--dry-run", check=2)
    assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
