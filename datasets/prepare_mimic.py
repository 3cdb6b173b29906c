#!/usr/bin/env python3
"""Turn MIMIC-CXR-JPG's metadata and MIMIC-IV's patients/admissions into fda-ray's generic medical table.

    python datasets/prepare_mimic.py --chexpert mimic-cxr-2.0.0-chexpert.csv \
        --metadata mimic-cxr-2.0.0-metadata.csv --patients patients.csv --admissions admissions.csv \
        --out table.csv --image-root /data/mimic-cxr-jpg/2.0.0

Healthcare FDA's MIMIC setting as the authors' preprocessing builds it (enyijiang/MIDRC preprocess/
mimic_meta_data_preprocess.py): images (metadata) joined with their study's CheXpert labels (blank = 0), the
subject's first admission (admission_type, race; `ethnicity` in MIMIC-IV 1.0) and patient (gender,
anchor_age); images with an uncertain (-1) label for any condition dropped; domains by race: White, Black,
Asian, Hispanic (the race text contains WHITE, BLACK, ASIAN or HISPANIC; others dropped); label 1 when the study
has a finding ("No Finding" = 0), 0 when "No Finding" = 1. Each domain takes at most --per-class images of
each label in a seeded random order (the authors: 4 000) and puts --test-share of each in its test split; its
rows are written in a seeded random order (a loader that reads a table's first n rows gets both labels).
Paths follow MIMIC-CXR-JPG's layout files/pXX/pSUBJECT/sSTUDY/DICOM.jpg under --image-root. Writes
path,label,domain,split,aux_sex,aux_age. An input that is not the release's file (no such file, a folder, a
binary or non-UTF-8 file, an empty one, a missing column, a row cut short, a label that is not a number) is one
line, `error: <argument>='<path>' is invalid: <why>`, exit 2, before anything is written; the output's folder
is made, and an output that cannot be written is one line, exit 1, before the work. The releases' .csv.gz files are read as they are. Standard library only.
"""
from __future__ import annotations

import argparse
import csv
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # (run as a script or loaded by path: its folder's helper)
from csv_inputs import InputError, OneLineParser, out_of_range, read_table, typed, writable_output  # noqa: E402

RACES = (("WHITE", "White"), ("BLACK", "Black"), ("ASIAN", "Asian"), ("HISPANIC", "Hispanic"))
# Each input: (what it should be, the columns read from it). The admissions' race column is `race` in MIMIC-IV 2.x
# and `ethnicity` in 1.0: either is enough (checked in main).
INPUTS = {
    "chexpert": ("MIMIC-CXR-JPG's mimic-cxr-2.0.0-chexpert.csv", ("subject_id", "study_id", "No Finding")),
    "metadata": ("MIMIC-CXR-JPG's mimic-cxr-2.0.0-metadata.csv", ("dicom_id", "subject_id", "study_id")),
    "patients": ("MIMIC-IV's patients.csv", ("subject_id", "gender", "anchor_age")),
    "admissions": ("MIMIC-IV's admissions.csv", ("subject_id",)),
}


def _label_cell(column: str, value: str) -> str | None:
    """What is wrong with a cell of the CheXpert labels (None: nothing): every column but the ids is a label."""
    if column in ("subject_id", "study_id"):
        return None
    try:
        _number(value)
    except ValueError:
        return "not a label (1.0, 0.0, -1.0 or blank)"
    return None


def _read(a: argparse.Namespace, name: str) -> list[dict[str, str]]:
    """The rows of input --<name>, its columns checked (INPUTS), and the CheXpert labels' cells."""
    what, columns = INPUTS[name]
    return read_table(getattr(a, name), name, what, columns, _label_cell if name == "chexpert" else None)


def _first_per_subject(rows: list[dict[str, str]]) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for r in rows:
        out.setdefault(r["subject_id"], r)  # pandas' drop_duplicates('subject_id'): the first row
    return out


def _number(v: str) -> float:
    v = v.strip()
    return float(v) if v else 0.0  # the authors' fillna(0.)


