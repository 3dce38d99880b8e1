#!/usr/bin/env python3
"""The parts of bench/prefill/prefill_bench.py that run without torch or a GPU: which NVML pid is which process,
the memory peaks, the tables and targets (the cap sweep's rows, the compute-only line fit), the runs per cap, epkd's config (checked by `epkd --check-config` when epkd's path is given),
and the driver end to end with a real epkd (host pools) and a stand-in for the setup process (when epk's path is
given too).

    python3 tests/bench/prefill_bench_test.py [EPKD [EPK]]
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

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench" / "prefill"))
import prefill_bench as pb  # noqa: E402
import prefill_report as pr  # noqa: E402
import prefill_tables as pt  # noqa: E402

EPKD = None
EPK = None
MIB = pb.MIB


def seen(first, lists=("compute",), name=None):
    return {"first": first, "lists": set(lists), "name": name}


class Attribution(unittest.TestCase):
    def test_pids_of_this_namespace_match_exactly(self):
        s = {100: seen(0.5), 200: seen(2.0)}
        got = pr.attribute_pids(s, [("epkd", 100, 0.1), ("client", 200, 1.5)], baseline=[], mps=False)
        self.assertEqual(got, {100: "epkd", 200: "client"})

    def test_host_pids_go_by_order_of_appearance(self):
        # A pid namespace: NVML's pids are not ours and it names no process. epkd started at 0.1 and showed up at
        # 0.9; the client started at 1.5 and showed up at 3.0. Pid order is the reverse of start order on purpose.
        s = {9000: seen(3.0), 5000: seen(0.9)}
        got = pr.attribute_pids(s, [("epkd", 10, 0.1), ("client", 11, 1.5)], baseline=[], mps=False)
        self.assertEqual(got, {5000: "epkd", 9000: "client"})

    def test_a_pid_before_any_start_is_other(self):
        s = {7: seen(0.05), 8: seen(2.0)}
        got = pr.attribute_pids(s, [("client", 11, 1.0)], baseline=[], mps=False)
        self.assertEqual(got, {7: "other", 8: "client"})

    def test_baseline_pids_are_left_out(self):
        s = {1: seen(0.0), 2: seen(1.2)}
        got = pr.attribute_pids(s, [("client", 99, 1.0)], baseline=[1], mps=False)
        self.assertEqual(got, {1: "baseline", 2: "client"})

    def test_names_win_over_order(self):
        # The client's context appears first (it raced epkd's): the names still tell them apart.
        s = {300: seen(0.5, name="/usr/bin/python3.12"), 301: seen(0.7, name="/stage/epkd/epkd")}
        got = pr.attribute_pids(s, [("epkd", 1, 0.1), ("client", 2, 0.2)], baseline=[], mps=False)
        self.assertEqual(got, {300: "client", 301: "epkd"})

    def test_mps_server_is_the_pid_outside_the_mps_list(self):
        s = {40: seen(0.8, ("compute",)), 41: seen(0.9, ("mps",)), 42: seen(2.5, ("mps",))}
        got = pr.attribute_pids(s, [("epkd", 1, 0.1), ("client", 2, 2.0)], baseline=[], mps=True)
        self.assertEqual(got, {40: "mps-server", 41: "epkd", 42: "client"})
        # Without MPS the same lists mean nothing: order decides, and the third pid is another process.
        got = pr.attribute_pids(s, [("epkd", 1, 0.1), ("client", 2, 2.0)], baseline=[], mps=False)
        self.assertEqual(got, {40: "epkd", 41: "other", 42: "client"})


class Summaries(unittest.TestCase):
    def test_peak_sum_is_of_one_sample_not_the_sum_of_peaks(self):
        roles = {1: "client", 2: "epkd", 3: "baseline"}
        samples = [(0.0, {3: 500 * MIB}, 1000 * MIB),
                   (0.1, {1: 100 * MIB, 2: 900 * MIB, 3: 500 * MIB}, 2500 * MIB),
                   (0.2, {1: 800 * MIB, 2: 300 * MIB, 3: 500 * MIB}, 2600 * MIB)]
        got = pr.summarize_samples(samples, roles, baseline_used=1000 * MIB)
        self.assertEqual(got["client_bytes"], 800 * MIB)
        self.assertEqual(got["epkd_bytes"], 900 * MIB)
        self.assertEqual(got["sum_bytes"], 1100 * MIB)  # not 1700: never both at their peaks
        self.assertEqual(got["device_delta_bytes"], 1600 * MIB)
        self.assertIsNone(got["mps_server_bytes"])
        self.assertEqual(got["samples"], 3)

    def test_missing_numbers_stay_missing(self):
        got = pr.summarize_samples([(0.0, {1: None}, None)], {1: "client"}, baseline_used=None)
        self.assertIsNone(got["client_bytes"])
        self.assertIsNone(got["sum_bytes"])
        self.assertIsNone(got["device_delta_bytes"])

    def test_attempts_merge_to_their_largest(self):
        a = {k: None for k in pr.MEMORY_KEYS} | {"client_bytes": 5, "sum_bytes": 9}
        b = {k: None for k in pr.MEMORY_KEYS} | {"client_bytes": 7, "device_delta_bytes": 3}
        got = pb.merge_memory([a, b])
        self.assertEqual((got["client_bytes"], got["sum_bytes"], got["device_delta_bytes"], got["epkd_bytes"]),
                         (7, 9, 3, None))

    def test_median(self):
        self.assertEqual(pr.median([3.0, 1.0, 2.0]), 2.0)
        self.assertEqual(pr.median([4.0, 1.0, 2.0, 3.0]), 2.5)
        with self.assertRaises(ValueError):
            pr.median([])


def result(setup, prefill=None, memory=None, logits=None, generate=None, status="done", **extra):
    r = {"setup": setup, "status": status, "check_len": 1024,
         "prefill": {str(n): {"times_ms": [v, v * 1.1, v * 0.9], "median_ms": v,
                              "torch_max_allocated_bytes": 1900 * MIB} for n, v in (prefill or {}).items()},
         "memory": {k: None for k in pr.MEMORY_KEYS} | (memory or {}), "logits": logits or {}}
    if generate:
        r["generate"] = generate
    r.update(extra)
    return r


class Tables(unittest.TestCase):
    def results(self):
        eq = {"equal": True, "max_abs_diff": 0.0}
        return {
            "decompressed": result("decompressed", logits={"sha256": "x"}),
            "resident": result("resident", {1024: 30.0, 4096: 120.0, 16384: 580.0},
                               {"client_bytes": 16000 * MIB},
                               {"vs_decompressed": {"equal": False, "max_abs_diff": 0.25}},
                               {"prompt": 1024, "new_tokens": 32, "times_ms": [310.0], "median_ms": 310.0}),
            "epk-client": result("epk-client", {1024: 33.0, 4096: 124.0, 16384: 600.0},
                                 {"client_bytes": 2500 * MIB, "epkd_bytes": 3500 * MIB, "sum_bytes": 5900 * MIB},
                                 {"vs_decompressed": eq}),
            "epk-daemon": result("epk-daemon", {1024: 80.0}, logits={"vs_decompressed": {"equal": False,
                                                                                         "max_abs_diff": 0.5}}),
            "epk-daemon-mps": result("epk-daemon-mps", status="failed", error="Traceback\nRuntimeError: no MPS"),
            "accelerate": result("accelerate", {4096: 1980.0}, logits={"vs_resident": eq},
                                 params={"gpu_bytes": 5900 * MIB}, device_map_counts={"gpu": 10, "cpu": 26}),
        }

    def test_rows_ratios_and_notes(self):
        t = pb.format_tables(self.results(), [1024, 4096, 16384])
        self.assertIn("| epk-client | 4096 | 124.0 | 111.6-136.4 | 1.03x | 1900 | 2500 | 3500 | 5900 | n/a | "
                      "bit-equal to decompressed |", t)
        self.assertIn("| resident | 16384 | 580.0 |", t)
        self.assertIn("max abs diff 0.5 vs decompressed", t)
        self.assertIn("bit-equal to resident", t)
        self.assertIn("failed: RuntimeError: no MPS", t)
        self.assertIn("| accelerate | 4096 | 1980 | 1782-2178 | 16.50x |", t)
        self.assertIn("modules on the GPU 10, offloaded to the CPU 26", t)
        # Generation: ms/token over all 32, decode per token after the 1024-token prefill over the other 31.
        self.assertIn("| resident | 1024 | 32 | 310.0 | 9.7 | 9.0 | 1 |", t)
        self.assertIn("| epk-client | - | - | not measured |", t)

    def test_targets_are_judged_on_the_figures(self):
        lines = pt.targets(self.results())
        self.assertIn("- epk-client at 4096 tokens within 1.05x of resident: 1.033x (124.0 vs 120.0 ms): met", lines)
        self.assertIn("- epk-client at 16384 tokens within 1.02x of resident: 1.034x (600.0 vs 580.0 ms): missed",
                      lines)
        self.assertIn("- epk-client GPU memory (client + epkd) at most 40% of resident's: 36.9% (5900 of 16000 MiB): "
                      "met", lines)
        self.assertIn("- epk-client at least 15x faster than accelerate at 4096 tokens: 16.0x (124.0 vs 1980.0 ms): "
                      "met", lines)
        self.assertIn("- epk-client logits bit-equal to the decompressed model's: yes", lines)
        self.assertIn("- epk-daemon logits bit-equal to the decompressed model's: NO (max abs diff 0.5)", lines)

    def test_the_mps_server_is_reported_apart(self):
        r = {"epk-daemon-mps": result("epk-daemon-mps", {1024: 40.0}, {"mps_server_bytes": 300 * MIB},
                                      mps={"servers": "12345"})}
        t = pb.format_tables(r, [1024])
        self.assertIn("- MPS servers during epk-daemon-mps: 12345; the server's own GPU memory 300 MiB", t)
        r["epk-daemon-mps"]["mps"] = {"servers": ""}
        self.assertIn("none seen (MPS not in use)", pb.format_tables(r, [1024]))

    def test_missing_figures_are_na(self):
        lines = pt.targets({"resident": result("resident", {4096: 120.0})})
        self.assertTrue(all(line.endswith(": n/a") for line in lines), lines)

    def test_gpu_total_falls_back_to_the_device_figure(self):
        self.assertEqual(pb.gpu_total(result("x", memory={"sum_bytes": 5, "device_delta_bytes": 9})), 5)
        self.assertEqual(pb.gpu_total(result("x", memory={"device_delta_bytes": 9})), 9)
        self.assertIsNone(pb.gpu_total(None))


class CapSweep(unittest.TestCase):
    """Issue 32: runs keyed by cap, one table row per (setup, cap), the peers judged against each cap."""

    def results(self):
        eq = {"equal": True, "max_abs_diff": 0.0}
        gen = {"prompt": 1024, "new_tokens": 32, "times_ms": [640.0], "median_ms": 640.0}
        return {
            "resident": result("resident", {1024: 30.0, 4096: 120.0, 16384: 580.0}, {"client_bytes": 19000 * MIB},
                               generate=gen),
            "epk-client-host_cap4": result("epk-client-host", {1024: 80.0, 4096: 150.0, 16384: 600.0},
                                        {"sum_bytes": 5000 * MIB}, {"vs_decompressed": eq},
                                        params={"max_gpu_gb": 1.5, "cap_bytes": 4 << 30}),
            "epk-client-host_cap6": result("epk-client-host", {1024: 60.0, 4096: 130.0, 16384: 585.0},
                                        {"sum_bytes": 6000 * MIB}, {"vs_decompressed": eq},
                                        {"prompt": 1024, "new_tokens": 32, "times_ms": [2000.0], "median_ms": 2000.0},
                                        params={"max_gpu_gb": 2.0, "cap_bytes": 6 << 30}),
            "offload-bf16": result("offload-bf16", {1024: 250.0, 4096: 260.0, 16384: 580.0},
                                   {"client_bytes": 6336 * MIB, "sum_bytes": 6336 * MIB},
                                   {"vs_decompressed": {"equal": False, "max_abs_diff": 8.0}},
                                   {"prompt": 1024, "new_tokens": 32, "times_ms": [8000.0], "median_ms": 8000.0}),
            "nf4": result("nf4", {1024: 40.0}, {"client_bytes": 7000 * MIB, "sum_bytes": 7000 * MIB}),
            "accelerate_cap6": result("accelerate", {1024: 1100.0}, params={"gpu_bytes": 2 << 30},
                                   device_map_counts={"gpu": 3, "cpu": 33}),
        }

    def test_keys(self):
        self.assertEqual(pr.run_key("epk-client-host", 6.0), "epk-client-host_cap6")
        self.assertEqual(pr.run_key("accelerate", 12.5), "accelerate_cap12.5")
        self.assertEqual(pr.run_key("resident"), "resident")
        self.assertEqual(pr.split_key("accelerate_cap12.5"), ("accelerate", 12.5))
        self.assertEqual(pr.split_key("nf4"), ("nf4", None))
        keys = ["accelerate_cap4", "epk-client-host_cap12", "resident", "epk-client-host_cap4", "decompressed"]
        self.assertEqual(sorted(keys, key=pr.key_order), ["decompressed", "resident", "epk-client-host_cap4",
                                                          "epk-client-host_cap12", "accelerate_cap4"])

    def test_one_row_per_setup_and_cap(self):
        rows = pt.cap_table(self.results(), [1024, 4096, 16384])
        self.assertIn("| epk-client-host | 4 | max_gpu_gb 1.5 | 80.0 (2.67x) | 150.0 (1.25x) | 600.0 (1.03x) | n/a | "
                      "5000 MiB | does not fit: peak 5000 MiB > cap 4096 MiB | bit-equal to decompressed |", rows)
        self.assertIn("| epk-client-host | 6 | max_gpu_gb 2 | 60.0 (2.00x) | 130.0 (1.08x) | 585.0 (1.01x) | "
                      "62.5 (3.12x) | 6000 MiB | fits (6000 <= 6144 MiB) | bit-equal to decompressed |", rows)
        # The peers whose memory does not depend on the cap: one run, a row at every cap, judged against each.
        nf4 = [r for r in rows if r.startswith("| nf4 |")]
        self.assertEqual(len(nf4), 2)
        self.assertIn("does not fit: peak 7000 MiB > cap 4096 MiB", nf4[0])
        self.assertIn("does not fit: peak 7000 MiB > cap 6144 MiB", nf4[1])
        self.assertIn("| nf4 | 4 | fixed: the whole model (not capped) | 40.0 (1.33x) | n/a | n/a |", nf4[0])
        acc = [r for r in rows if r.startswith("| accelerate |")]
        self.assertEqual(len(acc), 1)  # run at 6 GiB only: no row at 4
        self.assertIn("| accelerate | 6 | max_memory 2048 MiB, 3 of 36 modules on the GPU | 1100 (36.67x) |", acc[0])
        # A cap under which accelerate's device map holds nothing for the GPU runs through cpu_offload, and says so.
        results = self.results()
        results["accelerate_cap4"] = result("accelerate", {1024: 1500.0}, params={"gpu_bytes": 1536 * MIB},
                                            device_map_counts={"gpu": 0, "cpu": 1}, accelerate_api="cpu_offload")
        acc = [r for r in pt.cap_table(results, [1024]) if r.startswith("| accelerate | 4 |")]
        self.assertEqual(len(acc), 1)
        self.assertIn("| max_memory 1536 MiB, 0 of 1 modules on the GPU, cpu_offload | 1500 (50.00x) |", acc[0])

    def test_targets_per_cap(self):
        lines = pt.capped_targets(self.results())
        self.assertIn("- epk-client-host at 6 GiB, 4096 tokens: 130.0 ms, 1.083x resident (target 1.15x: met), "
                      "2.00x faster than offload-bf16 (260.0 ms; target 1.8x: met; offload-bf16 does not fit: peak "
                      "6336 MiB > cap 6144 MiB)", lines)
        self.assertIn("- epk-client-host at 4 GiB, 16384 tokens: 600.0 ms, 1.034x resident (target 1.02x: missed), "
                      "0.97x faster than offload-bf16 (580.0 ms; target 1.0x: missed; offload-bf16 does not fit: peak "
                      "6336 MiB > cap 4096 MiB)", lines)
        self.assertIn("- epk-client-host at 6 GiB, generation ms/token: 62.5, offload-bf16 250.0: 0.25 of it "
                      "(target at most 0.33: met)", lines)
        self.assertIn("- epk-client-host at 4 GiB, GPU memory: does not fit: peak 5000 MiB > cap 4096 MiB", lines)
        t = pb.format_tables(self.results(), [1024, 4096, 16384])
        self.assertIn("## Under a GPU memory cap (issue 32): one row per setup and cap", t)
        self.assertIn("- accelerate_cap6: max_memory GPU 2048 MiB", t)

    def test_a_result_from_before_the_sweep_keeps_its_cap(self):
        r = {"epk-client-host": result("epk-client-host", {1024: 60.0}, params={"cap_bytes": 6 << 30})}
        self.assertEqual(pt.caps_in(r), [6.0])
        self.assertEqual(len(pt.cap_table(r, [1024])), 3)

    def test_no_capped_runs_no_sweep(self):
        self.assertEqual(pt.cap_table({"resident": result("resident", {1024: 30.0})}, [1024]), [])


class ComputeOnly(unittest.TestCase):
    def test_line_fit(self):
        a, b = pt.fit_line([10, 20, 30], [110.0, 210.0, 310.0])
        self.assertAlmostEqual(a, 10.0)
        self.assertAlmostEqual(b, 10.0)
        with self.assertRaises(ValueError):
            pt.fit_line([10, 10], [1.0, 2.0])

    def results(self):
        fit = result("fit-bf16", fit={"layers": [10, 20], "target_layers": 80, "prefill": {
            "4096": {"10": {"median_ms": 150.0}, "20": {"median_ms": 290.0}},
            "16384": {"10": {"median_ms": 600.0}}}})
        dec = result("decompressed", {4096: 1130.0, 16384: 4700.0}, tied={"layers": 80, "source_layers": 2},
                     generate={"prompt": 1024, "new_tokens": 32, "times_ms": [960.0], "median_ms": 960.0})
        host = result("epk-client-host", {4096: 1250.0, 16384: 4900.0}, params={"cap_bytes": 24 << 30},
                      generate={"prompt": 1024, "new_tokens": 32, "times_ms": [12800.0], "median_ms": 12800.0})
        return {"decompressed": dec, "fit-bf16": fit, "epk-client-host_cap24": host}

    def test_estimate_is_intercept_plus_layers_times_slope(self):
        e = pt.fit_estimate(self.results()["fit-bf16"], 4096)
        self.assertAlmostEqual(e["per_layer_ms"], 14.0)
        self.assertAlmostEqual(e["intercept_ms"], 10.0)
        self.assertAlmostEqual(e["estimate_ms"], 1130.0)
        self.assertIsNone(pt.fit_estimate(self.results()["fit-bf16"], 16384))  # one layer count: no line

    def test_targets_judged_on_both_figures(self):
        lines = pt.compute_only_lines(self.results(), [4096, 16384])
        self.assertIn("  - epk-client-host_cap24: 1250.0 ms = 1.106x measured (target 1.15x: met), 1.106x fit (target "
                      "1.15x: met)", lines)
        self.assertIn("  - epk-client-host_cap24: 4900.0 ms = 1.043x measured (target 1.05x: met)", lines)
        self.assertIn("- epk-client-host_cap24 generation: 400.0 ms/token (compute-only, the decompressed model: 30.0 "
                      "ms/token)", lines)
        self.assertTrue(any("80 layers tied to the 2 decoded layers" in x for x in lines), lines)
        self.assertEqual(pt.compute_only_lines({"resident": result("resident", {4096: 1.0})}, [4096]), [])
        # The decompressed row is a timed one here, in the prefill table.
        self.assertIn("| decompressed | 4096 | 1130 |", pb.format_tables(self.results(), [4096, 16384]))


class Config(unittest.TestCase):
    def text(self, extra=()):
        return pb.epkd_config_text("/tmp/epk-prefill/x/epkd.sock", "/tmp/epk-prefill/model.epk", 4096, extra)

    def test_parses_as_toml(self):
        try:
            import tomllib
        except ImportError:
            self.skipTest("tomllib needs Python 3.11")
        cfg = tomllib.loads(self.text(['early_reply = true']))
        self.assertEqual(cfg["socket"], "/tmp/epk-prefill/x/epkd.sock")
        self.assertEqual(cfg["budget_mb"], 4096)
        self.assertEqual(cfg["devices"], [0])
        self.assertIs(cfg["early_reply"], True)
        self.assertEqual(cfg["model"], [{"name": "llama", "path": "/tmp/epk-prefill/model.epk"}])

    def test_bad_input_is_refused(self):
        with self.assertRaises(ValueError):
            self.text(["no equals sign"])
        with self.assertRaises(ValueError):
            pb.epkd_config_text("/tmp/s\n", "/m.epk", 1)
        with self.assertRaises(ValueError):
            pb.epkd_config_text("/tmp/s", "/m.epk", 0)

    def test_epkd_accepts_it(self):
        if not EPKD:
            self.skipTest("no epkd given")
        with tempfile.TemporaryDirectory() as d:
            model = Path(d) / "model.epk"
            model.write_bytes(b"")  # --check-config reads the config, not the model
            cfg = Path(d) / "epkd.toml"
            cfg.write_text(pb.epkd_config_text(str(Path(d) / "epkd.sock"), str(model), 4096))
            r = subprocess.run([EPKD, "--check-config", str(cfg)], capture_output=True, text=True, timeout=60)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            cfg.write_text(pb.epkd_config_text(str(Path(d) / "epkd.sock"), str(model), 4096, ["budgte_mb = 1"]))
            r = subprocess.run([EPKD, "--check-config", str(cfg)], capture_output=True, text=True, timeout=60)
            self.assertNotEqual(r.returncode, 0, "epkd accepted an unknown key: the check above proves nothing")


class Cli(unittest.TestCase):
    def test_driver_defaults_and_child_params(self):
        args = pb.parser().parse_args(["drive", "--workdir", "/w", "--lengths", "1024,4096"])
        self.assertEqual(args.lengths, [1024, 4096])
        self.assertEqual(args.setups, list(pr.DEFAULT_SETUPS))
        work = pb.Work("/w")
        p = pb.child_params(args, work, "epk-client", "/s")
        self.assertEqual((p["decode"], p["prefetch"], p["runs"], p["generate"]), ("client", None, 5, True))
        p = pb.child_params(args, work, "epk-daemon-mps", "/s")
        self.assertEqual((p["decode"], p["prefetch"], p["generate"]), ("daemon", 2, False))
        p = pb.child_params(args, work, "accelerate", None)
        self.assertEqual((p["runs"], p["gen_runs"], p["gen_warmup_tokens"]), (3, 1, 2))
        p = pb.child_params(args, work, "decompressed", None)
        self.assertFalse(p["timing"] or p["generate"])

    def test_runs_per_cap(self):
        args = pb.parser().parse_args(["drive", "--workdir", "/w", "--cap-gb", "8,4", "--cap-headroom-gb", "2.5,4",
                                       "--setups", "resident,epk-client-host,offload-bf16,nf4,accelerate"])
        self.assertEqual(pb.plan(args), [("resident", None), ("epk-client-host", 4.0), ("epk-client-host", 8.0),
                                         ("offload-bf16", None), ("nf4", None), ("accelerate", 4.0),
                                         ("accelerate", 8.0)])
        work = pb.Work("/w")
        p = pb.child_params(args, work, "epk-client-host", "/s", 4.0)
        self.assertEqual((p["key"], p["max_gpu_gb"], p["cap_bytes"], p["result"]),
                         ("epk-client-host_cap4", 0.0, 4 << 30,
                          str(work.result("epk-client-host_cap4"))))
        p = pb.child_params(args, work, "epk-client-host", "/s", 8.0)
        self.assertEqual(p["max_gpu_gb"], 5.5)  # 8 - 2.5: the headrooms go with --cap-gb's order
        self.assertEqual(pb.accelerate_gpu_bytes(args, work, 8.0)[0], int(5.5 * 2**30))
        p = pb.child_params(args, work, "nf4", None)
        self.assertEqual((p["key"], p["cap_bytes"], p["generate"]), ("nf4", None, True))
        # Without --cap-gb: epk-client-host at the default 6 GiB, accelerate uncapped (epk-client's peak).
        args = pb.parser().parse_args(["drive", "--workdir", "/w", "--setups", "epk-client-host,accelerate"])
        self.assertEqual(pb.plan(args), [("epk-client-host", 6.0), ("accelerate", None)])
        with self.assertRaises(SystemExit):
            pb.main(["drive", "--workdir", "/w", "--cap-gb", "4,6,8", "--cap-headroom-gb", "1,2"])
        # Caps are distinct; their headrooms need not be.
        args = pb.parser().parse_args(["drive", "--workdir", "/w", "--cap-gb", "4,6,8", "--cap-headroom-gb", "2.5,4,4"])
        self.assertEqual(args.cap_headroom_gb, [2.5, 4.0, 4.0])

    def test_bad_arguments(self):
        for argv in (["--lengths", "10x"], ["--lengths", "0"], ["--setups", "resident,gpu"],
                     ["--client-prefetch", "-1"], ["--cap-gb", "4,4"], ["--cap-gb", "0"], ["--cap-gb", "x"]):
            with self.assertRaises(SystemExit, msg=argv):
                with open(os.devnull, "w") as null:
                    stderr, sys.stderr = sys.stderr, null
                    try:
                        pb.parser().parse_args(["drive", "--workdir", "/w", *argv])
                    finally:
                        sys.stderr = stderr

    def test_resume_needs_the_reference_file(self):
        with tempfile.TemporaryDirectory() as d:
            work = pb.Work(d)
            pb.write_json(work.result("resident"), {"status": "done"})
            self.assertFalse(pb.setup_done(work, "resident", 1024))  # its reference logits are gone
            work.ref.mkdir()
            work.ref_logits("resident", 1024).write_bytes(b"x")
            self.assertTrue(pb.setup_done(work, "resident", 1024))
            pb.write_json(work.result("epk-client"), {"status": "unfinished (time limit; rerun to resume)"})
            self.assertFalse(pb.setup_done(work, "epk-client", 1024))


# Stands in for `prefill_bench.py setup`: connects to epkd's socket when it has one, writes a finished result (and the
# reference file a reference setup leaves); FAKE_CHILD=sleep|fail makes the resident setup hang or exit 3.
FAKE_CHILD = r"""#!PYTHON
import json, os, socket, sys, time
params = json.load(open(sys.argv[sys.argv.index("--params") + 1]))
mode = os.environ.get("FAKE_CHILD", "ok")
res = json.load(open(params["result"])) if os.path.exists(params["result"]) else {}
res.update(setup=params["setup"], status="running", params=params)
if params["socket"]:
    s = socket.socket(socket.AF_UNIX)
    s.connect(params["socket"])
    s.close()
    res["socket_ok"] = True
