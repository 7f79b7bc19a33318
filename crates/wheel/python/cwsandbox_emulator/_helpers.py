"""Helpers over the emulator's own API: the clock, faults, Slurm accounting, Kubernetes objects,
values and reset. Each helper holds the client (and so the token) it calls with: a tenant's
helpers see only that tenant's part of the world."""

from __future__ import annotations

import datetime as _dt
import json
import re
from typing import Any, Dict, Iterable, List, Mapping, Optional, Union

from ._connect import ConnectClient

Seconds = Union[int, float, str, _dt.timedelta]


def duration(value: Seconds) -> str:
    """proto3 JSON of a `google.protobuf.Duration`: seconds (a number or a timedelta) as `"1.5s"`;
    a string ending in `s` passes through."""
    if isinstance(value, str):
        if not value.endswith("s"):
            raise ValueError(f"a duration string ends in 's' (proto3 JSON), got {value!r}")
        return value
    if isinstance(value, _dt.timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ValueError(f"a duration is a non-negative number of seconds, got {value!r}")
    text = f"{value:.9f}".rstrip("0").rstrip(".")
    return f"{text}s"


_FRACTION = re.compile(r"\.(\d+)")


def timestamp(text: str) -> _dt.datetime:
    """A proto3 JSON timestamp (`2026-01-02T03:04:05.123456789Z`) as an aware datetime (microseconds)."""
    text = _FRACTION.sub(lambda match: "." + match.group(1)[:6].ljust(6, "0"), text, count=1)
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    return _dt.datetime.fromisoformat(text)


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


class Clock:
    """The emulator's clock (operator only): frozen, it moves only when advanced."""

    def __init__(self, client: ConnectClient):
        self._client = client

    def _clock(self, method: str, body: Optional[dict] = None) -> dict:
        return self._client.call(method, body).get("clock", {})

    def now(self) -> _dt.datetime:
        """The emulator's current time."""
        return timestamp(self._clock("GetClock")["now"])

    @property
    def frozen(self) -> bool:
        return bool(self._clock("GetClock").get("frozen", False))

    def freeze(self) -> _dt.datetime:
        """Stops the clock; returns the time it stopped at."""
        return timestamp(self._clock("FreezeClock")["now"])

    def advance(self, seconds: Seconds) -> _dt.datetime:
        """Moves the clock forward (frozen or not); returns the new time."""
        return timestamp(self._clock("AdvanceClock", {"duration": duration(seconds)})["now"])

    def resume(self) -> _dt.datetime:
        """Lets time run again."""
        return timestamp(self._clock("ResumeClock")["now"])


_DURATION_FIELDS = ("retry_delay", "latency", "latency_max")
_DOMAIN_DURATIONS = ("oom_kill_after", "node_not_ready_after", "pending_for")


class Faults:
    """Faults over EmulatorService (AddFault, ListFaults, RemoveFault, ClearFaults). With a
    tenant's admin token they match only that tenant's calls."""

    def __init__(self, client: ConnectClient):
        self._client = client

    def add(
        self,
        method: str = "",
        code: str = "",
        *,
        times: int = 0,
        every: int = 0,
        probability: float = 0.0,
        seed: int = 0,
        message: str = "",
        reason: str = "",
        retry_delay: Optional[Seconds] = None,
        violations: Optional[Mapping[str, str]] = None,
        latency: Optional[Seconds] = None,
        latency_max: Optional[Seconds] = None,
        stream_messages: Optional[int] = None,
        organization: str = "",
        tags: Iterable[str] = (),
        headers: Optional[Mapping[str, str]] = None,
        domain: Optional[Mapping[str, Any]] = None,
    ) -> Dict[str, Any]:
        """Installs a fault; returns it (proto3 JSON, with its `id`).

        `method`: `CreateSandbox`, `coreweave.sandbox.v1.SandboxService/CreateSandbox` or a glob.
        `code`: a gRPC status name (`UNAVAILABLE`). When: the first `times` matching calls, every
        `every`-th, or each with `probability` drawn from `seed`; none of them: every call.
        Durations are seconds (numbers or timedeltas). `violations`: BadRequest field → description.
        `domain`: a DomainFault, e.g. `{"image_pull": "bad/*"}` or `{"oom_kill_after": 2}`."""
        match: Dict[str, Any] = {}
        if method:
            match["method"] = method
        if organization:
            match["organization"] = organization
        if tags:
            match["tags"] = list(tags)
        if headers:
            match["headers"] = {str(key).lower(): str(value) for key, value in headers.items()}
        action: Dict[str, Any] = {}
        for key, value in (("code", code), ("message", message), ("reason", reason)):
            if value:
                action[key] = value
        for key, value in zip(_DURATION_FIELDS, (retry_delay, latency, latency_max)):
            if value is not None:
                action[_camel(key)] = duration(value)
        if violations:
            action["violations"] = [{"field": field, "description": text} for field, text in violations.items()]
        if stream_messages is not None:
            action["streamMessages"] = stream_messages
        schedule: Dict[str, Any] = {}
        for key, value in (("times", times), ("every", every), ("probability", probability), ("seed", seed)):
            if value:
                schedule[key] = value
        fault: Dict[str, Any] = {"match": match, "action": action, "schedule": schedule}
        if domain:
            fault["domain"] = {
                _camel(key): duration(value) if key in _DOMAIN_DURATIONS else value for key, value in domain.items()
            }
        return self._client.call("AddFault", {"fault": fault}).get("fault", {})

    def list(self) -> List[Dict[str, Any]]:
        """The faults in force, with `matched` and `hits` counts (proto3 JSON)."""
        return self._client.call("ListFaults").get("faults", [])

    def remove(self, fault_id: str) -> Dict[str, Any]:
        """Removes one fault; returns it with its final counts."""
        return self._client.call("RemoveFault", {"id": fault_id}).get("fault", {})

    def clear(self) -> int:
        """Removes every fault in scope; returns how many went."""
        return int(self._client.call("ClearFaults").get("removed", 0))

    def hits(self, method_or_id: str) -> int:
        """Calls acted on, summed over the faults whose id is `method_or_id` or whose method is it
        (`CreateSandbox` also counts a fault on `…SandboxService/CreateSandbox`, and back)."""
        wanted = _short(method_or_id)
        total = 0
        for fault in self.list():
            method = fault.get("match", {}).get("method", "")
            if fault.get("id") == method_or_id or (method and _short(method) == wanted):
                total += int(fault.get("hits", 0))
        return total


def _short(method: str) -> str:
    return method.rsplit("/", 1)[-1]


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


# sacct's view of a job: the fields a row always has, with their empty values (proto3 JSON
# leaves defaults out).
_JOB_DEFAULTS: Dict[str, Any] = {
    "job_id": 0,
    "name": "",
    "user": "",
    "uid": 0,
    "group": "",
    "account": "",
    "partition": "",
    "qos": "",
    "state": "",
    "reason": "",
    "node_list": "",
    "alloc_nodes": 0,
    "alloc_cpus": 0,
    "req_cpus": 0,
    "req_mem_mb": 0,
    "req_gpus": 0,
    "exit_code": 0,
    "exit_signal": 0,
    "comment": "",
    "completing": False,
    "steps": [],
}


def _snake_tree(value: Any) -> Any:
    if isinstance(value, dict):
        return {_snake(key): _snake_tree(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_snake_tree(item) for item in value]
    return value


def job_row(job: Mapping[str, Any]) -> Dict[str, Any]:
    """A ListJobs job as a row: snake_case field names (`job_id`, `node_list`, …), every usual
    field present, `state` as sacct prints it (`RUNNING`, `COMPLETED`, …), numbers as ints."""
    row = dict(_JOB_DEFAULTS)
    row.update(_snake_tree(dict(job)))
    row["state"] = str(row["state"]).removeprefix("JOB_STATE_")
    row["source"] = str(row.get("source", "")).removeprefix("JOB_SOURCE_").lower()
    for step in row["steps"]:
        if isinstance(step, dict) and "state" in step:
            step["state"] = str(step["state"]).removeprefix("JOB_STATE_")
    for key in ("job_id", "uid", "gid", "alloc_nodes", "alloc_cpus", "req_cpus", "req_mem_mb", "req_gpus", "elapsed_seconds"):
        if key in row and isinstance(row[key], str):
            row[key] = int(row[key])
    return row


class Slurm:
    """Slurm accounting (ListJobs) and nodes, as a tenant or the operator sees them."""

    def __init__(self, client: ConnectClient):
        self._client = client

    def jobs(
        self,
        *,
        job_ids: Iterable[int] = (),
        users: Iterable[str] = (),
        states: Iterable[str] = (),
        partitions: Iterable[str] = (),
        names: Iterable[str] = (),
    ) -> List[Dict[str, Any]]:
        """Every job as `sacct` has it (the accounting rows, base states only), as rows (see
        `job_row`), filtered like sacct's options; states by name (`RUNNING`)."""
        return self._list("JOB_SOURCE_ACCOUNTING", job_ids, users, states, partitions, names)

    def queue(
        self,
        *,
        job_ids: Iterable[int] = (),
        users: Iterable[str] = (),
        states: Iterable[str] = (),
        partitions: Iterable[str] = (),
        names: Iterable[str] = (),
    ) -> List[Dict[str, Any]]:
        """The jobs in slurmctld's queue as `squeue` has them (pending, running, completing: the
        `completing` flag), as rows."""
        return self._list("JOB_SOURCE_QUEUE", job_ids, users, states, partitions, names)

    def _list(self, source, job_ids, users, states, partitions, names) -> List[Dict[str, Any]]:
        body: Dict[str, Any] = {"source": source}
        for key, values in (("jobIds", job_ids), ("users", users), ("partitions", partitions), ("names", names)):
            values = list(values)
            if values:
                body[key] = values
        state_names = [s if s.startswith("JOB_STATE_") else f"JOB_STATE_{s.upper()}" for s in states]
        if state_names:
            body["states"] = state_names
        return [job_row(job) for job in self._client.call("ListJobs", body).get("jobs", [])]

    def nodes(self) -> List[Dict[str, Any]]:
        """Slurm nodes (ListSlurmNodes), snake_case."""
        return [_snake_tree(node) for node in self._client.call("ListSlurmNodes").get("nodes", [])]


class WorldView:
    """Kubernetes objects, values and reset: what the emulator and a tenant share."""

    _client: ConnectClient
    _organization: str = ""

    def pods(self, namespace: str = "", label_selector: str = "", field_selector: str = "") -> List[Dict[str, Any]]:
        """Pods (ListPods), proto3 JSON (`metadata`, `spec`, `status`, `origin`)."""
        body = {"namespace": namespace, "labelSelector": label_selector, "fieldSelector": field_selector}
        return self._client.call("ListPods", {k: v for k, v in body.items() if v}).get("pods", [])

    def events(self, namespace: str = "", involved_object_name: str = "", field_selector: str = "") -> List[Dict[str, Any]]:
        """Kubernetes Events (ListEvents), proto3 JSON (`reason`, `message`, `involvedObject`, …)."""
        body = {"namespace": namespace, "involvedObjectName": involved_object_name, "fieldSelector": field_selector}
        return self._client.call("ListEvents", {k: v for k, v in body.items() if v}).get("events", [])

    def values(self) -> Dict[str, Any]:
        """The values in force (GetValues) as a tree."""
        return self._client.call("GetValues").get("values", {})

    def apply_values(
        self, values: Union[str, Mapping[str, Any]], *, replace: bool = False, validate_only: bool = False
    ) -> Dict[str, Any]:
        """Overlays values (a dict, or YAML/JSON text) on those in force (`replace=True`: the whole
        set); returns the values in force after it."""
        body: Dict[str, Any] = {"yaml": values} if isinstance(values, str) else {"values": json.loads(json.dumps(values))}
        body["mode"] = "APPLY_MODE_REPLACE" if replace else "APPLY_MODE_MERGE"
        if validate_only:
            body["validateOnly"] = True
        return self._client.call("ApplyValues", body).get("values", {})

    def reset(self) -> Dict[str, Any]:
        """Reset: a tenant's own part only (its sandboxes, Pods, jobs and faults); for the emulator
        object, the whole world back to its start."""
        body = {"organization": self._organization} if self._organization else {}
        return self._client.call("Reset", body)
