"""The emulator process (started on port 0 with a ready file, stopped with SIGTERM and checked
for orphans) and the tenants created in it."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
import weakref
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, NoReturn, Optional, Sequence, Union

from . import _procs
from ._connect import ConnectClient
from ._helpers import Clock, Faults, Slurm, WorldView

ValuesArg = Union[str, "os.PathLike[str]", Mapping[str, Any]]

TIMINGS = ("instant", "realistic")
# What runs a sandbox's commands (`serve --runtime`): the host's programs in namespaces, runc with
# the sandbox's image, or runc where it works and the host's programs elsewhere.
RUNTIMES = ("process", "oci", "auto")
# The environment variable the binary reads for its runtime: set, it is the user's choice.
RUNTIME_ENV = "CWSANDBOX_EMULATOR_RUNTIME"
SCENARIOS = ("ready", "fresh")
# A debug build on a busy machine may take a while to be ready, and to stop (its own stop is
# bounded at ten seconds, its sandboxes' grace periods included).
START_TIMEOUT = 120.0
STOP_TIMEOUT = 60.0
# Polling the ready file's existence while the process starts (not a wait for a test's outcome).
_READY_POLL = 0.02
# Set to keep the emulator's directory (log, ready file, kubeconfig, sandbox roots) after it stops.
KEEP_DIR = "CWSANDBOX_TEST_KEEP_DIR"


class EmulatorError(Exception):
    """The emulator did not start, did not stop cleanly, or left processes behind."""


class OrphanError(EmulatorError):
    """Processes of the emulator's sandboxes outlived it (they have been killed since)."""

    def __init__(self, message: str, survivors: List[_procs.Process]):
        super().__init__(message)
        self.survivors = survivors


def _memory_dir() -> Optional[str]:
    """/dev/shm where it is a memory file system (tmpfs) we may write to and execute from."""
    path = "/dev/shm"
    try:
        stat = os.statvfs(path)
        with open("/proc/mounts") as mounts:
            tmpfs = any(line.split()[1:3] == [path, "tmpfs"] for line in mounts)
    except OSError:
        return None
    if not tmpfs or stat.f_flag & os.ST_NOEXEC or not os.access(path, os.W_OK | os.X_OK):
        return None
    return path


def _keep_dirs() -> bool:
    return os.environ.get(KEEP_DIR, "") not in ("", "0")


def _remove(directories: List[Path]) -> None:
    """Removes a run's directories, unless `$CWSANDBOX_TEST_KEEP_DIR` asks to keep them."""
    if not _keep_dirs():
        for directory in directories:
            shutil.rmtree(directory, ignore_errors=True)


def _kill(process: subprocess.Popen, directories: List[Path]) -> None:
    """An emulator never stopped: killed, and its directories removed (the sandboxes' are in
    memory where /dev/shm allows)."""
    if process.poll() is None:
        process.kill()
        process.wait()
    _remove(directories)


def binary(name: str = "cwsandbox-emulator") -> str:
    """The path of a packaged binary (`cwsandbox-emulator` or `cwsbx`): `$CWSANDBOX_EMULATOR_BIN`
    for the emulator, else the one this interpreter's installation holds, else `PATH`'s."""
    if name == "cwsandbox-emulator" and os.environ.get("CWSANDBOX_EMULATOR_BIN"):
        return os.environ["CWSANDBOX_EMULATOR_BIN"]
    scheme_user = f"{os.name}_user"
    directories = [sysconfig.get_path("scripts"), os.path.dirname(sys.executable)]
    if scheme_user in sysconfig.get_scheme_names():
        directories.append(sysconfig.get_path("scripts", scheme_user))
    for directory in directories:
        candidate = os.path.join(directory, name)
        if os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which(name)
    if found is None:
        raise EmulatorError(f"no {name} binary: install the cwsandbox-emulator wheel (pip install cwsandbox-emulator)")
    return found


def _values_files(values: Union[None, ValuesArg, Sequence[ValuesArg]], directory: Path) -> List[str]:
    if values is None:
        return []
    if isinstance(values, (str, os.PathLike, Mapping)):
        values = [values]
    files = []
    for index, item in enumerate(values):
        if isinstance(item, Mapping):
            # JSON is YAML: the emulator reads it as a values file.
            path = directory / f"values-{index}.json"
            path.write_text(json.dumps(item))
            files.append(str(path))
        else:
            files.append(os.fspath(item))
    return files


