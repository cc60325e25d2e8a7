"""Bad input is one short line and exit 2, found before it costs time or memory: suites, parameters, profiles."""

from __future__ import annotations

import json
import sys
import time

import pytest
from conftest import run_cli

from caraml import params, systems
from caraml.campaign import expr, state, sweep
from caraml.errors import BadInput, missing_package

ID = lambda value: repr(value)[-40:]  # noqa: E731 (test ids: the end of a long input says what it is)
SUITE = """
workload: image_classification
preset: smoke
"""


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("caraml"), err
    assert "Traceback" not in err and len(lines[0]) < 1000, err[:2000]
    return lines[0]


def plan_of(tmp_path, text: str | bytes, overrides=None, **kw):
    path = tmp_path / "s.yaml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return sweep.plan(str(path), [], "CPU", overrides or {}, **kw)


# suites: values that grow without bound ------------------------------------------------------------
def test_derived_values_that_grow_without_bound_are_refused_at_once(tmp_path):
    chain = "".join(f"  d{i}: d{i - 1} ** 64\n" for i in range(2, 6))
    started = time.monotonic()
    with pytest.raises(BadInput, match=r"10\*\*18"):
        plan_of(tmp_path, SUITE + "vars: {x: 10}\nderived:\n  d1: x ** 64\n" + chain)
    assert time.monotonic() - started < 60  # growing the value would take minutes or all memory


@pytest.mark.parametrize("text", ["'a' * 10**9", "10**12 * 'ab'", "(1, 2) * 10**12", "10 ** 19", "2 ** 64",
                                  "x ** 64", "'%01000000000d' % 1", "round(1, -10**18)", "float('1e308') * 10",
                                  "((1,) * 100,) * 100", "-" * 50_000 + "1", " + ".join(["1"] * 50_000)], ids=ID)
def test_expressions_refuse_huge_values_before_making_them(text):
    started = time.monotonic()
    with pytest.raises(BadInput) as exc:
        expr.evaluate(text, {"x": 10})
    assert time.monotonic() - started < 60  # growing the value would take minutes or all memory
    assert len(str(exc.value)) < 500


def test_small_values_still_compute():
    assert expr.evaluate("x ** 18", {"x": 10}) == 10**18
    assert expr.evaluate("'ab' * 3", {}) == "ababab"
    assert expr.evaluate("round(2.567, 2)", {}) == pytest.approx(2.57)


def test_point_count_is_checked_before_expanding(tmp_path, capsys):
    seven = "vars:\n" + "".join(f"  v{i}: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]\n" for i in range(7))
    started = time.monotonic()
    with pytest.raises(BadInput, match=r"10000000 points, more than the limit of 10000; .*--max-points 10000000"):
        plan_of(tmp_path, SUITE + seven)
    assert time.monotonic() - started < 60  # growing the value would take minutes or all memory
    path = tmp_path / "twelve.yaml"
    path.write_text(SUITE + "params: {batch_size: [1, 2, 3], image_size: [32, 40, 48, 56]}\n")
    code, _, err = run_cli(capsys, "sweep", path, "--dry-run", "--system", "CPU", "--max-points", "5")
    assert code == 2 and "12 points, more than the limit of 5" in one_line(err)
    code, out, _ = run_cli(capsys, "sweep", path, "--dry-run", "--system", "CPU", "--max-points", "12")
    assert code == 0 and len(out.splitlines()) == 12
    code, _, err = run_cli(capsys, "sweep", path, "--dry-run", "--max-points", "0")
    assert code == 2 and "--max-points" in one_line(err)


# suites: the file itself ---------------------------------------------------------------------------
def test_yaml_aliases_are_refused(tmp_path):
    laughs = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    for i, name in enumerate("bcdefgh"):
        prev = "abcdefgh"[i]
        laughs += f"{name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]\n"
    with pytest.raises(BadInput, match=r"aliases \(\*a\) are not allowed in a suite \(line 6\)"):
        plan_of(tmp_path, SUITE + "vars:\n" + "".join("  " + line + "\n" for line in laughs.splitlines()))


