#!/usr/bin/env python3
"""bench/coldstart/coldstart_bench.py without a GPU: the table (ratios against the best loader per cache state), the
page-cache probe, and the driver end to end on the CPU path: a real epkd --cpu over a demo model (make_demo_model,
`epk compress`, `epk decompress`), the attach model written by epk_replicate_layers and served, loaders without
torch reported rather than fatal.

    python3 tests/bench/coldstart_bench_test.py EPKD EPK MAKE_DEMO_MODEL REPLICATE LIBEPK
"""

import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench" / "coldstart"))
import coldstart_bench as cb  # noqa: E402

TOOLS = {}


class Table(unittest.TestCase):
    def test_ratio_is_the_best_loader_over_the_row_per_cache_state(self):
        res = {
            "epk/warm": {"ready_s": 2.0, "read_bytes": 0, "file_bytes": 4e9, "cached_at_start": 1.0,
                         "acquire_all": {"acquire_all_s": 1.0}},
            "safetensors/warm": {"load_s": 9.0, "process_s": 12.0, "read_bytes": 0, "file_bytes": 16e9},
            "fastsafetensors/warm": {"load_s": 6.0, "process_s": 9.0, "read_bytes": 0, "file_bytes": 16e9},
            "runai/warm": {"error": "exit 1: no"},
            "epk/dropped": {"ready_s": 4.0, "acquire_all": {"acquire_all_s": 1.0}},
            "runai/dropped": {"load_s": 20.0},
        }
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            cb.print_tables(res)
        lines = out.getvalue().splitlines()
        tier_warm = next(l for l in lines if l.startswith("epk map: tier resident") and " warm " in l)
        self.assertTrue(tier_warm.rstrip().endswith("3.00x"), tier_warm)  # 6.0 / 2.0
        all_warm = next(l for l in lines if l.startswith("epk map: + all decoded once") and " warm " in l)
        self.assertTrue(all_warm.rstrip().endswith("2.00x"), all_warm)  # 6.0 / 3.0
        tier_dropped = next(l for l in lines if l.startswith("epk map: tier resident") and " dropped " in l)
        self.assertTrue(tier_dropped.rstrip().endswith("5.00x"), tier_dropped)  # 20.0 / 4.0
        runai_warm = next(l for l in lines if l.startswith("runai") and " warm " in l)
        self.assertIn("[exit 1: no]", runai_warm)


class PageCache(unittest.TestCase):
    def test_a_file_just_written_and_read_is_cached(self):
        with tempfile.NamedTemporaryFile() as f:
            f.write(os.urandom(1 << 20))
            f.flush()
            cb.warm_page_cache([f.name])
            self.assertEqual(cb.page_cache_fraction(f.name), 1.0)
            cb.drop_page_cache([f.name])  # evicts where the file system keeps a page cache (not tmpfs)
            self.assertGreaterEqual(cb.page_cache_fraction(f.name), 0.0)


@unittest.skipUnless(len(sys.argv) > 5 or TOOLS, "needs EPKD EPK MAKE_DEMO_MODEL REPLICATE LIBEPK")
class DryRun(unittest.TestCase):
    def test_cpu_path_end_to_end(self):
        with tempfile.TemporaryDirectory() as d:
            stage, model, out, work = (Path(d) / n for n in ("stage", "model", "out", "work"))
            for sub in ("epkd", "cli", "bin"):
                (stage / sub).mkdir(parents=True)
            os.symlink(TOOLS["epkd"], stage / "epkd" / "epkd")
            os.symlink(TOOLS["libepk"], stage / "epkd" / "libepk.so.2")
            os.symlink(TOOLS["epk"], stage / "cli" / "epk")
            os.symlink(TOOLS["replicate"], stage / "bin" / "epk_replicate_layers")
            subprocess.run([TOOLS["make_demo_model"], str(model / "src"), "--layers", "2", "--hidden", "128"],
                           check=True, capture_output=True)
            subprocess.run([TOOLS["epk"], "compress", str(model / "src"), "-o", str(model / "model.epk"), "--bpp", "4",
                            "--include-embeddings"], check=True, capture_output=True)
            (model / "decompressed").mkdir()
            subprocess.run([TOOLS["epk"], "decompress", str(model / "model.epk"), "-o",
                            str(model / "decompressed" / "model.safetensors")], check=True, capture_output=True)
            p = subprocess.run([sys.executable, str(ROOT / "bench" / "coldstart" / "coldstart_bench.py"), "drive",
                                "--stage", str(stage), "--model-dir", str(model), "--out", str(out), "--work",
                                str(work), "--device", "cpu", "--src-layers", "2", "--attach-layers", "5",
                                "--budget-mb", "16", "--attach-budget-mb", "16", "--deadline-s", "120",
                                "--only", "epk,epk-uring,safetensors,attach"],
                               capture_output=True, text=True, timeout=300)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            res = json.loads((out / "results.json").read_text())
            tensors = json.loads(subprocess.run([TOOLS["epk"], "inspect", str(model / "model.epk"), "--json"],
                                                check=True, capture_output=True, text=True).stdout)["tensors"]
            for key in ("epk/warm", "epk/dropped", "epk-uring/warm", "epk-uring/dropped"):
                self.assertGreater(res[key]["ready_s"], 0, key)
                self.assertEqual(res[key]["acquire_all"]["tensors"], len(tensors), key)
                self.assertEqual(res[key]["acquire_all"]["models"], 1, key)
            self.assertEqual(res["epk/warm"]["cached_at_start"], 1.0)
            # Without torch the loaders fail in their own process and say why; with it they load every tensor.
            st = res["safetensors/warm"]
            self.assertTrue("error" in st or st["tensors"] == len(tensors), st)
            a = res["attach"]
            layer = [t for t in tensors if t["name"].startswith("model.layers.1.")]
            self.assertEqual(a["layers"], 5)
            self.assertEqual(a["tensors"], len(tensors) + 3 * len(layer))  # 2 layers written as 5
            self.assertGreater(a["daemon_all_s"], a["daemon_first_s"])
            self.assertIn("Attach: a second process", p.stdout)
            self.assertIn("quoted, not measured", p.stdout)


if __name__ == "__main__":
    if len(sys.argv) > 5:
        TOOLS.update(zip(("epkd", "epk", "make_demo_model", "replicate", "libepk"), map(os.path.abspath, sys.argv[1:6])))
        del sys.argv[1:6]
    unittest.main()
