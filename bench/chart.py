"""Draws the peer benchmark's chart from bench/out/peers.json (bench/peers/).

    python bench/chart.py bench/out/peers.json docs/benchmarks.svg

Four panels: jobs/s against concurrency (one execution environment, batch
100), p50 batch duration in round trips against batch size, jobs/s against
execution environments (scale-out, batch 10), and DynamoDB requests and write
units per job. The SVG is deterministic for the same numbers (no date, fixed
ids), so a rerun only changes the file where the results changed.
"""

from __future__ import annotations

import json
import sys

import matplotlib

matplotlib.use("svg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FormatStrFormatter  # noqa: E402

PEERS = [("idemq", "#1f77b4", "o"), ("plain", "#7f7f7f", "s"), ("powertools", "#d62728", "^")]
LABEL = {"idemq": "idemq", "plain": "plain Rust (no idempotency)", "powertools": "Powertools (Python)"}


def cells(grid, **want):
    return [c for c in grid if all(c[k] == v for k, v in want.items())]


def main(src: str, dst: str) -> None:
    r = json.load(open(src))
    grid, scale = r["grid"], r["scaleout"]
    delays = sorted({c["delay_ms"] for c in grid})
    batches = sorted({c["batch"] for c in grid})
    slow = max(delays)
    big = max(batches)
    plt.rcParams["svg.hashsalt"] = "idemq-bench"
    plt.rcParams["font.size"] = 9
    fig, ax = plt.subplots(2, 2, figsize=(11, 7.5))

    # (a) jobs/s against concurrency, batch `big`, every delay > 0 for the Rust peers.
    a = ax[0][0]
    for peer, color, marker in PEERS:
        for d, style in zip([d for d in delays if d > 0], ["-", "--", ":"]):
            cs = sorted(cells(grid, peer=peer, batch=big, delay_ms=d), key=lambda c: c["concurrency"])
            if not cs:
                continue
            if peer == "powertools":
                xs = sorted({c["concurrency"] for c in cells(grid, peer="idemq", batch=big, delay_ms=d)})
                a.plot(xs, [cs[0]["jobs_per_s"]] * len(xs), style, color=color,
                       label=f"{LABEL[peer]}, sequential, {d} ms")
            else:
                a.plot([c["concurrency"] for c in cs], [c["jobs_per_s"] for c in cs], style,
                       color=color, marker=marker, label=f"{LABEL[peer]}, {d} ms")
    a.set_xscale("log", base=2)
    a.set_yscale("log")
    a.set_xlabel("jobs in flight per invocation (IDEMQ_CONCURRENCY)")
    a.set_ylabel("jobs/s, one execution environment")
    a.set_title(f"Throughput, batch {big}, by round-trip delay")
    a.legend(fontsize=7)
    a.grid(True, which="both", alpha=0.3)

    # (b) DynamoDB round trips on a batch's critical path (counted at the
    # proxy: the longest chain of requests each sent after the previous one
    # was answered), against batch size.
    b = ax[0][1]
    lo = min(c["concurrency"] for c in grid)
    # The plain consumer first: idemq waits the same round trips, drawn on top.
    for peer, color, marker in [PEERS[1], PEERS[0], PEERS[2]]:
        size = 8 if peer == "idemq" else 5
        for pick, style, note in [(max, "-", ""), (min, "--", f", concurrency {lo}")]:
            if peer == "powertools" and pick is min:
                continue
            xs, ys = [], []
            for n in batches:
                cs = [c for c in cells(grid, peer=peer, batch=n, delay_ms=slow) if c.get("rt_p50")]
                if cs:
                    c = pick(cs, key=lambda c: c["concurrency"])
                    xs.append(n)
                    ys.append(c["rt_p50"])
            label = LABEL[peer] + (note if peer != "powertools" else ", one record at a time")
            if pick is max and peer != "powertools":
                label += ", highest concurrency"
            b.plot(xs, ys, style, color=color, marker=marker, markersize=size, label=label)
    b.axhline(1.0, color="black", linestyle=":", linewidth=1, label="floor: one round trip per batch")
    b.set_xscale("log")
    b.set_yscale("log")
    b.set_xlabel("batch size")
    b.set_ylabel("DynamoDB round trips waited in turn (p50)")
    b.set_title("Batch latency in round trips (counted at the proxy)")
    b.legend(fontsize=7)
    b.grid(True, which="both", alpha=0.3)

    # (c) scale-out.
    c_ = ax[1][0]
    for peer, color, marker in PEERS:
        cs = sorted(cells(scale, peer=peer), key=lambda c: c["instances"])
        c_.plot([c["instances"] for c in cs], [c["jobs_per_s"] for c in cs], color=color,
                marker=marker, label=LABEL[peer])
    if scale:
        c_.set_title(f"Scale-out, batch 10, {scale[0]['delay_ms']} ms round trip (moto serialises DynamoDB)")
    c_.set_xscale("log", base=2)
    c_.set_xlabel("execution environments at once")
    c_.set_ylabel("jobs/s, all environments")
    c_.legend(fontsize=7)
    c_.grid(True, which="both", alpha=0.3)

    # (d) requests and write units per job.
    d_ = ax[1][1]
    names, reqs, wrus = [], [], []
    for peer, _, _ in PEERS:
        cs = cells(grid, peer=peer) + cells(scale, peer=peer)
        jobs = sum(c["jobs"] for c in cs) or 1
        names.append(LABEL[peer].replace(" (", "\n("))
        reqs.append(sum(o["requests"] for c in cs for o in c["ddb_ops"].values()) / jobs)
        wrus.append(sum(o["wru"] for c in cs for o in c["ddb_ops"].values()) / jobs)
    xs = range(len(names))
    bars1 = d_.bar([x - 0.2 for x in xs], reqs, 0.4, label="DynamoDB requests", color="#1f77b4")
    bars2 = d_.bar([x + 0.2 for x in xs], wrus, 0.4, label="write units", color="#ff7f0e")
    d_.bar_label(bars1, fmt="%.2f", fontsize=8)
    d_.bar_label(bars2, fmt="%.2f", fontsize=8)
    d_.set_xticks(list(xs), names)
    d_.set_ylabel("per successful job")
    d_.set_title("DynamoDB per job (counted at the proxy)")
    d_.legend(fontsize=7)

    for axis in (a.xaxis, a.yaxis, b.xaxis, b.yaxis, c_.xaxis):
        axis.set_major_formatter(FormatStrFormatter("%g"))
    fig.suptitle(f"idemq vs plain Rust vs Powertools — one run, same stack ({r['started']})")
    fig.tight_layout()
    fig.savefig(dst, metadata={"Date": None})


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
