"""What `pip install -e '.[test]'` brings: what the suite runs, the fp8 tests' torchao too, pinned there alone."""

from __future__ import annotations

import sys

from conftest import ROOT

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib


def test_the_test_extra_brings_torchao_for_the_fp8_tests_pinned_there_alone():
    from packaging.requirements import Requirement

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    [torchao] = [r for r in map(Requirement, extras["test"]) if r.name == "torchao"]
    assert str(torchao.specifier).startswith("==")  # the version the fp8 tests are run with
    assert torchao.marker.evaluate({"python_version": "3.10"})  # its wheels' oldest Python
    assert not torchao.marker.evaluate({"python_version": "3.9"})  # none for 3.9: the extra still installs there
    assert "torchao==" not in (ROOT / "scripts" / "test.sh").read_text()  # one pin
