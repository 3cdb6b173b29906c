"""The table of docs/results/fmnist-personalised.md from the runs' Parquet files (run.sh) and, for the FDA
methods, seed 0 at noise 0.4 of the committed noise grid (docs/results/fmnist-noise/results.parquet).

    python docs/results/fmnist-personalised/summarize.py
"""
from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq

HERE = Path(__file__).parent
NOISE_GRID = HERE.parent / "fmnist-noise" / "results.parquet"
FDA_ROWS = [("fedda", "FedDA_0.5"), ("fedgp", "FedGP_0.5"), ("fedgp_beta1", "FedGP_1"), ("fedda_auto", "FedDA_Auto"),
            ("fedgp_auto", "FedGP_Auto"), ("target_only", "Target Only")]
PERSONAL = [("fedavg_all", "FedAvg (sources + target)"), ("ditto", "Ditto (lambda 1)"),
            ("fedrep", "FedRep (10 head epochs)"), ("apfl", "APFL (alpha 0.5)"),
            ("knn_per_test", "kNN-Per, selected on the test set (the paper's protocol)"),
            ("knn_per_validation", "kNN-Per, selected on 20 % of the labelled target held out")]


def main() -> None:
    print("| method | rounds | final accuracy (%) | after 50 main rounds (%) | best round (%) |")
    print("|---|---|---|---|---|")
    grid = pq.read_table(NOISE_GRID).to_pylist()
    for key, label in FDA_ROWS:
        rows = [r for r in grid if r["row"] == key and r["seed"] == 0 and abs(r["grid_value"] - 0.4) < 1e-9]
        rows.sort(key=lambda r: r["round"])
        main_rows = [r for r in rows if r["phase"] == "main"]
        print(f"| {label} | {len(main_rows)} (+2 warm-up) | {100 * rows[-1]['accuracy']:.2f} | "
              f"{100 * main_rows[49]['accuracy']:.2f} | {100 * max(r['accuracy'] for r in main_rows):.2f} |")
    for key, label in PERSONAL:
        path = HERE / f"{key}.parquet"
        if not path.is_file():
            print(f"| {label} | (not run) | | | |")
            continue
        rows = sorted(pq.read_table(path).to_pylist(), key=lambda r: r["round"])
        main_rows = [r for r in rows if r["phase"] == "main"]
        last = rows[-1]
        extra = ""
        if last["phase"] == "knn":
            extra = (f" (lambda {last['knn_lambda']:.1f}, capacity {last['knn_capacity']:.1f}; test-selected "
                     f"{100 * last['accuracy_test_selected']:.2f}, base model {100 * last['accuracy_base']:.2f})")
        at50 = f"{100 * main_rows[49]['accuracy']:.2f}" if len(main_rows) >= 50 else ""
        print(f"| {label} | {len(main_rows)} | {100 * last['accuracy']:.2f}{extra} | {at50} | "
              f"{100 * max(r['accuracy'] for r in main_rows):.2f} |")


if __name__ == "__main__":
    main()
