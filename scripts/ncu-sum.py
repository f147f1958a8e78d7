#!/usr/bin/env python3
"""ncu-sum.py - sum ncu --csv rows by kernel name.

usage: ncu-sum.py NCU.csv [MORE.csv ...]
Prints, per file: launches, total and mean microseconds per kernel name
(gpu__time_duration.sum), largest total first, and the sum over all
kernels; where the file also has smsp__inst_executed.sum, the warp
instructions a launch executed on average (the decode products are
bound by how many they issue more than by memory: README, CUDA section).
A dev tool (scripts/device-test.sh profile), not part of the product."""
import csv
import sys
from collections import defaultdict


def main(paths):
    for path in paths:
        with open(path, newline="") as f:
            lines = [ln for ln in f if ln.startswith('"')]
        rows = list(csv.DictReader(lines))
        tot = defaultdict(float)
        cnt = defaultdict(int)
        inst = defaultdict(float)
        for r in rows:
            name = r["Kernel Name"].split("(")[0]
            metric = r.get("Metric Name")
            v = float(r["Metric Value"].replace(",", ""))
            if metric == "smsp__inst_executed.sum":
                inst[name] += v
                continue
            if metric != "gpu__time_duration.sum":
                continue
            unit = r.get("Metric Unit", "nsecond")
            us = v / 1000.0 if unit.startswith("n") else v * 1000.0 if unit.startswith("m") else v
            tot[name] += us
            cnt[name] += 1
        print(f"{path}: {sum(cnt.values())} launches, {sum(tot.values()):.1f} us")
        for name in sorted(tot, key=tot.get, reverse=True):
            line = f"  {name:40s} {cnt[name]:5d} x {tot[name] / cnt[name]:7.2f} us = {tot[name]:8.1f} us"
            if name in inst:
                line += f"  {inst[name] / cnt[name]:11.0f} warp instructions a launch"
            print(line)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
