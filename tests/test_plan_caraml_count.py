"""`caraml plan` says why its CARAML-formula TFLOP/s is above what its own compute line assumes: CARAML's formula
(f = 4 whenever recompute is on) counts the whole forward again, where selective recompute re-runs only the
attention core. The ratio here is derived by hand from the two closed forms, not from the code's own sizes."""

from __future__ import annotations

import json

import pytest
from conftest import cli

L, H, S, V = 16, 2048, 2048, 50304  # the 800M model; GPT-2's vocabulary padded to a multiple of 128


def caraml_per_token(f: int) -> float:
    """CARAML's patch: 24*f*L*h^2*(1 + s/(6h) + V/(16*(f/4)*L*h)) per token."""
    return 24 * f * L * H ** 2 * (1 + S / (6 * H) + V / (16 * (f / 4) * L * H))


def ours_per_token(recompute: str) -> float:
    """6 N + 12 L h s (N: 12 L h^2 of the blocks' products + V h of the output layer), plus selective recompute's
    attention core again (4 L h s)."""
    return 6 * (12 * L * H ** 2 + V * H) + 12 * L * H * S + (4 * L * H * S if recompute == "selective" else 0)


@pytest.mark.parametrize("recompute, f, why", [
    ("selective", 4, "where selective recompute re-runs only the attention core"),
    ("none", 3, "without recompute both count one forward and its backward (f = 3)")])
def test_the_plan_says_how_many_times_ours_caramls_formula_counts_and_why(recompute, f, why):
    ratio = caraml_per_token(f) / ours_per_token(recompute)
    args = ("plan", "llm_training", "--preset", "800M-2024", "--system", "H200", f"recompute={recompute}")
    est = json.loads(cli(*args, "--json", check=0).stdout)
    assert est["caraml_flops_ratio"] == pytest.approx(ratio, rel=1e-9)
    text = cli(*args, check=0).stdout.splitlines()
    row = next(i for i, line in enumerate(text) if "TFLOP/s per device, CARAML's formula" in line)
    assert text[row + 1].startswith(f"  (CARAML's formula counts {ratio:.2f}x our FLOPs per iteration: "), text[row + 1]
    assert why in text[row + 1]
    assert f"{ratio:.2f}" == {"selective": "1.25", "none": "1.00"}[recompute]


def test_a_mlp_other_than_4h_is_named_as_caramls_assumption():
    text = cli("plan", "llm_training", "--preset", "800M-2024", "--system", "H200", "ffn_hidden_size=5632",
               "model_size=custom", check=0).stdout
    assert "it assumes an MLP of 4 x hidden_size (this one: 5632)" in text
