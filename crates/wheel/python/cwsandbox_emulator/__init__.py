"""The CoreWeave Sandbox API emulator for Python test suites.

- `Emulator`: a context manager running the packaged `cwsandbox-emulator` binary on a free port
  (`with Emulator(values=..., timing="instant") as emu:`), for unittest and scripts.
- The pytest plugin (`cwsandbox_emulator.plugin`, loaded through the `pytest11` entry point): the
  fixtures `cwsandbox_emulator` (one emulator per session) and `cwsandbox_tenant` (a fresh
  organization per test, with `CWSANDBOX_BASE_URL` and `CWSANDBOX_API_KEY` set).
- `python -m cwsandbox_emulator serve …` runs the binary itself.

The Python side uses the standard library only: it talks to the emulator's own API
(`coreweave.sandbox.emulator.v1.EmulatorService`) over Connect JSON.
"""

from ._connect import ConnectClient, EmulatorApiError
from ._emulator import Emulator, EmulatorError, OrphanError, Tenant, binary
from ._helpers import Clock, Faults, Slurm

__all__ = [
    "Clock",
    "ConnectClient",
    "Emulator",
    "EmulatorApiError",
    "EmulatorError",
    "Faults",
    "OrphanError",
    "Slurm",
    "Tenant",
    "binary",
]