def test_suite_file_size_is_capped(tmp_path):
    with pytest.raises(BadInput, match="larger than 1048576 bytes"):
        plan_of(tmp_path, SUITE + "description: " + "x" * (1 << 20) + "\n")


@pytest.mark.parametrize("text, expect", [
    (SUITE + "tags: 5\n", "'tags' must map tag names"),
    (SUITE + "tags: [[1]]\n", "'tags' must map tag names"),
    (SUITE.replace("preset: smoke", "preset: [smoke]"), "'preset' must be one name"),
    (SUITE.replace("image_classification", "[image_classification]"), "'workload' must be one name"),
    (SUITE.encode() + b"description: \xff\xfe\n", "cannot be read: 'utf-8' codec can't decode"),
    (SUITE + "derived:\n  batch_size: " + "-" * 50_000 + "1\n", "longer than 1000 characters"),
    (SUITE + "derived:\n  batch_size: " + " + ".join(["1"] * 50_000) + "\n", "longer than 1000 characters"),
    (SUITE + "derived:\n  batch_size: " + "-" * 900 + "1\n", "nests too deeply|not a valid expression"),
    (SUITE + "launch: {time_limit: bogus}\n", "time_limit=bogus is not a SLURM time limit"),
    (SUITE + "launch: {launcher: " + "x" * 5000 + "}\n",
     "launcher=x{200}… is not valid; choose torchrun, srun or single"),
    (SUITE + "launch: {time_limit: '1_0'}\n", "time_limit=1_0 is not a SLURM time limit"),
    (SUITE + "params: {precision: [{value: bf16, tag: '" + "!" * 5000 + "x'}]}\n", "longer than 1000 characters"),
    (SUITE + "params: {precision: [{value: bf16, tag: '" + "(" * 600 + "x" + ")" * 600 + "'}]}\n", "does not parse"),
    (SUITE + "launch: {nodes: '1_0'}\n", "nodes=1_0 is not a whole number"),
], ids=ID)
def test_bad_suites_are_one_clear_error(tmp_path, text, expect):
    with pytest.raises(BadInput, match=expect):
        plan_of(tmp_path, text)


def test_bad_suite_on_the_command_line_is_one_line_exit_2(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text(SUITE + "tags: [[1]]\n")
    code, _, err = run_cli(capsys, "sweep", path, "--dry-run", "--system", "CPU")
    assert code == 2 and "'tags' must map tag names" in one_line(err)


@pytest.mark.parametrize("content, expect", [
    ("[1, 2]", 'not {"jobs": {...}}'), ('{"jobs": [1]}', 'not {"jobs": {...}}'),
    ('{"jobs": {"7": 5}}', "job 7 has no point"), ('{"jobs": {"7": {"state": "submitted", "point": {"id": 1}}}}',
                                                   "job 7: point.id is not str"),
    ("[" * 200_000 + "]" * 200_000, "cannot be read"),
], ids=ID)
def test_sweep_state_of_the_wrong_shape_is_one_error(tmp_path, content, expect):
    (tmp_path / state.FILE).write_text(content)
    with pytest.raises(BadInput, match=expect.replace("(", r"\(").replace("[", r"\[").replace("{", r"\{")):
        state.load(tmp_path)


# parameters ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind, raw, expect", [
    (int, "1_6", "is not an integer"), (int, "１６", "is not an integer"), (float, "1_0.5", "is not a finite"),
    (float, "０.５", "is not a finite"), (int, "99999999999999999999", "out of range"),
    (int, 10**20, "out of range"), (float, float("inf"), "is not a finite"), (float, 10**400, "is not a finite"),
], ids=ID)
def test_numbers_are_plain_ascii_digits_within_int64(kind, raw, expect):
    with pytest.raises(BadInput, match=expect):
        params.Param("seed", kind, 0).parse(raw, "w")


def test_plain_numbers_still_parse():
    seed, lr = params.Param("seed", int, 0), params.Param("lr", float, 0.1)
    assert seed.parse("16", "w") == 16 and seed.parse(2**63 - 1, "w") == 2**63 - 1 and seed.parse(" -3", "w") == -3
    assert lr.parse("1e-3", "w") == 0.001 and lr.parse(2, "w") == 2.0 and lr.parse(0.5, "w") == 0.5