class Emulator(WorldView):
    """A `cwsandbox-emulator serve` process of its own, on a free port:

        with Emulator(values={"runners": [...]}, timing="instant") as emu:
            tenant = emu.create_tenant()
            ...

    `values`: values files (paths) or dicts, overlaid in order like `-f`. `scenario`: `ready`
    (default) or `fresh`. `timing`: `instant` (default here) or `realistic`; None passes no
    `--timing`. `runtime`: `process` (default here), `oci` or `auto`; None passes no `--runtime`
    (the binary's own default, `auto`, or $CWSANDBOX_EMULATOR_RUNTIME). The default is `process`
    unless $CWSANDBOX_EMULATOR_RUNTIME is set: a test suite stays instant and hermetic on machines
    with runc too, where `auto` would pull each sandbox's image from its registry (see the README).
    `args`: more `serve` arguments. The stop fails (OrphanError) if any process of
    its sandboxes outlived it."""

    # The pytest plugin's stand-in for a real service (--cwsandbox-target) says True.
    is_target = False

    def __init__(
        self,
        values: Union[None, ValuesArg, Sequence[ValuesArg]] = None,
        *,
        scenario: Optional[str] = None,
        timing: Optional[str] = "instant",
        runtime: Optional[str] = "",
        args: Iterable[str] = (),
        env: Optional[Mapping[str, str]] = None,
        binary_path: Optional[str] = None,
        start_timeout: float = START_TIMEOUT,
    ):
        if scenario is not None and scenario not in SCENARIOS:
            raise ValueError(f"scenario must be one of {SCENARIOS}, got {scenario!r}")
        if timing is not None and timing not in TIMINGS:
            raise ValueError(f"timing must be one of {TIMINGS}, got {timing!r}")
        if runtime == "":
            runtime = None if (env or {}).get(RUNTIME_ENV) or os.environ.get(RUNTIME_ENV) else "process"
        if runtime is not None and runtime not in RUNTIMES:
            raise ValueError(f"runtime must be one of {RUNTIMES}, got {runtime!r}")
        self._values = values
        self.scenario = scenario
        self.timing = timing
        self.runtime = runtime
        self._args = list(args)
        self._env = dict(env or {})
        self._binary = binary_path
        self._start_timeout = start_timeout
        self._process: Optional[subprocess.Popen] = None
        self._log = None
        self.dir: Optional[Path] = None
        self._sandbox_parent: Optional[Path] = None
        self.ready: Dict[str, Any] = {}

    # ---- life cycle -----------------------------------------------------------------------

    def start(self) -> "Emulator":
        if self._process is not None:
            raise EmulatorError("already started")
        self.dir = Path(tempfile.mkdtemp(prefix="cwsandbox-emulator-py-"))
        # Sandbox roots are made and removed at every start and delete: in memory that costs
        # microseconds, on a disk file system milliseconds (as the emulator's own default does).
        memory = _memory_dir()
        self._sandbox_parent = Path(tempfile.mkdtemp(prefix="cwsandbox-emulator-py-", dir=memory)) if memory else self.dir
        ready_file = self.dir / "ready.json"
        command = [
            self._binary or binary(),
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--ready-file",
            str(ready_file),
            "--kubeconfig",
            str(self.dir / "kubeconfig"),
            "--sandbox-root",
            str(self.sandbox_root),
        ]
        for path in _values_files(self._values, self.dir):
            command += ["-f", path]
        if self.scenario:
            command += ["--scenario", self.scenario]
        if self.timing:
            command += ["--timing", self.timing]
        if self.runtime:
            command += ["--runtime", self.runtime]
        command += self._args
        env = dict(os.environ)
        env.setdefault("RUST_LOG", "info")
        env.update(self._env)
        self._log = open(self.dir / "emulator.log", "wb")
        self._process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT, env=env
        )
        # An emulator never stopped (no `with`, no stop()) goes with this interpreter at the latest.
        self._finalizer = weakref.finalize(self, _kill, self._process, self._directories())
        deadline = time.monotonic() + self._start_timeout
        while not ready_file.exists():
            code = self._process.poll()
            if code is not None:
                self._abandon(f"the emulator exited with code {code} before it was ready")
            if time.monotonic() > deadline:
                self._abandon(f"the emulator was not ready within {self._start_timeout:.0f}s")
            time.sleep(_READY_POLL)
        self.ready = json.loads(ready_file.read_text())
        self._operator = ConnectClient(self.base_url, self.admin_token)
        return self

    def _abandon(self, why: str) -> NoReturn:
        """Kills a start that failed and raises with its output."""
        self._finalizer.detach()
        if self._process is not None:
            _kill(self._process, [])
        self._process = None
        if self._log is not None:
            self._log.close()
            self._log = None
        message = f"{why}:\n{self.log()}"
        self._cleanup()
        raise EmulatorError(message)

    def stop(self) -> int:
        """SIGTERM, then waits for the exit; raises OrphanError if a process of its sandboxes is
        still alive after it, EmulatorError if it did not exit cleanly. Returns its exit code."""
        process = self._process
        if process is None:
            return 0
        self._process = None
        self._finalizer.detach()
        before = _procs.descendants(process.pid)
        process.send_signal(signal.SIGTERM)
        try:
            code = process.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            raise EmulatorError(f"the emulator did not stop within {STOP_TIMEOUT:.0f}s of SIGTERM:\n{self.log()}") from None
        finally:
            if self._log is not None:
                self._log.close()
                self._log = None
        survivors = [p for p in before if p.is_alive()]
        survivors += [p for p in _procs.in_directory(str(self.sandbox_root)) if p not in survivors]
        if survivors:
            for survivor in survivors:
                try:
                    os.kill(survivor.pid, signal.SIGKILL)
                except OSError:
                    pass
            listing = "\n".join(str(p) for p in survivors)
            message = f"processes outlived the emulator (now killed):\n{listing}\nemulator log:\n{self.log()}"
            self._cleanup()
            raise OrphanError(message, survivors)
        if code != 0:
            message = f"the emulator exited with code {code}:\n{self.log()}"
            self._cleanup()
            raise EmulatorError(message)
        self._cleanup()
        return code

    def _directories(self) -> List[Path]:
        """The run's directories: its own, and the sandboxes' where they are elsewhere."""
        assert self.dir is not None and self._sandbox_parent is not None, "not started"
        return [self.dir] if self._sandbox_parent == self.dir else [self.dir, self._sandbox_parent]

    def _cleanup(self) -> None:
        if self.dir is None:
            return
        if _keep_dirs():
            sys.stderr.write(f"{KEEP_DIR}: kept the emulator's directory {self.dir} (sandboxes: {self.sandbox_root})\n")
            return
        _remove(self._directories())

    def __enter__(self) -> "Emulator":
        return self.start()

    def __exit__(self, *exc_info: Any) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def log(self) -> str:
        """The emulator's output so far."""
        if self.dir is None:
            return ""
        try:
            return (self.dir / "emulator.log").read_text(errors="replace")
        except OSError:
            return ""

    # ---- connection -----------------------------------------------------------------------

    @property
    def sandbox_root(self) -> Path:
        """Where the sandboxes' directories are: under /dev/shm where it is a memory file system
        that allows executing files, else in the emulator's directory."""
        assert self.dir is not None, "not started"
        return self._sandbox_parent / "sandboxes"

    @property
    def base_url(self) -> str:
        return self.ready["base_url"]

    @property
    def dashboard_url(self) -> str:
        """The web dashboard (sign in with `admin_token`): the cluster, Slurm and every sandbox, live."""
        return self.base_url + "/ui/"

    @property
    def admin_token(self) -> str:
        """The operator's token (cluster_admin)."""
        return self.ready["admin_token"]

    @property
    def user_token(self) -> str:
        return self.ready["user_token"]

    @property
    def runner_id(self) -> str:
        return self.ready["runner_id"]

    @property
    def org(self) -> str:
        return self.ready["org"]

    @property
    def pid(self) -> int:
        return int(self.ready["pid"])

    @property
    def isolation(self) -> str:
        return self.ready.get("isolation", "")

    @property
    def container_runtime(self) -> str:
        """What runs the sandboxes' commands, as the emulator reports it (`process`, `oci`…)."""
        return self.ready.get("container_runtime", "")

    @property
    def kubeconfig(self) -> str:
        return self.ready.get("kubeconfig", "")

    def env(self) -> Dict[str, str]:
        """What a client needs to talk to it: CWSANDBOX_BASE_URL, CWSANDBOX_API_KEY (the user
        token), CWSANDBOX_RUNNER_ID, KUBECONFIG."""
        return {
            "CWSANDBOX_BASE_URL": self.base_url,
            "CWSANDBOX_API_KEY": self.user_token,
            "CWSANDBOX_RUNNER_ID": self.runner_id,
            "KUBECONFIG": self.kubeconfig,
        }

    # ---- the emulator's own API, as the operator ------------------------------------------

    @property
    def _client(self) -> ConnectClient:  # type: ignore[override]
        return self._operator

    @property
    def api(self) -> ConnectClient:
        """The operator's client of EmulatorService (`emu.api.call("ListNodes")`)."""
        return self._operator

    @property
    def clock(self) -> Clock:
        return Clock(self._operator)

    @property
    def faults(self) -> Faults:
        return Faults(self._operator)

    @property
    def slurm(self) -> Slurm:
        return Slurm(self._operator)

    def create_tenant(
        self, organization: str = "", *, user: str = "", uid: Optional[int] = None, roles: Iterable[str] = ()
    ) -> "Tenant":
        """A fresh organization with its own user and admin tokens (CreateTenant)."""
        body: Dict[str, Any] = {"organization": organization, "user": user, "roles": list(roles)}
        if uid is not None:
            body["uid"] = uid
        return Tenant(self, self._operator.call("CreateTenant", body)["tenant"])

    def tenants(self) -> List[Dict[str, Any]]:
        """The tenants created at run time (ListTenants), proto3 JSON."""
        return self._operator.call("ListTenants").get("tenants", [])


