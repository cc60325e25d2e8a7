"""The prepared container environment and the paths around it, checked in this process (no apptainer here): the
environment is keyed on the image and the caraml wheel, trusted only with its python, and every folder or path that
cannot serve (a file in its place, a ',' or ':' that `apptainer exec --bind` splits at) is one line."""

from __future__ import annotations

import pytest
from conftest import cli

from caraml.campaign import container
from caraml.errors import BadInput


@pytest.fixture
def site(tmp_path):
    """A pulled image and a wheel folder holding a caraml wheel."""
    (tmp_path / "img.sif").write_text("an image")
    wheels = tmp_path / "containers" / "wheels"
    wheels.mkdir(parents=True)
    (wheels / "caraml-0.1-py3-none-any.whl").write_bytes(b"caraml as it was")
    return tmp_path


def _profile(tmp_path, **site) -> dict:
    return {"tag": "FAKE", "vendor": "cpu", "site": {"container_image": str(tmp_path / "img.sif"),
                                                     "container_dir": str(tmp_path / "containers"), **site}}


def _prepared(env) -> None:
    """An environment as prepare leaves it: its python and the ready stamp."""
    (env / "bin").mkdir(parents=True)
    (env / "bin" / "python").symlink_to("/usr/bin/python3-inside-the-image")  # a link into the image
    (env / container.READY).write_text("{}\n")


@pytest.fixture
def made(monkeypatch):
    """prepare's commands, recorded instead of run (apptainer stands in for nothing here)."""
    ran = []
    monkeypatch.setattr(container, "require_apptainer", lambda: None)

    def run(cmd, doing):
        ran.append(cmd)
        if "venv" in cmd:  # the venv command makes the folder
            (container.Path(cmd[-1]) / "bin").mkdir(parents=True, exist_ok=True)

    monkeypatch.setattr(container, "_run", run)
    return ran


def test_a_rebuilt_caraml_wheel_is_another_environment(site, made):
    profile = _profile(site)
    env = container.env_dir(profile)
    _prepared(env)
    assert container.missing(profile) == []
    (site / "containers" / "wheels" / "caraml-0.1-py3-none-any.whl").write_bytes(b"caraml updated")
    fresh = container.env_dir(profile)
    assert fresh != env and fresh.parent == env.parent
    [line] = container.missing(profile)
    assert "is not prepared" in line and str(fresh) in line
    assert container.prepare(profile) == (fresh, True) and made


def test_a_ready_stamp_without_the_environments_python_is_made_again(site, made):
    profile = _profile(site)
    env = container.env_dir(profile)
    _prepared(env)
    (env / "bin" / "python").unlink()
    [line] = container.missing(profile)
    assert "is not prepared" in line
    assert container.prepare(profile) == (env, True) and made


def test_prepare_print_before_the_image_is_pulled_is_one_line(site, monkeypatch):
    (site / "img.sif").unlink()
    profiles = site / "profiles"
    profiles.mkdir()
    (profiles / "FAKE.toml").write_text(f'tag = "FAKE"\nvendor = "cpu"\n[site]\ncontainer_image = '
                                        f'"{site / "img.sif"}"\ncontainer_dir = "{site / "containers"}"\n')
    monkeypatch.setenv("CARAML_SYSTEMS_PATH", str(profiles))
    proc = cli("container", "prepare", "--system", "FAKE", "--print", check=2)
    assert proc.stderr.startswith(f"caraml: error: image {site / 'img.sif'} is not pulled") and not proc.stdout
    assert "not-pulled" not in proc.stderr and proc.stderr.count("\n") == 1
    (site / "img.sif").write_text("an image")
    printed = cli("container", "prepare", "--system", "FAKE", "--print", check=0).stdout
    assert str(container.env_dir(_profile(site))) in printed and "not-pulled" not in printed


@pytest.mark.parametrize("field, where", [("container_envs", "{file}/envs"), ("container_envs", "{file}"),
                                          ("container_wheels", "{file}/wheels")])
def test_a_container_folder_under_or_at_a_file_is_one_line(site, made, field, where):
    (site / "a-file").write_text("not a folder")
    path = where.format(file=site / "a-file")
    profile = _profile(site, **{field: path})
    with pytest.raises(BadInput, match=f"^site.{field} {path} cannot be made a folder"):
        container.make_wheels(profile) if field == "container_wheels" else container.prepare(profile)


def test_a_wheel_folder_that_is_a_file_is_one_line(site, made):
    (site / "a-file").write_text("not a folder")
    profile = _profile(site, container_wheels=str(site / "a-file"))
    with pytest.raises(BadInput, match=f"^site.container_wheels {site / 'a-file'} cannot be made a folder"):
        container.make_wheels(profile)


