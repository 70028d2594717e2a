#!/usr/bin/env python3
"""scripts/diloco_projection.py: the 1B-on-H100s energy projection against arithmetic by hand,
and its refusal of a summary without to_target (one line naming the field, non-zero exit)."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts",
                      "diloco_projection.py")
sys.path.insert(0, os.path.dirname(SCRIPT))
import diloco_projection as p  # noqa: E402


class Projection(unittest.TestCase):
    def test_by_hand(self):
        ddp, dl = p.project(2e10, 0.85, 10)
        # 2e10 tokens / (4 workers x 5e5) = 10,000 steps of 6e9 x 5e5 / (0.4 x 989e12) s.
        step_s = 6e9 * 5e5 / (0.4 * 989e12)
        self.assertAlmostEqual(ddp["compute"], 4 * 10000 * step_s * 553.4, delta=1)
        # An fp32 ring all-reduce: 6 x (4e9 / 4 / 1.25e8 + 0.025) s waiting, 6e9 bytes, a step.
        self.assertAlmostEqual(ddp["idle"], 4 * 10000 * 6 * (8 + 0.025) * 117, delta=1)
        self.assertAlmostEqual(ddp["network"], 4 * 10000 * 6e9 * 1.744e-7, delta=1)
        # DiLoCo: 0.85 x 10,000 steps in rounds of 10; an int8 all-gather and 9 RTT a round.
        self.assertAlmostEqual(dl["compute"], 0.85 * ddp["compute"], delta=1)
        self.assertAlmostEqual(dl["idle"], 4 * 850 * (3 * (8 + 0.025) + 0.45) * 117, delta=1)
        self.assertAlmostEqual(dl["network"], 4 * 850 * 3e9 * 1.744e-7, delta=1)

    def test_a_summary_without_to_target_is_one_line_naming_it(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "s.json")
            with open(path, "w") as f:
                json.dump({"tokens": 1, "inner_steps": 10}, f)
            r = subprocess.run([sys.executable, SCRIPT, path, path], capture_output=True,
                               text=True)
            self.assertNotEqual(r.returncode, 0)
            self.assertEqual(r.stderr.strip(),
                             f"diloco_projection: {path}: field 'to_target': missing "
                             "(run with --target-loss)")


if __name__ == "__main__":
    unittest.main()