def test_values_are_quoted_at_most_200_characters(capsys):
    with pytest.raises(BadInput) as exc:
        params.Param("batch_size", int, 1).parse("9x" * 50_000, "w")
    assert len(str(exc.value)) < 300 and str(exc.value).count("9x") == 100
    with pytest.raises(BadInput) as exc:
        params.Param("model", str, "a", choices=("a", "b")).parse("z" * 100_000, "w")
    assert len(str(exc.value)) < 300
    with pytest.raises(BadInput) as exc:
        params.parse_assignments(["x" * 100_000])
    assert len(str(exc.value)) < 300
    code, _, err = run_cli(capsys, "sweep", "image_classification", "--system", "CPU", "--dry-run",
                           "batch_size=" + "9" * 100_000 + "x")
    assert code == 2 and "…" in one_line(err)


def test_duplicate_keys_are_refused():
    with pytest.raises(BadInput, match="parameter 'batch_size' is given twice \\(1 and 2\\); give it once"):
        params.parse_assignments(["batch_size=1", "batch_size=2"])


def test_suite_overrides_are_as_strict_as_run_parameters(tmp_path):
    for raw in ("１６", "1_6"):
        with pytest.raises(BadInput, match="is not an integer"):
            plan_of(tmp_path, SUITE, {"batch_size": raw})


@pytest.mark.parametrize("argv", [("result", "--results", ""),
                                  ("sweep", "image_classification", "--dry-run", "--results", " "),
                                  ("plot", "throughput", "--out", "")])
def test_empty_paths_are_refused(capsys, argv):
    code, _, err = run_cli(capsys, *argv)
    assert code == 2 and "is empty; pass a path" in one_line(err)


# system profiles ----------------------------------------------------------------------------------
@pytest.mark.parametrize("text, expect", [
    ('devices_per_node = "two"\n', "devices_per_node = two is not valid; it must be a whole number"),
    ('[site]\ncpus_per_task = "8; rm -rf ~"\n', "site.cpus_per_task = 8; rm -rf ~ is not valid; it must be a whole"),
    ("[peak_tflops]\nbf16 = \"fast\"\n", "peak_tflops.bf16 = fast is not valid; peak_tflops must be a table of "
                                         "numbers"),
    ("match = [\"(\"]\n", "match pattern '\\(' is not a regular expression"),
    ("devices_per_node = true\n", "devices_per_node = True is not valid"),
])
def test_site_profiles_of_the_wrong_type_name_file_and_field(tmp_path, monkeypatch, capsys, text, expect):
    (tmp_path / "H100.toml").write_text(text)
    monkeypatch.setenv("CARAML_SYSTEMS_PATH", str(tmp_path))
    with pytest.raises(BadInput, match=f"system profile {tmp_path / 'H100.toml'}: {expect}"):
        systems.profiles()
    code, out, err = run_cli(capsys, "systems")
    assert code == 2 and not out and "H100.toml" in one_line(err)


def test_site_values_are_quoted_short_in_job_scripts(tmp_path, monkeypatch, capsys):
    (tmp_path / "H100.toml").write_text(f'[site]\nenv = {{"{"K " * 5000}" = "1"}}\n')
    monkeypatch.setenv("CARAML_SYSTEMS_PATH", str(tmp_path))
    suite = tmp_path / "one.yaml"
    suite.write_text(SUITE)
    code, _, err = run_cli(capsys, "launch", suite, "--system", "H100", "--script")
    assert code == 2 and "is not a valid environment variable name" in one_line(err) and len(err) < 500


def test_shipped_profiles_pass_their_own_check():
    assert {"H100", "CPU", "GC200"} <= set(systems.profiles())
    assert json.dumps(systems.get("JUPITER"))


# text values: nothing a shell, an exec or a terminal would act on ------------------------------------
@pytest.mark.parametrize("raw", ["a\0b", "a\x1b[2Jb", "a\nb", "a\rb", "a\x7fb", "a\x9bb", "a\tb"], ids=ID)
def test_text_parameters_refuse_control_characters(raw):
    with pytest.raises(BadInput, match=r"^w: data_path=a\\.*b contains a control character .*; give printable text"):
        params.Param("data_path", str, "").parse(raw, "w")
    assert params.Param("data_path", str, "").parse(" /d/ü ñ.bin ", "w") == "/d/ü ñ.bin"


