"""The pytest plugin (entry point `pytest11`): fixtures `cwsandbox_emulator` and `cwsandbox_tenant`.

Options (command line, or the same name with underscores in the ini file, e.g. `cwsandbox_timing`):

- `--cwsandbox-values FILE` (repeatable; ini `cwsandbox_values`, one a line, relative to the ini
  file): values files overlaid in order, like `serve -f`.
- `--cwsandbox-scenario ready|fresh` (default: the emulator's, `ready`).
- `--cwsandbox-timing instant|realistic` (default `instant`).
- `--cwsandbox-runtime process|oci|auto` (default `process`, or the binary's own choice when
  $CWSANDBOX_EMULATOR_RUNTIME is set): what runs the sandboxes' commands.
- `--cwsandbox-target URL`: start no emulator; the tests get that endpoint with the user's own
  `CWSANDBOX_API_KEY` and runner id (`--cwsandbox-runner-id` or `CWSANDBOX_RUNNER_ID`). Tests
  that use an emulator-only helper (clock, faults, slurm, pods, events, values, reset, tenants'
  tokens) are skipped with that reason.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional

import pytest

from ._emulator import RUNTIMES, SCENARIOS, TIMINGS, Emulator, Tenant

TARGET_ENV = "CWSANDBOX_TARGET"
RUNNER_ENV = "CWSANDBOX_RUNNER_ID"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("cwsandbox", "CoreWeave Sandbox emulator")
    group.addoption(
        "--cwsandbox-values",
        action="append",
        default=[],
        metavar="FILE",
        help="values file for the emulator (repeatable, overlaid in order like `serve -f`)",
    )
    group.addoption("--cwsandbox-scenario", choices=SCENARIOS, help="the emulator's starting point (default: ready)")
    group.addoption(
        "--cwsandbox-timing",
        # Empty passes no --timing: the binary's own default.
        choices=TIMINGS + ("",),
        help="timing profile of the emulator (default: instant)",
    )
    group.addoption(
        "--cwsandbox-runtime",
        choices=RUNTIMES,
        help="what runs the sandboxes' commands (default: process, unless $CWSANDBOX_EMULATOR_RUNTIME is set)",
    )
    group.addoption(
        "--cwsandbox-target",
        metavar="URL",
        help=f"run against this endpoint instead of an emulator (also ${TARGET_ENV}); needs CWSANDBOX_API_KEY",
    )
    group.addoption("--cwsandbox-runner-id", metavar="ID", help=f"the runner id with --cwsandbox-target (also ${RUNNER_ENV})")
    parser.addini("cwsandbox_values", "values files for the emulator, relative to the ini file", type="linelist", default=[])
    parser.addini("cwsandbox_scenario", "the emulator's starting point: ready or fresh", default="")
    parser.addini("cwsandbox_timing", "timing profile: instant (default) or realistic", default="instant")
    parser.addini("cwsandbox_runtime", "what runs the sandboxes' commands: process (default), oci or auto", default="")
    parser.addini("cwsandbox_target", "an endpoint to run against instead of an emulator", default="")
    parser.addini("cwsandbox_runner_id", "the runner id with cwsandbox_target", default="")


class Settings:
    def __init__(self, config: pytest.Config):
        base = Path(config.inipath).parent if config.inipath else Path(config.rootpath)
        self.values: List[str] = [str(base / value) for value in config.getini("cwsandbox_values")]
        self.values += [str(Path(value).resolve()) for value in config.getoption("cwsandbox_values")]
        self.scenario: Optional[str] = config.getoption("cwsandbox_scenario") or config.getini("cwsandbox_scenario") or None
        timing = config.getoption("cwsandbox_timing")
        if timing is None:
            timing = config.getini("cwsandbox_timing")
        if timing and timing not in TIMINGS:
            raise pytest.UsageError(f"cwsandbox_timing must be one of {', '.join(TIMINGS)}, got {timing!r}")
        self.timing: Optional[str] = timing or None
        # Empty: the Emulator's default (process, unless $CWSANDBOX_EMULATOR_RUNTIME is set).
        self.runtime: str = config.getoption("cwsandbox_runtime") or config.getini("cwsandbox_runtime")
        if self.runtime and self.runtime not in RUNTIMES:
            raise pytest.UsageError(f"cwsandbox_runtime must be one of {', '.join(RUNTIMES)}, got {self.runtime!r}")
        if self.scenario and self.scenario not in SCENARIOS:
            raise pytest.UsageError(f"cwsandbox_scenario must be one of {', '.join(SCENARIOS)}, got {self.scenario!r}")
        self.target: str = config.getoption("cwsandbox_target") or os.environ.get(TARGET_ENV) or config.getini("cwsandbox_target")
        self.runner_id: str = (
            config.getoption("cwsandbox_runner_id") or os.environ.get(RUNNER_ENV) or config.getini("cwsandbox_runner_id")
        )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "cwsandbox_emulator_only: the test needs the emulator (skipped before it starts with --cwsandbox-target)"
    )
    settings = Settings(config)
    if settings.target and not os.environ.get("CWSANDBOX_API_KEY"):
        raise pytest.UsageError("--cwsandbox-target needs your own CWSANDBOX_API_KEY in the environment")


def pytest_runtest_setup(item: pytest.Item) -> None:
    # A marked test is skipped before its fixtures run: nothing of it reaches the real service.
    if item.get_closest_marker("cwsandbox_emulator_only") and Settings(item.config).target:
        pytest.skip(TARGET_REASON.format(name="cwsandbox_emulator_only"))


def pytest_report_header(config: pytest.Config) -> str:
    settings = Settings(config)
    if settings.target:
        return f"cwsandbox: target {settings.target} (emulator-only helpers skip)"
    return (
        f"cwsandbox: emulator, timing {settings.timing or 'default'}, scenario {settings.scenario or 'ready'}, "
        f"runtime {settings.runtime or 'default'}"
    )


TARGET_REASON = "emulator-only helper {name!r}: --cwsandbox-target runs against a real service"


class Target:
    """`cwsandbox_emulator` with --cwsandbox-target: the real endpoint, the user's own key."""

    is_target = True
    _EMULATOR_ONLY = (
        "admin_token",
        "user_token",
        "kubeconfig",
        "clock",
        "faults",
        "slurm",
        "pods",
        "events",
        "values",
        "apply_values",
        "reset",
        "create_tenant",
        "tenants",
        "api",
        "log",
    )

    def __init__(self, base_url: str, api_key: str, runner_id: str):
        self.base_url = base_url
        self.api_key = api_key
        self.runner_id = runner_id
        self.runner_ids = [runner_id] if runner_id else []

    def env(self) -> Dict[str, str]:
        env = {"CWSANDBOX_BASE_URL": self.base_url, "CWSANDBOX_API_KEY": self.api_key}
        if self.runner_id:
            env["CWSANDBOX_RUNNER_ID"] = self.runner_id
        return env

    def __getattr__(self, name: str) -> Any:
        # Reached only for what a target lacks: an emulator-only helper skips the test using it.
        if name in TargetTenant._EMULATOR_ONLY:
            pytest.skip(TARGET_REASON.format(name=name))
        raise AttributeError(name)