if params["setup"] == "resident" and mode == "sleep":
    time.sleep(120)
if params["setup"] == "resident" and mode == "fail":
    sys.exit(3)
if params["setup"] in ("decompressed", "resident"):
    ref = os.path.join(params["workdir"], "ref", f"{params['setup']}_logits_{params['check_len']}.pt")
    os.makedirs(os.path.dirname(ref), exist_ok=True)
    open(ref, "wb").close()
if params["timing"]:
    res["prefill"] = {str(n): {"times_ms": [10.0, 11.0, 12.0], "median_ms": 11.0} for n in params["lengths"]}
res["status"] = "done"
json.dump(res, open(params["result"] + ".tmp", "w"))
os.replace(params["result"] + ".tmp", params["result"])
"""


def write_safetensors(path, name, rows, cols):
    """One BF16 tensor of ones (0x3f80)."""
    data = bytes([0x80, 0x3F]) * (rows * cols)
    header = json.dumps({name: {"dtype": "BF16", "shape": [rows, cols], "data_offsets": [0, len(data)]}}).encode()
    header += b" " * (-len(header) % 8)
    Path(path).write_bytes(len(header).to_bytes(8, "little") + header + data)


class Driver(unittest.TestCase):
    """drive() with a real epkd (host pools here: no GPU) and FAKE_CHILD as the setup process."""

    def setUp(self):
        if not (EPKD and EPK):
            self.skipTest("needs epkd and epk")
        self.dir = tempfile.mkdtemp(prefix="pbtest")
        self.addCleanup(lambda: subprocess.run(["rm", "-rf", self.dir]))
        w = pb.Work(Path(self.dir) / "work")
        for d in (w.src, w.decompressed):
            d.mkdir(parents=True)
            (d / "config.json").write_text("{}")
        write_safetensors(w.src / "model.safetensors", "w", 8, 8)
        r = subprocess.run([EPK, "pack", str(w.src / "model.safetensors"), "-o", str(w.epk)], capture_output=True,
                           text=True)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.work = w
        fake = Path(self.dir) / "fake_child"
        fake.write_text(FAKE_CHILD.replace("PYTHON", sys.executable))
        fake.chmod(0o755)
        executable = sys.executable
        sys.executable = str(fake)  # drive() starts `sys.executable prefill_bench.py setup --params FILE`
        self.addCleanup(setattr, sys, "executable", executable)
        self.out = Path(self.dir) / "out"

    def drive(self, *argv, env=None):
        args = pb.parser().parse_args(["drive", "--workdir", str(self.work.root), "--out", str(self.out), "--epkd",
                                       EPKD, "--lengths", "16,32", *argv])
        old = dict(os.environ)
        os.environ.update(env or {})
        buf = io.StringIO()
        try:
            with contextlib.redirect_stdout(buf):
                rc = pb.drive(args)
        finally:
            os.environ.clear()
            os.environ.update(old)
        return rc, buf.getvalue()

    def result(self, setup):
        return pb.load_json(self.work.result(setup))

    def test_every_setup_then_a_resume(self):
        if pb.shutil.which("nvidia-cuda-mps-control"):
            self.skipTest("this machine has MPS: the MPS setup would need a GPU")
        rc, out = self.drive("--accelerate-gpu-mib", "100")
        self.assertEqual(rc, 2, out)  # epk-daemon-mps cannot run here
        for s in ("decompressed", "resident", "epk-client", "epk-daemon", "accelerate"):
            self.assertEqual(self.result(s)["status"], "done", (s, out))
        for s, budget in (("epk-client", 64), ("epk-daemon", 4096)):
            r = self.result(s)
            self.assertTrue(r["socket_ok"])
            self.assertEqual(r["attempts"][-1]["epkd_rc"], 0, "epkd did not exit 0 after SIGTERM")
            log = (self.work.logs / f"epkd-{s}.log").read_text()
            self.assertIn(f"budget {budget} MiB", log)  # epkd's start line: it read the config the driver wrote
        mps = self.result("epk-daemon-mps")
        self.assertEqual(mps["status"], "failed")
        self.assertIn("nvidia-cuda-mps-control", mps["error"])
        self.assertEqual(self.result("accelerate")["params"]["gpu_bytes"], 100 * MIB)
        self.assertIn("| epk-client | 32 | 11.0 | 10.0-12.0 | 1.00x | n/a |", out)
        self.assertIn("| epk-daemon-mps | - | failed: RuntimeError: nvidia-cuda-mps-control is not on PATH", out)
        table = (self.out / "prefill_table.md").read_text()
        self.assertIn("## Targets (issue 14)", table)
        self.assertTrue((self.out / "results" / "resident.json").exists())
        self.assertTrue((self.out / "logs" / "epkd-epk-client.log").exists())
        # Again: the finished setups are kept, the failed one is tried again.
        rc, out = self.drive("--accelerate-gpu-mib", "100")
        self.assertEqual(rc, 2, out)
        self.assertIn("resident: done in an earlier call", out)
        self.assertEqual(len(self.result("resident")["attempts"]), 1)
        self.assertEqual(len(self.result("epk-daemon-mps")["attempts"]), 2)

    def test_a_cap_sweep_keys_its_runs_by_cap(self):
        rc, out = self.drive("--setups", "epk-client-host,offload-bf16", "--cap-gb", "4,6", "--cap-headroom-gb", "2")
        self.assertEqual(rc, 0, out)
        for key, gb in (("epk-client-host_cap4", 2.0), ("epk-client-host_cap6", 4.0)):
            r = self.result(key)
            self.assertEqual((r["status"], r["cap_gb"], r["params"]["max_gpu_gb"]), ("done", float(key[-1]), gb))
            self.assertIn("budget 64 MiB", (self.work.logs / f"epkd-{key}.log").read_text())  # one epkd per run
        self.assertEqual(self.result("offload-bf16")["params"]["cap_bytes"], None)
        self.assertIn("| epk-client-host | 4 | max_gpu_gb 2 |", out)
        # Its rows: 2 lengths in the prefill table, 1 in generation's (not measured), 1 per cap in the sweep's.
        self.assertEqual(len([x for x in out.splitlines() if x.startswith("| offload-bf16 | ")]), 2 + 1 + 2)
        rc, out = self.drive("--setups", "epk-client-host", "--cap-gb", "4,6")
        self.assertEqual(rc, 0, out)
        self.assertIn("epk-client-host_cap6: done in an earlier call", out)

    def test_accelerate_needs_a_gpu_figure(self):
        rc, out = self.drive("--setups", "accelerate")
        self.assertEqual(rc, 2, out)
        r = self.result("accelerate")
        self.assertEqual(r["status"], "failed")
        self.assertIn("needs epk-client's peak GPU memory", r["error"])

    def test_a_hung_setup_is_cut_off_and_resumed_later(self):
        t = pb.time.monotonic()
        rc, out = self.drive("--setups", "resident,epk-daemon", "--deadline-s", "8", "--min-setup-s", "3",
                             "--margin-s", "2", env={"FAKE_CHILD": "sleep"})
        self.assertLess(pb.time.monotonic() - t, 30)
        self.assertEqual(rc, 2, out)
        self.assertEqual(self.result("resident")["status"], "unfinished (time limit; rerun to resume)")
        self.assertIn("epk-daemon: not started", out)
        rc, out = self.drive("--setups", "resident")
        self.assertEqual(rc, 0, out)
        self.assertEqual(self.result("resident")["status"], "done")
        self.assertEqual(len(self.result("resident")["attempts"]), 2)

    def test_a_failing_setup_does_not_stop_the_others(self):
        rc, out = self.drive("--setups", "resident,epk-daemon", env={"FAKE_CHILD": "fail"})
        self.assertEqual(rc, 2, out)
        self.assertEqual(self.result("resident")["status"], "failed")
        self.assertIn("exited 3", self.result("resident")["error"])
        self.assertEqual(self.result("epk-daemon")["status"], "done")


if __name__ == "__main__":
    for name in ("EPKD", "EPK"):
        if len(sys.argv) > 1 and not sys.argv[1].startswith("-"):
            globals()[name] = sys.argv.pop(1)
    unittest.main()
