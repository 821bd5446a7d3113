"""tiny.py: the cached tiny world is rebuilt when the sources it is made from change."""

import subprocess

from conftest import ROOT

from worlds import tiny


def test_run_sh_and_tiny_agree_on_the_recipe_key():
    shell = subprocess.run(
        "cat worlds/tiny.py rollout.py | sha256sum | cut -c1-16",
        shell=True,
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert shell == tiny.recipe_key() and len(shell) == 16


def test_the_fixture_world_is_current_and_a_foreign_stamp_is_not(tiny_dir, tmp_path):
    assert tiny.is_current(tiny_dir)
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    (tmp_path / ".recipe-0123456789abcdef").touch()  # built from other sources
    assert not tiny.is_current(tmp_path)