class TargetTenant(Target):
    """`cwsandbox_tenant` with --cwsandbox-target: base_url, api key and runner id only."""

    _EMULATOR_ONLY = Target._EMULATOR_ONLY + ("organization", "user", "uid", "roles", "emulator", "delete")

    @property
    def user_token(self) -> str:
        return self.api_key


@pytest.fixture(scope="session")
def cwsandbox_emulator(request: pytest.FixtureRequest) -> Iterator[Any]:
    """One emulator for the session (one per xdist worker), started from the packaged binary on a
    free port and stopped at the end; the session fails if a sandbox process outlived it. With
    --cwsandbox-target, the target instead (no emulator)."""
    settings = Settings(request.config)
    if settings.target:
        yield Target(settings.target, os.environ.get("CWSANDBOX_API_KEY", ""), settings.runner_id)
        return
    emulator = Emulator(values=settings.values, scenario=settings.scenario, timing=settings.timing, runtime=settings.runtime)
    emulator.start()
    try:
        yield emulator
    finally:
        emulator.stop()


@pytest.fixture
def cwsandbox_tenant(cwsandbox_emulator: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A fresh organization for this test, with its own user and admin tokens: CWSANDBOX_BASE_URL
    and CWSANDBOX_API_KEY (its user token) are set for the test, its sandboxes end and the tenant
    is deleted at teardown. With --cwsandbox-target: the target with your own key."""
    if isinstance(cwsandbox_emulator, Target):
        tenant: Any = TargetTenant(cwsandbox_emulator.base_url, cwsandbox_emulator.api_key, cwsandbox_emulator.runner_id)
    else:
        tenant = cwsandbox_emulator.create_tenant()
    for name, value in tenant.env().items():
        monkeypatch.setenv(name, value)
    try:
        yield tenant
    finally:
        if isinstance(tenant, Tenant):
            tenant.delete()