@pytest.mark.parametrize("executor", ["local", "slurm"])
def test_nul_in_a_suite_value_is_one_line_before_anything_runs(tmp_path, capsys, executor):
    path = tmp_path / "nul.yaml"
    path.write_text('workload: llm_training\npreset: smoke\nparams: {data: oscar, data_path: "a\\0b"}\n')
    argv = ["sweep", path, "--system", "CPU", "--results", tmp_path / "r", "--executor", executor]
    code, out, err = run_cli(capsys, *argv, *(["--dry-run"] if executor == "slurm" else []))
    assert code == 2 and "data_path=a\\x00b contains a control character" in one_line(err)
    assert not out and not (tmp_path / "r").exists()


@pytest.mark.parametrize("python", ["/nonexistent/python", "no-such-python-here", "."], ids=ID)
def test_sweep_python_that_does_not_exist_is_one_line_before_anything_runs(tmp_path, capsys, python):
    path = tmp_path / "s.yaml"
    path.write_text(SUITE)
    code, out, err = run_cli(capsys, "sweep", path, "--system", "CPU", "--results", tmp_path / "r", "--python", python)
    assert code == 2 and f"--python {python}: " in one_line(err) and "Python interpreter" in err
    assert not out and not (tmp_path / "r").exists()


# bad input under torchrun: said once, by rank 0 -----------------------------------------------------
# `caraml run` refusals that need torch (the model from torchvision, the system and the device from the detected
# device): here, in a process that has imported torch already; tests/test_run.py has those found before torch is
# imported, each in a process of its own.
@pytest.mark.parametrize("args, needle", [
    (("run", "image_classification", "model=resnet5"), "model=resnet5 is not a torchvision classification model"),
    (("run", "image_classification", "--system", "B200"),
     "unknown system 'B200'; did you mean H200? known systems: A100"),
    (("run", "image_classification", "--preset", "smoke", "precision=tf32"), "precision=tf32 exists only on"),
    (("run", "image_classification", "--preset", "smoke", "device=cuda"), "device=cuda was asked for"),
])
def test_run_refusals_that_need_torch_are_one_line_exit_2(tmp_path, capsys, args, needle):
    results = tmp_path / "results"
    code, _, err = run_cli(capsys, *args, "--results", results)
    lines = err.strip().splitlines()
    assert code == 2 and needle in lines[-1], err
    assert "Traceback" not in err
    assert len([line for line in lines if line.startswith("caraml")]) == 1
    assert not (results / "runs").exists() or not list((results / "runs").glob("*.json"))


def test_a_package_that_is_not_installed_is_one_line_naming_what_to_install(tmp_path, capsys, monkeypatch):
    """A source tree run by an interpreter without torchvision (the model check imports it)."""
    from caraml.workloads.image_classification.config import classification_models

    monkeypatch.setitem(sys.modules, "torchvision", None)  # import torchvision: ModuleNotFoundError
    classification_models.cache_clear()
    try:
        code, _, err = run_cli(capsys, "run", "image_classification", "--preset", "smoke", "--results",
                               tmp_path / "results")
    finally:
        classification_models.cache_clear()
    assert code == 2 and "Python package torchvision" in one_line(err) and "pip install torchvision" in err
    assert not list(tmp_path.glob("results/runs/*.json"))


def test_only_a_package_that_is_not_there_is_an_install_to_make(monkeypatch):
    """A missing module of caraml's own, of the standard library or inside an installed package (a version that
    does not match) is no install: it keeps its traceback."""
    from caraml import cli

    stdlib = ("_lzma",) if hasattr(sys, "stdlib_module_names") else ()  # Python >= 3.10 lists its own modules
    for name in ("caraml.nothing", "torch.nothing", *stdlib):
        assert missing_package(ModuleNotFoundError("no", name=name)) is None, name
    assert "pip install nvidia-ml-py" in missing_package(ModuleNotFoundError("no", name="pynvml"))
    assert "pip install 'caraml[fp8]'" in missing_package(ModuleNotFoundError("no", name="torchao"))

    def broken(args):
        raise ModuleNotFoundError("No module named 'caraml.nothing'", name="caraml.nothing")

    monkeypatch.setattr(cli, "_systems", broken)  # the command `caraml systems` runs
    with pytest.raises(ModuleNotFoundError):
        cli.main(["systems"])


