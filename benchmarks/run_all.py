"""Runs every benchmark side by side with its peers and writes one Markdown report.

    ./run.sh bench                      # set-up (peers included), then this, < 30 min
    .venv/bin/python benchmarks/run_all.py --out-dir benchmarks/out [--quick] [--only a,b]

Each benchmark module (``benchmarks/<name>.py``, contract in ``common.py``) runs in its own
subprocess, so one's memory, threads and Beam workers do not disturb the next, and a
failure is reported without losing the others. The report (``<out-dir>/report.md``, with
``report.json`` and the plots beside it) starts with the machine and its dense-matmul peak
measured in the same run, then one section per benchmark: tables with project / peer
ratios, a plot, and what the figures show.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

BENCHMARKS = ("pretraining", "step_profile", "architecture_throughput", "vocabulary",
              "tokenization", "example_generation", "serving", "word2vec_gensim",
              "nnlm_kneser_ney", "generation")
DRIVER = ("import sys; sys.path.insert(0, {folder!r}); import common, {name} as module; "
          "common.save_result(module.run(scales={scales!r}, out_dir={out!r}, "
          "quick={quick!r}), {out!r})")


def run_one(name: str, out_dir: str, scales: tuple, quick: bool, timeout: float) -> dict:
    """Runs ``benchmarks/<name>.py``'s ``run`` in a subprocess; returns its result record
    (``result.json``) or an error record."""
    target = os.path.join(out_dir, name)
    shutil.rmtree(target, ignore_errors=True)
    os.makedirs(target)
    code = DRIVER.format(folder=os.path.dirname(os.path.abspath(__file__)), name=name,
                         scales=tuple(scales), out=target, quick=quick)
    started = time.perf_counter()
    with open(os.path.join(target, "log.txt"), "w", encoding="utf-8") as log:
        try:
            process = subprocess.run([sys.executable, "-c", code], stdout=log,
                                     stderr=subprocess.STDOUT, timeout=timeout)
            returncode = process.returncode
        except subprocess.TimeoutExpired:
            returncode = "timeout"
    seconds = time.perf_counter() - started
    record_path = os.path.join(target, "result.json")
    if returncode != 0 or not os.path.exists(record_path):
        with open(os.path.join(target, "log.txt"), encoding="utf-8", errors="replace") as f:
            tail = f.read()[-3000:]
        return {"name": name, "module": name, "error": f"exit {returncode}",
                "log_tail": tail, "seconds": seconds}
    with open(record_path, encoding="utf-8") as f:
        record = json.load(f)
    record.update(module=name, wall_seconds=seconds)
    return record


def _markdown_of(record: dict, out_dir: str) -> str:
    name = record["module"]
    if "error" in record:
        return (f"## {name}\n\nFAILED ({record['error']}, {record['seconds']:.0f} s); the "
                f"end of its log:\n\n```\n{record['log_tail']}\n```\n")
    with open(os.path.join(out_dir, name, "result.md"), encoding="utf-8") as f:
        text = f.read()
    # plots live in the benchmark's folder; the report links them from the top folder
    for plot in record.get("plots", []):
        base = os.path.basename(plot)
        text = text.replace(f"]({base})", f"]({name}/{base})")
    return text


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out-dir", default="benchmarks/out")
    parser.add_argument("--quick", action="store_true", help="smoke run, < 5 minutes")
    parser.add_argument("--scales", default="1,4,16")
    parser.add_argument("--only", default="", help="comma-separated benchmark names")
    parser.add_argument("--timeout", type=float, default=1200.0,
                        help="seconds one benchmark may take")
    args = parser.parse_args(argv)
    names = [n for n in args.only.split(",") if n] or list(BENCHMARKS)
    unknown = sorted(set(names) - set(BENCHMARKS))
    if unknown:
        parser.error(f"unknown benchmarks {unknown}; choose from {BENCHMARKS}")
    scales = tuple(float(s) if "." in s else int(s) for s in args.scales.split(","))
    os.makedirs(args.out_dir, exist_ok=True)
    started = time.perf_counter()
    machine = common.machine_info()
    peak = common.matmul_peak_flops()
    records = []
    for name in names:
        print(f"== {name}", flush=True)
        record = run_one(name, args.out_dir, scales, args.quick, args.timeout)
        print(f"   {'FAILED ' + record['error'] if 'error' in record else 'done'} in "
              f"{record.get('wall_seconds', record['seconds']):.0f} s", flush=True)
        records.append(record)
    total = time.perf_counter() - started
    header = [
        "# lmfactory benchmarks", "",
        f"Machine: {machine['cpu_count']} CPU cores, {machine['platform']}, Python "
        f"{machine['python']}, TensorFlow {machine['tensorflow']}; devices "
        f"{', '.join(machine['devices'])}.",
        f"Dense fp32 matmul peak measured in this run (2048 x 2048, TensorFlow): "
        f"**{peak / 1e9:.0f} GFLOP/s**.",
        f"Scales {scales}; {'quick' if args.quick else 'full'} run; total "
        f"{total / 60:.1f} min. Ratios are project / peer: > 1 means the project is faster "
        f"for throughputs (higher is better) and slower for times.", ""]
    report = "\n".join(header) + "\n" + "\n".join(_markdown_of(r, args.out_dir)
                                                 for r in records)
    with open(os.path.join(args.out_dir, "report.md"), "w", encoding="utf-8") as f:
        f.write(report)
    common.write_json({"machine": machine, "matmul_peak_flops": peak, "scales": scales,
                       "seconds": total, "benchmarks": records},
                      os.path.join(args.out_dir, "report.json"))
    print(report)
    failed = [r["name"] for r in records if "error" in r]
    if failed:
        print(f"FAILED: {failed}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