@pytest.mark.parametrize("field", ["container_envs", "container_wheels"])
@pytest.mark.parametrize("char", [",", ":"])
def test_a_bound_folder_with_a_bind_separator_is_one_line(site, made, field, char):
    path = site / f"odd{char}name"
    profile = _profile(site, **{field: str(path)})
    with pytest.raises(BadInput, match=f"^site.{field} {path} holds '{char}'"):
        container.prepare_commands(profile, container.env_dir(profile))


def test_a_results_folder_with_a_bind_separator_is_one_line(site, monkeypatch):
    profiles = site / "profiles"
    profiles.mkdir()
    (profiles / "FAKE.toml").write_text(f'tag = "FAKE"\nvendor = "cpu"\ndevices_per_node = 1\n[site]\n'
                                        f'container_image = "{site / "img.sif"}"\n'
                                        f'container_dir = "{site / "containers"}"\n')
    monkeypatch.setenv("CARAML_SYSTEMS_PATH", str(profiles))
    suite = site / "one.yaml"
    suite.write_text("workload: image_classification\npreset: smoke\n")
    results = site / "res,extra:"
    proc = cli("launch", suite, "--system", "FAKE", "--script", "--results", results, check=2)
    assert proc.stderr.startswith(f"caraml: error: --results {results} holds ','"), proc.stderr
    assert proc.stderr.count("\n") == 1
    proc = cli("sweep", suite, "--system", "FAKE", "--executor", "slurm", "--dry-run", "--results", results, check=2)
    assert proc.stderr.splitlines()[-1].startswith(f"caraml: error: --results {results.resolve()} holds ','")


def test_print_neutralises_control_characters_from_the_profile(site, monkeypatch):
    odd = site / "img\x1b]0;PWN\x07.sif"
    odd.write_text("an image")
    profiles = site / "profiles"
    profiles.mkdir()
    image = str(odd).replace("\x1b", "\\u001b").replace("\x07", "\\u0007")  # TOML's escapes
    (profiles / "FAKE.toml").write_text(f'tag = "FAKE"\nvendor = "cpu"\n[site]\ncontainer_image = "{image}"\n'
                                        f'container_dir = "{site / "containers"}"\n')
    monkeypatch.setenv("CARAML_SYSTEMS_PATH", str(profiles))
    out = cli("container", "prepare", "--system", "FAKE", "--print", check=0).stdout
    assert out and "\x1b" not in out and "\x07" not in out and "img\\x1b]0;PWN\\x07.sif" in out
    (profiles / "FAKE.toml").write_text('tag = "FAKE"\nvendor = "cpu"\n[site]\n'
                                        'container_image = "docker://x\\u001b]0;PWN\\u0007"\n')
    other = site / "other"  # profiles are read once per CARAML_SYSTEMS_PATH
    other.mkdir()
    (profiles / "FAKE.toml").rename(other / "FAKE.toml")
    monkeypatch.setenv("CARAML_SYSTEMS_PATH", str(other))
    out = cli("container", "pull", "--system", "FAKE", "--print", check=0).stdout
    assert out and "\x1b" not in out and "\x07" not in out


def test_a_suite_file_name_with_an_escape_is_shown_neutralised(tmp_path):
    suite = tmp_path / "s\x1b]0;PWN\x07.yaml"
    suite.write_text("workload: image_classification\npreset: smoke\n")
    proc = cli("sweep", suite, "--system", "CPU", "--dry-run", "--results", tmp_path / "r", check=0)
    assert "\x1b" not in proc.stderr + proc.stdout and "\x07" not in proc.stderr + proc.stdout
    assert "s\\x1b]0;PWN\\x07" in proc.stderr


@pytest.mark.parametrize("char", [",", ":"])
def test_a_source_tree_with_a_bind_separator_is_one_line(site, char):
    """The job binds caraml's source tree into the image too: a ',' or ':' in its path is refused like the others."""
    from caraml.campaign import jobscript
    from caraml.campaign import suite as suite_mod
    from caraml.campaign.expand import expand

    point = expand(suite_mod.load("image_classification"), {"smoke"}, "CPU")[0]
    source = site / f"src{char}tree"
    opts = jobscript.JobOptions(results=str(site / "results"), python="/usr/bin/python3", source=str(source))
    with pytest.raises(BadInput, match=f"^the source tree {source} holds '{char}'"):
        jobscript.render(point, _profile(site), opts, str(site / "job.out"))
