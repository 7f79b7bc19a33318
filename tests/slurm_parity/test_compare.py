"""Tests of the parity comparer itself (run by scripts/slurm-parity before the daemons start):
what it normalises away, which differences it reports, and how the divergence list matches them."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import textwrap
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import compare  # noqa: E402

NORMALISER = compare.Normaliser(hosts=["vm"], emulator_job_ids={})


def result(stdout: str, stderr: str = "", status: int = 0) -> dict:
    return {"stdout": stdout, "stderr": stderr, "status": status}


def units(command: str, real: dict, emulator: dict) -> list[tuple[str | None, str | None]]:
    return [(unit.real, unit.emulator) for unit in compare.units_of(command, real, emulator, NORMALISER)]


class Normalisation(unittest.TestCase):
    def test_times_and_durations_keep_their_width(self) -> None:
        real = "  1000 R       1:20 2026-12-02T12:37:01\n"
        emulator = "  1000 R       1:21 2026-12-02T12:39:44\n"
        self.assertEqual(units("squeue", result(real), result(emulator)), [])

    def test_a_duration_of_another_width_is_a_difference(self) -> None:
        self.assertEqual(
            units("squeue", result("  1000 R       9:59\n"), result("  1000 R      10:00\n")),
            [("  1000 R       9:99", "  1000 R      99:99")],
        )

    def test_paths_and_hosts_are_normalised(self) -> None:
        self.assertEqual(units("squeue", result("1000 /work/a vm\n"), result("1000 / vm\n")), [])

    def test_counts_and_states_are_not(self) -> None:
        self.assertEqual(
            units("sacct", result("1008  PENDING  16\n"), result("1008  PENDING   0\n")),
            [("1008  PENDING  16", "1008  PENDING   0")],
        )

    def test_differing_job_ids_are_mapped_to_the_real_ones(self) -> None:
        normaliser = compare.Normaliser(hosts=[], emulator_job_ids={"2000": "1000"})
        self.assertEqual(compare.units_of("squeue", result("1000 R\n"), result("2000 R\n"), normaliser), [])


class CommandLines(unittest.TestCase):
    def test_a_trailing_2_greater_and_1_merges_the_streams(self) -> None:
        self.assertEqual(compare.argv_of('squeue -o "%.5i %!" 2>&1'), (["squeue", "-o", "%.5i %!"], True))
        self.assertEqual(compare.argv_of('squeue -o "%.5i 2>&1"'), (["squeue", "-o", "%.5i 2>&1"], False))

    def test_merged_streams_keep_the_order_written(self) -> None:
        with tempfile.TemporaryDirectory() as scratch:
            commands = Path(scratch) / "commands.txt"
            commands.write_text("sh -c 'echo error >&2; echo table' 2>&1\n")
            (Path(scratch) / "ids.json").write_text("{}")
            out = Path(scratch) / "out"
            args = compare.argparse.Namespace(commands=str(commands), job_ids=str(Path(scratch) / "ids.json"), out=str(out))
            compare.run(args)
            [done] = json.loads((out / "results.json").read_text())["results"]
            self.assertEqual((done["stdout"], done["stderr"]), ("error\ntable\n", ""))


class KeyValue(unittest.TestCase):
    COMMAND = "scontrol show job 1000"

    def test_keys_only_one_side_has(self) -> None:
        real = "JobId=1000 JobName=a\n   TRES=cpu=1\n   Power=\n   \n\n"
        emulator = "JobId=1000 JobName=a\n   ReqTRES=cpu=1\n\n"
        self.assertEqual(
            units(self.COMMAND, result(real), result(emulator)),
            [("TRES=cpu=1", None), ("Power=", None), (None, "ReqTRES=cpu=1"), ("blank line '   '", None)],
        )

    def test_volatile_values_are_not_compared_but_their_form_is(self) -> None:
        real = "JobId=1000 RunTime=00:01:20 StartTime=2026-12-02T12:00:00 EndTime=Unknown ExitCode=0:15\n\n"
        emulator = "JobId=1000 RunTime=00:00:02 StartTime=2026-12-02T13:00:00 EndTime=Unknown ExitCode=0:0\n\n"
        self.assertEqual(units(self.COMMAND, result(real), result(emulator)), [("ExitCode=0:15", "ExitCode=0:0")])

    def test_line_breaks_and_trailing_spaces(self) -> None:
        real = "NodeName=a Arch=x \n   State=IDLE\n\n"
        emulator = "NodeName=a Arch=x State=IDLE\n\n"
        self.assertEqual(
            units("scontrol show node a", result(real), result(emulator)),
            [("line starts at State", None), ("trailing space on the line of NodeName", None)],
        )

    def test_a_value_with_spaces_stays_one_value(self) -> None:
        records = compare.key_value_records("   OS=Linux 6.1 #1 SMP Debian RealMemory=1\n")
        self.assertEqual(records, [[([("OS", "Linux 6.1 #1 SMP Debian"), ("RealMemory", "1")], False)]])


class Streams(unittest.TestCase):
    def test_exit_status_and_stderr_are_compared(self) -> None:
        self.assertEqual(
            units("sinfo -R", result("", "sinfo: bad\n", 1), result("", "", 0)),
            [("exit 1", "exit 0"), ("stderr: sinfo: bad", None)],
        )


class DivergenceList(unittest.TestCase):
    def run_compare(self, divergences: str) -> tuple[int, str]:
        with tempfile.TemporaryDirectory() as directory:
            root = Path(directory)
            (root / "commands.txt").write_text("squeue --version\nsinfo\n")
            (root / "divergences.toml").write_text(textwrap.dedent(divergences))
            for side, version in (("real", "slurm-wlm 22.05.8\n"), ("emulator", "slurm 25.05.3\n")):
                (root / side).mkdir()
                results = [
                    {"command": "squeue --version", **result(version)},
                    {"command": "sinfo", **result("PARTITION AVAIL\n")},
                ]
                (root / side / "results.json").write_text(json.dumps({"job_ids": {}, "results": results}))
            done = subprocess.run(
                [sys.executable, str(Path(compare.__file__)), "compare", "--real", str(root / "real"),
                 "--emulator", str(root / "emulator"), "--commands", str(root / "commands.txt"),
                 "--divergences", str(root / "divergences.toml")],
                capture_output=True, text=True, check=False,
            )
            return done.returncode, done.stdout + done.stderr

    VERSION = """
        [[divergence]]
        kind = "version"
        commands = ["squeue --version"]
        real = 'slurm-wlm 22\\.05\\.8'
        emulator = 'slurm 25\\.05\\.\\d+'
        reason = "the version"
        source = "src/common/proc_args.c"
        """

    def test_a_listed_difference_passes(self) -> None:
        status, output = self.run_compare(self.VERSION)
        self.assertEqual(status, 0, output)
        self.assertIn("1 of 2 command forms match, 1 explained", output)

    def test_an_unlisted_difference_fails(self) -> None:
        status, output = self.run_compare("")
        self.assertEqual(status, 1, output)
        self.assertIn("NOT LISTED real: 'slurm-wlm 22.05.8' | emulator: 'slurm 25.05.3'", output)

    def test_a_one_sided_entry_does_not_explain_a_changed_line(self) -> None:
        status, output = self.run_compare(self.VERSION.replace("emulator = 'slurm 25\\.05\\.\\d+'\n", ""))
        self.assertEqual(status, 1, output)

    def test_an_entry_that_no_longer_occurs_fails(self) -> None:
        stale = self.VERSION + """
        [[divergence]]
        kind = "bug"
        item = "issue 16 item 10"
        commands = ["sinfo"]
        real = 'PARTITION AVAIL'
        reason = "gone"
        """
        status, output = self.run_compare(stale)
        self.assertEqual(status, 1, output)
        self.assertIn("entry 2 (bug: gone) no longer occurs", output)

    def test_an_entry_names_a_line_of_commands_txt(self) -> None:
        status, output = self.run_compare(self.VERSION.replace('["squeue --version"]', '["squeue -V"]'))
        self.assertEqual(status, 1, output)
        self.assertIn("is not a line of commands.txt", output)


if __name__ == "__main__":
    unittest.main()