@pytest.mark.multiprocess
def test_bad_input_under_torchrun_is_said_once_and_every_rank_exits(tmp_path):
    import sys

    from conftest import cli_env, run

    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "-m", "caraml",
           "run", "llm_training", "--preset", "smoke", "num_layers=3", "pp=2", "device=cpu", "power=off",
           "--results", str(tmp_path / "r")]
    proc = run(cmd, env=cli_env(), cwd=tmp_path)
    said = "caraml: error: llm_training: num_layers=3 is not a multiple of pp=2 (equal pipeline stages)\n"
    assert proc.returncode != 0 and proc.stderr.count(said) == 1, proc.stderr
    root_cause = proc.stderr.split("Root Cause")[-1]
    assert "rank      : 0" in root_cause and "exitcode  : 2" in root_cause, proc.stderr  # rank 0 failed first
    assert not proc.stdout and not (tmp_path / "r" / "runs").exists()


@pytest.mark.parametrize("rank", ["0", "1"])
@pytest.mark.parametrize("argv", [("workload", "no_such_workload"), ("param", "batch_size=x"),
                                  ("layout", "tp=3"), ("argparse", "--no-such-option")], ids=lambda a: a[0])
def test_bad_arguments_are_said_by_rank_0_only(monkeypatch, capsys, rank, argv):
    import caraml.cli
    from caraml.measure import stops

    monkeypatch.setattr(stops, "catch_early", lambda: None)  # this process's own signal handlers stay
    monkeypatch.setattr(caraml.cli, "QUIET_RANK_WAIT_S", 0.0)  # no launcher here to end the rank
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", rank)
    workload = argv[1] if argv[0] == "workload" else "llm_training"
    code, out, err = run_cli(capsys, "run", workload, "--preset", "smoke", *argv[1:] if argv[0] != "workload" else ())
    assert code == 2 and not out
    if rank == "0":
        one_line(err)
    else:
        assert err == ""
    code, _, err = run_cli(capsys, "result", "--no-such-option")  # not a rank's command: said, whatever the env
    assert code == 2 and "unrecognized arguments" in one_line(err)


@pytest.mark.parametrize("devices, extra", [(1, {}), (2, {}), (1, {"micro_batch_size": 1}), (2, {"pp": 2}),
                                            (4, {"pp": 2, "grad_accumulation": 3})], ids=ID)
def test_global_batch_hints_name_only_values_that_are_accepted(devices, extra):
    import re

    from caraml import workloads
    from caraml.settings import RUN_PARAMS

    wl = workloads.get("llm_training")
    declared, preset = wl.params + RUN_PARAMS, wl.presets["smoke"]
    extra = {"grad_accumulation": 2, **extra} if "pp" in extra else extra
    hinted = 0
    for gbs in range(1, 30):
        given = {**extra, "global_batch_size": gbs}
        problem = wl.launch_problem(params.resolve(declared, given, wl.name, preset), devices)
        if problem is None:
            continue
        fix = problem.split("; ", 1)[1]
        pairs = re.findall(r"global_batch_size=(\d+) grad_accumulation=(\d+)", fix)
        suggested = [{"global_batch_size": int(g), "grad_accumulation": int(a)} for g, a in pairs]
        rest = re.sub(r"global_batch_size=\d+ grad_accumulation=\d+", "", fix)
        suggested += [{"grad_accumulation": int(n)} for n in re.findall(r"grad_accumulation=(\d+)", rest)]
        suggested += [{"global_batch_size": int(n)} for n in re.findall(r"global_batch_size=(\d+)", rest)]
        assert len(suggested) >= 2, problem  # global_batch_size=0, and one that keeps the batch or one near it
        for change in suggested:
            assert wl.launch_problem(params.resolve(declared, {**given, **change}, wl.name, preset), devices) is None, \
                (problem, change)
        hinted += 1
    assert hinted > 10


