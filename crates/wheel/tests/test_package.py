"""The wheel: both binaries on PATH, `python -m cwsandbox_emulator`, the installed package."""

import os
import subprocess
import sys
import sysconfig

import cwsandbox_emulator


def test_the_package_is_the_installed_one_not_the_source_tree():
    here = os.path.realpath(cwsandbox_emulator.__file__)
    assert here.startswith(os.path.realpath(sysconfig.get_paths()["purelib"])), here


def test_both_binaries_are_installed_beside_the_interpreter(monkeypatch):
    monkeypatch.delenv("CWSANDBOX_EMULATOR_BIN", raising=False)
    scripts = sysconfig.get_path("scripts")
    for name in ("cwsandbox-emulator", "cwsbx"):
        path = cwsandbox_emulator.binary(name)
        assert os.path.dirname(path) == scripts, path
        assert os.access(path, os.X_OK)
        version = subprocess.run([path, "--version"], capture_output=True, text=True, check=True).stdout
        assert version.startswith(f"{name} "), version


def test_python_dash_m_runs_the_emulator_binary():
    result = subprocess.run([sys.executable, "-m", "cwsandbox_emulator", "--version"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("cwsandbox-emulator "), result.stdout
    result = subprocess.run([sys.executable, "-m", "cwsandbox_emulator", "serve", "--help"], capture_output=True, text=True)
    assert result.returncode == 0 and "--ready-file" in result.stdout, result.stdout + result.stderr


def test_the_plugin_is_registered_through_its_entry_point(pytester):
    result = pytester.runpytest_subprocess("--help")
    result.stdout.fnmatch_lines(["*--cwsandbox-timing*", "*--cwsandbox-target=URL*"])


def test_the_packaged_cwsbx_talks_to_the_packaged_emulator():
    from cwsandbox_emulator import Emulator

    with Emulator() as emu:
        env = dict(os.environ, CWSANDBOX_BASE_URL=emu.base_url, CWSANDBOX_API_KEY=emu.admin_token)
        runners = subprocess.run(
            [cwsandbox_emulator.binary("cwsbx"), "sandbox", "runner", "list"], env=env, capture_output=True, text=True
        )
        assert runners.returncode == 0, runners.stderr
        assert emu.runner_id in runners.stdout