def main(argv: list[str] | None = None) -> int:
    # (a bad value or an unknown flag is one line, exit 2, as fda-ray's programs)
    p = OneLineParser(prog="python datasets/prepare_mimic.py", description=__doc__.splitlines()[0])
    for name in ("chexpert", "metadata", "patients", "admissions"):
        p.add_argument(f"--{name}", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--per-class", type=typed("per_class", int, "an integer >= 1"), default=4000,
                   help="images per label and domain (the authors: 4000)")
    p.add_argument("--test-share", type=typed("test_share", float, "a number in [0, 1)"), default=0.2,
                   help="share of each label in the test split (0.2; 0: no test rows)")
    p.add_argument("--image-root", default="")
    p.add_argument("--seed", type=typed("seed", int, "an integer"), default=0)
    a = p.parse_or_exit_code(argv)
    if isinstance(a, int):
        return a
    # (a test share of 0: no test rows, so each domain tests on its unlabelled training rows, as the authors'
    # MIMIC script once did; docs/datasets.md)
    if (bad := out_of_range(a.per_class, 0.5)) is not None or not 0 <= a.test_share < 1:
        print(bad or f"error: test_share={a.test_share!r} is invalid: a number in [0, 1)", file=sys.stderr)
        return 2
    try:  # every input read and checked before any work: one line naming the first that cannot be used
        chexpert = _read(a, "chexpert")
        conditions = [c for c in chexpert[0] if c not in ("subject_id", "study_id")]
        admission_rows = _read(a, "admissions")
        if not {"race", "ethnicity"} & set(admission_rows[0]):
            raise InputError("admissions", a.admissions, f"not {INPUTS['admissions'][0]} (no column 'race' "
                                                         "(MIMIC-IV 2.x) or 'ethnicity' (MIMIC-IV 1.0))")
        patient_rows = _read(a, "patients")
        metadata = _read(a, "metadata")
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if (why := writable_output(a.out)) is not None:
        print(f"error: out={a.out!r} cannot be written ({why})", file=sys.stderr)
        return 1
    labels = {(r["subject_id"], r["study_id"]): r for r in chexpert}
    admissions = _first_per_subject(admission_rows)
    patients = _first_per_subject(patient_rows)
    groups: dict[str, dict[str, list[list[str]]]] = {name: {"1": [], "0": []} for _, name in RACES}
    for m in metadata:
        key = (m["subject_id"], m["study_id"])
        if key not in labels or m["subject_id"] not in admissions or m["subject_id"] not in patients:
            continue  # the authors' inner joins
        lab, adm, pat = labels[key], admissions[m["subject_id"]], patients[m["subject_id"]]
        if any(_number(lab[c]) == -1 for c in conditions):
            continue
        race_text = adm.get("race", adm.get("ethnicity", "")).upper()
        race = next((name for token, name in RACES if token in race_text), None)
        no_finding = _number(lab["No Finding"])
        if race is None or no_finding not in (0.0, 1.0):
            continue
        subject = m["subject_id"]
        path = f"files/p{subject[:2]}/p{subject}/s{m['study_id']}/{m['dicom_id']}.jpg"
        path = str(Path(a.image_root) / path) if a.image_root else path
        groups[race]["1" if no_finding == 0.0 else "0"].append([path, pat["gender"], pat["anchor_age"]])
    rng = random.Random(a.seed)
    order = random.Random(f"{a.seed}/order")  # the rows' order: its own generator, so the images drawn
    # with --seed are those drawn before the rows were shuffled (rng's draws unchanged)
    out = []
    for race, by_label in groups.items():
        rows_of_domain = []
        for label, items in by_label.items():
            rng.shuffle(items)
            chosen = items[: a.per_class]
            n_test = round(a.test_share * len(chosen))
            for i, (path, sex, age) in enumerate(chosen):
                rows_of_domain.append([path, label, race, "test" if i < n_test else "train", sex, age])
        # in a seeded random order, as the authors' tables: a loader that takes a table's first n rows
        # (--samples-per-client) must not read one class only
        order.shuffle(rows_of_domain)
        out += rows_of_domain
        print(f"{race}: {min(len(by_label['1']), a.per_class)} with findings, "
              f"{min(len(by_label['0']), a.per_class)} without", file=sys.stderr)
    try:
        with open(a.out, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["path", "label", "domain", "split", "aux_sex", "aux_age"])
            w.writerows(out)
    except OSError as e:  # no such folder, a read-only one, a full disk
        print(f"error: out={a.out!r} cannot be written ({e.strerror or e})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
