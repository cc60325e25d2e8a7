"""compile_tuning=coordinate-descent: inductor's mode spelled out as its options with the tuning added (torch.compile
takes one or the other), the same numbers on the CPU, and a parameter of every workload with a compile mode."""

from __future__ import annotations

import pytest

from caraml.kit.compile import COMPILE_MODES, compile_options


@pytest.mark.parametrize("mode", COMPILE_MODES)
def test_the_tuning_keeps_what_the_mode_turns_on(mode):
    from torch._inductor import list_mode_options

    plain = compile_options("inductor", mode)
    tuned = compile_options("inductor", mode, "coordinate-descent")
    assert "options" not in plain and plain.get("mode", "default") == mode
    assert "mode" not in tuned and tuned["backend"] == "inductor"
    assert tuned["options"] == {**list_mode_options(mode), "coordinate_descent_tuning": True}
    # CUDA graphs stay where the mode has them (reduce-overhead, max-autotune)
    assert tuned["options"].get("triton.cudagraphs", False) == (mode in ("reduce-overhead", "max-autotune"))


def test_other_compilers_take_no_inductor_options():
    assert compile_options("aot_eager", "reduce-overhead", "coordinate-descent") == {"backend": "aot_eager"}
    assert compile_options("inductor") == {"backend": "inductor"}


@pytest.mark.subprocess  # inductor builds C++ on the CPU
@pytest.mark.parametrize("mode, tuning", [("default", "coordinate-descent"), ("max-autotune-no-cudagraphs", "none")])
def test_a_tuned_compile_gives_the_same_output_and_gradients_on_the_cpu(mode, tuning):
    """Inductor's C++ code has no launch to tune: bitwise the same numbers. max-autotune may pick another
    matrix-product kernel (a C++ template against ATen's): the same within rounding."""
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    x = torch.randn(8, 16)

    def grads(fn):
        model.zero_grad()
        out = fn(x)
        out.square().sum().backward()
        return out.detach(), [p.grad.clone() for p in model.parameters()]

    torch._dynamo.reset()
    plain_out, plain_grads = grads(torch.compile(model, **compile_options("inductor")))
    torch._dynamo.reset()
    tuned_out, tuned_grads = grads(torch.compile(model, **compile_options("inductor", mode, tuning)))
    torch._dynamo.reset()
    same = torch.equal if mode == "default" else lambda a, b: torch.allclose(a, b, rtol=1e-5, atol=1e-6)
    assert same(plain_out, tuned_out)
    assert all(same(a, b) for a, b in zip(plain_grads, tuned_grads))


@pytest.mark.parametrize("workload", ["image_classification", "fno", "llm_training"])
def test_compile_mode_and_tuning_apply_to_inductor_only(workload):
    from caraml import workloads

    params = {p.name: p for p in workloads.get(workload).params}
    tuning = params["compile_tuning"]
    assert tuning.default == "none" and tuning.choices == ("none", "coordinate-descent")
    for name in ("compile_mode", "compile_tuning"):
        assert params[name].applies_to({"compile": "inductor"})
        assert not params[name].applies_to({"compile": "none"})
        assert not params[name].applies_to({"compile": "aot_eager"})


@pytest.mark.subprocess
def test_a_misspelt_tuning_is_refused_in_one_line(tmp_path):
    from conftest import caraml

    proc = caraml("run", "image_classification", "--preset", "smoke", "compile=inductor",
                  "compile_tuning=coordinate", "--results", tmp_path, check=2)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "compile_tuning=coordinate" in lines[0] and "coordinate-descent" in lines[0]


def test_a_tuned_or_aot_eager_fno_point_is_no_twin_of_a_plain_loop():
    """bench/fno_bench.py pairs a caraml point with its plain loop only where both compile alike; the plain loops
    compile with inductor's modes, untuned."""
    from caraml.compare.fno_points import _c, _compile_mode, _p

    plain = _compile_mode(_p("PIC1D", compile="reduce-overhead"))
    assert _compile_mode(_c("PIC1D", "compile=inductor")) == plain == "reduce-overhead"
    assert _compile_mode(_c("PIC1D", "compile=inductor", "compile_tuning=coordinate-descent")) != plain
    assert _compile_mode(_c("PIC1D", "compile=aot_eager")) not in (plain, None)
    assert _compile_mode(_c("PIC1D")) is None


@pytest.mark.parametrize("workload, params", [
    ("image_classification", {"compile_mode": "reduce-overhead"}),
    ("fno", {}),
    ("llm_training", {}),
    ("llm_training", {"compile_mode": "max-autotune-no-cudagraphs"}),
])
def test_each_workload_hands_torch_compile_the_tuning(monkeypatch, workload, params):
    """The parameter reaches torch.compile in every workload (recorded, not compiled: a CPU compile takes minutes)."""
    asked = _compile_options_asked(monkeypatch, workload, {"compile_tuning": "coordinate-descent", **params},
                                   preset="smoke" if workload != "fno" else "smoke-RBC2D")
    assert asked and all(o.get("options", {}).get("coordinate_descent_tuning") is True for o in asked)
    assert all("mode" not in o for o in asked)  # spelled out as its options, beside the tuning
    autotuned = params.get("compile_mode", "").startswith("max-autotune")
    assert all(o["options"].get("max_autotune", False) is autotuned for o in asked)  # the mode's options kept


def _compile_options_asked(monkeypatch, workload: str, params: dict, preset: str = "smoke") -> list[dict]:
    """The keyword arguments each torch.compile of the workload's Bench received (nothing compiled)."""
    import torch

    from caraml.runner import RunSpec, build_bench

    asked = []
    monkeypatch.setattr(torch, "compile", lambda fn, **options: asked.append(options) or fn)
    build_bench(RunSpec(workload, {"compile": "inductor", **params}, preset=preset), device="cpu").close()
    return asked


@pytest.mark.parametrize("scope", ["model", "block"])
def test_the_gpt_hands_torch_compile_its_mode(monkeypatch, scope):
    mode = "max-autotune-no-cudagraphs"
    asked = _compile_options_asked(monkeypatch, "llm_training", {"compile_mode": mode, "compile_scope": scope})
    assert asked and all(o == {"backend": "inductor", "mode": mode} for o in asked)
    default = _compile_options_asked(monkeypatch, "llm_training", {})
    assert default and all("mode" not in o for o in default)


@pytest.mark.subprocess
def test_the_gpt_refuses_a_cuda_graph_mode_in_one_line(tmp_path):
    from conftest import caraml

    proc = caraml("run", "llm_training", "--preset", "smoke", "compile=inductor", "compile_mode=reduce-overhead",
                  "--results", tmp_path, check=2)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "compile_mode=reduce-overhead" in lines[0] and "max-autotune-no-cudagraphs" in lines[0]
