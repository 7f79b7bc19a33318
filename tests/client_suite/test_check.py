"""The checker of the client suite's expectations (run by scripts/client-suite before the suite)."""

import tempfile
import textwrap
import unittest
from pathlib import Path

import check

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest">
  <testcase classname="tests.integration.cwsandbox.test_sandbox" name="test_ok" />
  <testcase classname="tests.integration.cwsandbox.test_sandbox" name="test_broken[a-1]">
    <failure message="boom">trace</failure></testcase>
  <testcase classname="tests.integration.cwsandbox.test_sandbox.TestGroup" name="test_skipped">
    <skipped message="no feature" /></testcase>
  <testcase classname="tests.integration.cwsandbox.test_session" name="test_teardown">
    <error message="teardown">trace</error></testcase>
</testsuite></testsuites>
"""

EXPECTED = """
runtimes = ["process"]

[deselected]
"tests/integration/cwsandbox/test_dns_egress.py" = "reaches hosts off this machine"

[[process]]
test = "tests/integration/cwsandbox/test_sandbox.py::test_broken[a-1]"
outcome = "failed"
reason = "a gap"
fix = "issue 34 item 1"

[[process]]
test = "tests/integration/cwsandbox/test_sandbox.py::TestGroup::test_skipped"
outcome = "skipped"
reason = "needs an account"
never = "no account here"

[[process]]
test = "tests/integration/cwsandbox/test_session.py::test_teardown"
outcome = "failed"
reason = "another gap"
fix = "issue 34 item 2"
"""


class CheckTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)
        self.junit = Path(self.dir.name, "junit.xml")
        self.junit.write_text(JUNIT)

    def expectations(self, text):
        path = Path(self.dir.name, "expected.toml")
        path.write_text(textwrap.dedent(text))
        return check.load(path)

    def test_node_ids_follow_pytest(self):
        results = check.outcomes(self.junit)
        self.assertEqual(
            results,
            {
                "tests/integration/cwsandbox/test_sandbox.py::test_ok": "passed",
                "tests/integration/cwsandbox/test_sandbox.py::test_broken[a-1]": "failed",
                "tests/integration/cwsandbox/test_sandbox.py::TestGroup::test_skipped": "skipped",
                "tests/integration/cwsandbox/test_session.py::test_teardown": "failed",
            },
        )

    def test_listed_outcomes_hold(self):
        expectations = self.expectations(EXPECTED)
        results = check.outcomes(self.junit)
        self.assertEqual(check.check(expectations.by_runtime["process"], results, False), [])
        self.assertEqual(
            check.summary("process", results),
            "client suite (process runtime): 1 passed / 2 expected failures / 1 skipped",
        )
        self.assertEqual(list(expectations.deselected), ["tests/integration/cwsandbox/test_dns_egress.py"])

    def test_an_unlisted_failure_a_stale_entry_and_a_changed_outcome_fail(self):
        listed = self.expectations(EXPECTED).by_runtime["process"]
        results = check.outcomes(self.junit)
        results["tests/integration/cwsandbox/test_sandbox.py::test_ok"] = "failed"
        results["tests/integration/cwsandbox/test_sandbox.py::test_broken[a-1]"] = "passed"
        results["tests/integration/cwsandbox/test_sandbox.py::TestGroup::test_skipped"] = "failed"
        del results["tests/integration/cwsandbox/test_session.py::test_teardown"]
        problems = check.check(listed, results, False)
        self.assertEqual(len(problems), 4, problems)
        for expected in [
            "test_ok failed and is not in the expectations",
            "test_broken[a-1] passes now",
            "test_skipped failed, listed as skipped",
            "test_teardown is listed but did not run",
        ]:
            self.assertTrue(any(expected in problem for problem in problems), (expected, problems))
        # A -k run checks only what ran.
        self.assertEqual(len(check.check(listed, results, True)), 3)

    def test_malformed_entries_are_refused(self):
        for broken in [
            'runtimes = []',
            'runtimes = ["process"]\n[[process]]\ntest = "x"\noutcome = "failed"\nreason = "r"\nfix = "f"',
            'runtimes = ["process"]\n[[process]]\ntest = "a.py::t"\noutcome = "passed"\nreason = "r"\nfix = "f"',
            'runtimes = ["process"]\n[[process]]\ntest = "a.py::t"\noutcome = "failed"\nreason = ""\nfix = "f"',
            'runtimes = ["process"]\n[[process]]\ntest = "a.py::t"\noutcome = "failed"\nreason = "r"',
            'runtimes = ["process"]\n[[process]]\ntest = "a.py::t"\noutcome = "failed"\nreason = "r"\nfix = "f"\nnever = "n"',
            'runtimes = ["process"]\n[[oci]]\ntest = "a.py::t"\noutcome = "failed"\nreason = "r"\nfix = "f"',
        ]:
            with self.subTest(broken=broken), self.assertRaises(check.ExpectationsError):
                self.expectations(broken)


if __name__ == "__main__":
    unittest.main()