class Tenant(WorldView):
    """One organization of an emulator, for one test: `user_token` is what the code under test
    uses (`api_key`), the helpers call with its `admin_token` and so see only its part of the
    world; the clock is the emulator's (operator only)."""

    is_target = False

    def __init__(self, emulator: Emulator, tenant: Mapping[str, Any]):
        self.emulator = emulator
        self.organization: str = tenant.get("organization", "")
        self.user: str = tenant.get("user", "")
        self.uid: int = int(tenant.get("uid", 0))
        self.roles: List[str] = list(tenant.get("roles", []))
        self.user_token: str = tenant.get("userToken", tenant.get("user_token", ""))
        self.admin_token: str = tenant.get("adminToken", tenant.get("admin_token", ""))
        self.runner_ids: List[str] = list(tenant.get("runnerIds", tenant.get("runner_ids", [])))
        self._admin = ConnectClient(emulator.base_url, self.admin_token)
        self._organization = self.organization
        self.deleted = False

    @property
    def _client(self) -> ConnectClient:  # type: ignore[override]
        return self._admin

    @property
    def base_url(self) -> str:
        return self.emulator.base_url

    @property
    def api_key(self) -> str:
        return self.user_token

    @property
    def runner_id(self) -> str:
        """The tenant's first runner (the emulator's default runner, created for it)."""
        return self.runner_ids[0] if self.runner_ids else self.emulator.runner_id

    @property
    def api(self) -> ConnectClient:
        """The tenant admin's client of EmulatorService."""
        return self._admin

    @property
    def clock(self) -> Clock:
        return self.emulator.clock

    @property
    def faults(self) -> Faults:
        return Faults(self._admin)

    @property
    def slurm(self) -> Slurm:
        return Slurm(self._admin)

    def apply_values(self, values, *, replace: bool = False, validate_only: bool = False) -> Dict[str, Any]:
        """Values are the emulator's, not a tenant's: applied as the operator."""
        return self.emulator.apply_values(values, replace=replace, validate_only=validate_only)

    def env(self) -> Dict[str, str]:
        return {
            "CWSANDBOX_BASE_URL": self.base_url,
            "CWSANDBOX_API_KEY": self.user_token,
            "CWSANDBOX_RUNNER_ID": self.runner_id,
        }

    def delete(self) -> None:
        """DeleteTenant: its tokens stop working, its sandboxes end at once, its part is reset."""
        if not self.deleted:
            self.emulator.api.call("DeleteTenant", {"organization": self.organization})
            self.deleted = True
