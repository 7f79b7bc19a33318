"""The pieces of the helpers that need no emulator: proto3 JSON durations and timestamps, job rows."""

import datetime as dt

import pytest

from cwsandbox_emulator._helpers import duration, job_row, timestamp


def test_durations_are_proto3_json_seconds():
    assert duration(5) == "5s"
    assert duration(0.25) == "0.25s"
    assert duration(dt.timedelta(minutes=2)) == "120s"
    assert duration(1e-9) == "0.000000001s"
    assert duration("3.5s") == "3.5s"
    for bad in (-1, "3", True, None):
        with pytest.raises(ValueError):
            duration(bad)


def test_timestamps_keep_microseconds_of_nanosecond_text():
    assert timestamp("2026-01-02T03:04:05.123456789Z") == dt.datetime(2026, 1, 2, 3, 4, 5, 123456, dt.timezone.utc)
    assert timestamp("2026-01-02T03:04:05Z") == dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc)
    assert timestamp("2026-01-02T03:04:05.5Z").microsecond == 500000


def test_jobs_become_sacct_rows_with_every_usual_field():
    row = job_row({"jobId": 1001, "name": "sandbox-abc", "state": "JOB_STATE_RUNNING", "nodeList": "slurm-1", "reqMemMb": "4096"})
    assert row["job_id"] == 1001
    assert row["state"] == "RUNNING"
    assert row["node_list"] == "slurm-1"
    assert row["req_mem_mb"] == 4096
    # Fields proto3 JSON leaves out when empty are there with their empty values.
    assert row["exit_code"] == 0 and row["partition"] == "" and row["steps"] == []


def test_job_steps_and_source_read_as_sacct_prints_them():
    row = job_row({"source": "JOB_SOURCE_ACCOUNTING", "state": "JOB_STATE_COMPLETED", "steps": [{"name": "batch", "state": "JOB_STATE_COMPLETED"}]})
    assert row["source"] == "accounting"
    assert row["steps"][0]["state"] == "COMPLETED"


class Recorder:
    """A stand-in for the Connect client: records the calls, answers a fixed response."""

    def __init__(self, response=None):
        self.calls = []
        self.response = response or {}

    def call(self, method, body=None):
        self.calls.append((method, body))
        return self.response


def test_faults_add_sends_the_fault_as_proto3_json():
    from cwsandbox_emulator import Faults

    client = Recorder({"fault": {"id": "fault-1"}})
    fault = Faults(client).add(
        method="CreateSandbox",
        code="UNAVAILABLE",
        times=2,
        reason="CWSANDBOX_RUNNER_OVERLOADED",
        retry_delay=0.5,
        violations={"spec.image": "no such image"},
        latency=0.1,
        latency_max=0.2,
        stream_messages=3,
        seed=7,
        tags=["retry"],
        headers={"X-Test-Case": "retry-*"},
    )
    assert fault == {"id": "fault-1"}
    [(method, body)] = client.calls
    assert method == "AddFault"
    assert body == {
        "fault": {
            "match": {"method": "CreateSandbox", "tags": ["retry"], "headers": {"x-test-case": "retry-*"}},
            "action": {
                "code": "UNAVAILABLE",
                "reason": "CWSANDBOX_RUNNER_OVERLOADED",
                "retryDelay": "0.5s",
                "latency": "0.1s",
                "latencyMax": "0.2s",
                "violations": [{"field": "spec.image", "description": "no such image"}],
                "streamMessages": 3,
            },
            "schedule": {"times": 2, "seed": 7},
        }
    }
    Faults(client).add(method="CreateSandbox", domain={"oom_kill_after": 2, "image_pull": "bad/*"})
    assert client.calls[-1][1]["fault"]["domain"] == {"oomKillAfter": "2s", "imagePull": "bad/*"}


def test_hits_sum_the_faults_on_a_method_by_short_or_full_name_or_id():
    from cwsandbox_emulator import Faults

    faults = Faults(
        Recorder(
            {
                "faults": [
                    {"id": "fault-1", "match": {"method": "CreateSandbox"}, "hits": "2"},
                    {"id": "fault-2", "match": {"method": "coreweave.sandbox.v1.SandboxService/CreateSandbox"}, "hits": 1},
                    {"id": "fault-3", "match": {"method": "GetSandbox"}, "hits": 5},
                    {"id": "fault-4", "match": {}},
                ]
            }
        )
    )
    assert faults.hits("CreateSandbox") == 3
    assert faults.hits("coreweave.sandbox.v1.SandboxService/CreateSandbox") == 3
    assert faults.hits("fault-3") == 5
    assert faults.hits("DeleteSandbox") == 0