# messages that say what is wrong --------------------------------------------------------------------
@pytest.mark.parametrize("root", [None, "/some/data"])
def test_a_missing_absolute_data_path_is_said_to_be_missing(tmp_path, root):
    from caraml.data.megatron import locate

    with pytest.raises(BadInput) as exc:
        locate(str(tmp_path / "ds"), root)
    assert str(exc.value) == (f"no Megatron dataset at {tmp_path / 'ds'}: {tmp_path / 'ds.idx'} does not exist "
                              "(make one with `caraml data prepare`)")
    (tmp_path / "ds.idx").mkdir()
    with pytest.raises(BadInput, match=f"{tmp_path / 'ds.idx'} is not a file"):
        locate(str(tmp_path / "ds.bin"), root)


@pytest.mark.parametrize("half", ["idx", "bin"])
@pytest.mark.parametrize("kind", ["fifo", "folder"])
def test_data_info_on_a_fifo_or_folder_says_it_is_not_a_regular_file(tmp_path, capsys, half, kind):
    import os

    import numpy as np

    from caraml.data.megatron import IndexedDatasetWriter

    prefix = tmp_path / "ds"
    with IndexedDatasetWriter(prefix, np.uint16) as w:
        w.add_document([1, 2, 3])
    target = tmp_path / f"ds.{half}"
    target.unlink()
    os.mkfifo(target) if kind == "fifo" else target.mkdir()
    code, out, err = run_cli(capsys, "data", "info", prefix)  # never opened: a FIFO would block the read
    what = {"fifo": "a FIFO", "folder": "a folder"}[kind]
    assert code == 2 and f"{target} is not a regular file ({what})" in one_line(err) and not out


def _script_chars(results):
    scripts = list(results.rglob("*.sh"))
    assert scripts
    return [c for s in scripts for c in s.read_text() if (ord(c) < 32 and c != "\n") or 0x7f <= ord(c) < 0xa0]


def test_job_scripts_carry_no_control_characters(tmp_path, capsys):
    """A suite variable is only shown in the script's comment and the dry run's listing: as text."""
    path = tmp_path / "s.yaml"
    path.write_text(SUITE + 'vars: {note: "a\\0b\\x1b[2J"}\n')
    code, out, err = run_cli(capsys, "sweep", path, "--system", "CPU", "--executor", "slurm", "--dry-run",
                             "--results", tmp_path / "r")
    assert code == 0, err
    assert not _script_chars(tmp_path / "r") and "note=a\\x00b\\x1b[2J" in out and "\x1b" not in out


@pytest.mark.parametrize("site", ['env = {K = "a\\u0000b"}', 'partition = "gpu\\u0000"',
                                  'sbatch_lines = ["--x\\u0000"]', 'container_dir = "c\\u001b[2J"'], ids=ID)
def test_site_values_with_control_characters_are_refused_in_job_scripts(tmp_path, monkeypatch, capsys, site):
    (tmp_path / "H100.toml").write_text(f'[site]\ncontainer = "img.sif"\n{site}\n')
    monkeypatch.setenv("CARAML_SYSTEMS_PATH", str(tmp_path))
    suite = tmp_path / "one.yaml"
    suite.write_text(SUITE)
    code, out, err = run_cli(capsys, "launch", suite, "--system", "H100", "--script")
    assert code == 2 and not out and "contains a control character" in one_line(err)


def test_systems_lists_profile_text_as_text(tmp_path, monkeypatch, capsys):
    (tmp_path / "H100.toml").write_text('accelerator = "NVIDIA H100\\u001b[2J"\nvendor = "nv\\u0007"\n')
    monkeypatch.setenv("CARAML_SYSTEMS_PATH", str(tmp_path))
    code, out, err = run_cli(capsys, "systems")
    assert code == 0, err
    assert "NVIDIA H100\\x1b[2J" in out and not [c for c in out if ord(c) < 32 and c != "\n"]
