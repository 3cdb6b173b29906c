#!/usr/bin/env python3
"""Turn CheXpert's official train.csv into fda-ray's generic medical table (Healthcare FDA's CheXpert domains).

    python datasets/prepare_chexpert.py CheXpert-v1.0-small/train.csv table.csv --image-root /data/chexpert

Five domains, one per lung condition (Healthcare FDA section 5.1): Edema (the paper's target), LungLesion, Pneumonia,
Atelectasis, Consolidation. A domain's positives are the images labelled 1.0 for its condition; its negatives,
as many, are the images where the condition is blank (not mentioned: the authors' preprocessing,
enyijiang/MIDRC preprocess/chexpert_meta_data_preprocess.py) or, with --negatives explicit, labelled 0.0.
Uncertain labels (-1.0) are dropped. Each domain takes at most --per-class positives and as many negatives, in a
seeded random order, and puts --test-share of each class in its test split (the default 2 500 and 0.2 leave the
paper's 2 000 positive and 2 000 negative training images a source); its rows are written in a seeded random
order (a loader that reads a table's first n rows gets both classes). The paper says negatives are labelled 0
for the condition; the authors' preprocessing takes the blank cells, and so does this script by default, since
it rebuilds the tables Table 2 was computed on (--negatives explicit: the paper's reading). A patient's images go to one domain only (the first, in the order above, that draws one of
them) unless --keep-shared-patients (an image can be positive for several conditions: without this the
domains overlap, as in the paper); an image two domains draw has one split in both (the first draw's), so no
test image is another domain's training image (fda-ray refuses a table where one is). Auxiliary labels: sex,
age (fda-ray buckets it as (age - 18) // 9), view (Frontal/Lateral). Writes path,label,domain,split,aux_sex,aux_age,aux_view with paths under --image-root.
An input that is not CheXpert's train.csv (no such file, a folder, a binary or non-UTF-8 file, an empty one, a
missing column, a row cut short) is one line, `error: train_csv='<path>' is invalid: <why>`, exit 2, before
anything is written; the output's folder is made, and an output that cannot be written is one line, exit 1,
before the work. A gzipped train.csv is read as it is.
Standard library only.
"""
from __future__ import annotations

import csv
import random
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # (run as a script or loaded by path: its folder's helper)
from csv_inputs import (InputError, OneLineParser, out_of_range, read_table, typed,  # noqa: E402
                        writable_output)

DOMAINS = {"Edema": "Edema", "LungLesion": "Lung Lesion", "Pneumonia": "Pneumonia", "Atelectasis": "Atelectasis",
           "Consolidation": "Consolidation"}  # fda-ray's domain name -> the release's column
POSITIVE, NEGATIVE_EXPLICIT = ("1.0", "1"), ("0.0", "0")


def patient_of(path: str) -> str:
    m = re.search(r"patient\d+", path)
    return m.group(0) if m else path


def main(argv: list[str] | None = None) -> int:
    # (a bad value or an unknown flag is one line, exit 2, as fda-ray's programs)
    p = OneLineParser(prog="python datasets/prepare_chexpert.py", description=__doc__.splitlines()[0])
    p.add_argument("train_csv", help="CheXpert-v1.0(-small)/train.csv")
    p.add_argument("out", help="the generic table to write")
    p.add_argument("--per-class", type=typed("per_class", int, "an integer >= 1"), default=2500,
                   help="positives (and negatives) per domain, test split included (2500: the paper's 2000 training "
                        "images of each class at --test-share 0.2)")
    p.add_argument("--test-share", type=typed("test_share", float, "a number in (0, 1)"), default=0.2,
                   help="share of each class in the test split (0.2)")
    p.add_argument("--negatives", choices=("blank", "explicit"), default="blank",
                   help="blank: condition not mentioned (the authors' preprocessing); explicit: labelled 0.0 (the paper's "
                        "text)")
    p.add_argument("--image-root", default="", help="folder the release's Path column is relative to")
    p.add_argument("--keep-shared-patients", action="store_true", help="let a patient's images enter several domains")
    p.add_argument("--seed", type=typed("seed", int, "an integer"), default=0)
    a = p.parse_or_exit_code(argv)
    if isinstance(a, int):
        return a
    if (bad := out_of_range(a.per_class, a.test_share)) is not None:
        print(bad, file=sys.stderr)
        return 2
    try:
        rows = read_table(a.train_csv, "train_csv", "CheXpert's train.csv",
                          ("Path", "Sex", "Age", "Frontal/Lateral", *DOMAINS.values()))
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if (why := writable_output(a.out)) is not None:
        print(f"error: out={a.out!r} cannot be written ({why})", file=sys.stderr)
        return 1
    rng = random.Random(a.seed)
    order = random.Random(f"{a.seed}/order")  # the rows' order: its own generator, so the images drawn
    # with --seed are those drawn before the rows were shuffled (rng's draws unchanged)
    used: set[str] = set()
    split_of: dict[str, str] = {}  # image -> its split, once decided: a test image is never another domain's training one
    out = []
    for domain, column in DOMAINS.items():
        free = [r for r in rows if a.keep_shared_patients or patient_of(r["Path"]) not in used]
        pos = [r for r in free if r[column].strip() in POSITIVE]
        neg = [r for r in free if (r[column].strip() == "" if a.negatives == "blank"
                                   else r[column].strip() in NEGATIVE_EXPLICIT)]
        rng.shuffle(pos)
        rng.shuffle(neg)
        k = min(a.per_class, len(pos), len(neg))
        rows_of_domain = []
        for label, chosen in (("1", pos[:k]), ("0", neg[:k])):
            n_test = max(1, round(a.test_share * k)) if k > 1 else 0
            # (--keep-shared-patients) an image another domain drew keeps its split; the new ones fill the rest
            n_test -= sum(split_of.get(r["Path"]) == "test" for r in chosen)
            for r in chosen:
                if r["Path"] not in split_of:
                    split_of[r["Path"]] = "test" if n_test > 0 else "train"
                    n_test -= split_of[r["Path"]] == "test"
                path = str(Path(a.image_root) / r["Path"]) if a.image_root else r["Path"]
                rows_of_domain.append([path, label, domain, split_of[r["Path"]], r["Sex"], r["Age"],
                                       r["Frontal/Lateral"]])
                used.add(patient_of(r["Path"]))
        # in a seeded random order, as the authors' tables: a loader that takes a table's first n rows
        # (--samples-per-client) must not read one class only
        order.shuffle(rows_of_domain)
        out += rows_of_domain
        print(f"{domain}: {k} positives, {k} negatives", file=sys.stderr)
    try:
        with open(a.out, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["path", "label", "domain", "split", "aux_sex", "aux_age", "aux_view"])
            w.writerows(out)
    except OSError as e:  # no such folder, a read-only one, a full disk
        print(f"error: out={a.out!r} cannot be written ({e.strerror or e})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
