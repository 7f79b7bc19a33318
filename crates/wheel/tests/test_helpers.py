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
