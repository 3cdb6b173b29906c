"""Healthcare FDA's medical tables on generated PNG fixtures: the generic table and the authors' per-domain formats,
their label and auxiliary mappings, their errors, and a run end to end; the preparation scripts of datasets/."""
from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import TEST_THREADS
from fda_ray.core.config import RunConfig
from fda_ray.data.base import DATASETS, DatasetNotFound
from fda_ray.data.medical_csv import TableError
from fda_ray.core.multitask import MISSING

REPO = Path(__file__).resolve().parents[1]


def _png(path: Path, value: int) -> str:
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.full((20, 24), value, dtype=np.uint8)).save(path)
    return str(path)


def _write(path: Path, header: list[str], rows: list[list]) -> Path:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
    return path


def generic_table(root: Path, per: int = 4) -> Path:
    """Three domains, per positives and per negatives to train on, 2 + 2 test rows; aux sex and age."""
    rows = []
    for d, domain in enumerate(("site_b", "site_a", "site_c")):
        for split, n in (("train", per), ("test", 2)):
            for i in range(2 * n):
                label = "Yes" if i % 2 else "No"
                img = _png(root / "img" / domain / f"{split}{i}.png", 40 * d + 5 * i)
                rows.append([str(Path(img).relative_to(root)), label, domain, split,
                             ["Male", "Female"][i % 2], str(17 + 11 * i), ["AP", "PA", ""][i % 3]])
    return _write(root / "table.csv", ["path", "label", "domain", "split", "aux_sex", "aux_age", "aux_view"], rows)


def test_generic_table_reads_domains_labels_and_auxiliary_columns(tmp_path):
    generic_table(tmp_path)
    s = DATASETS.get("medical-csv")(data_dir=str(tmp_path))
    assert s.env_names == ("site_a", "site_b", "site_c") and s.task == "binary" and s.num_classes == 2
    assert s.aux_tasks == (("sex", 2), ("age", 9), ("view", 2))  # sex, view: the table's sorted values
    x, y = s.environments[1]  # site_b: the first domain written
    assert len(x) == 8 and tuple(x[:2].shape) == (2, 3, 224, 224) and len(s.env_tests[1][1]) == 4
    assert y[:, 0].tolist() == [0, 1] * 4
    assert y[:, 1].tolist() == [1, 0] * 4  # Female 0 < Male 1 (sorted)
    ages = [17 + 11 * i for i in range(8)]
    assert y[:, 2].tolist() == [min(max((a - 18) // 9, 0), 8) for a in ages]  # Healthcare FDA's buckets, clamped
    assert y[:, 3].tolist() == [0, 1, MISSING, 0, 1, MISSING, 0, 1]  # AP 0, PA 1, empty: missing
    # Healthcare FDA's evaluation transform: Resize(224) and (0.5, 0.5, 0.5) normalisation of the grey value
    assert torch.allclose(x[1], torch.full((3, 224, 224), (5 / 255 - 0.5) / 0.5), atol=1e-6)  # grey value 5


def test_sidecar_mapping_sets_domain_order_buckets_and_values(tmp_path):
    generic_table(tmp_path)
    (tmp_path / "table.json").write_text(json.dumps({"domains": ["site_c", "site_a", "site_b"],
                                                     "aux": {"age": {"start": 0, "width": 10, "count": 10},
                                                             "sex": {"Male": 0, "Female": 1}}}))
    s = DATASETS.get("medical-csv")(data_dir=str(tmp_path / "table.csv"))
    assert s.env_names == ("site_c", "site_a", "site_b") and s.aux_tasks[:2] == (("sex", 2), ("age", 10))
    y = s.environments[2][1]
    assert y[:, 1].tolist() == [0, 1] * 4 and y[:, 2].tolist() == [min((17 + 11 * i) // 10, 9) for i in range(8)]


def test_a_sidecar_that_leaves_out_a_domain_or_lists_one_is_refused(tmp_path):
    """The sidecar's `domains` sets the order of the table's domains: one it leaves out vanished from the run without
    a word (a source fewer); one domain alone read as "num_sources=0 is invalid" from the config."""
    from fda_ray.core.config import RunConfig

    generic_table(tmp_path)
    (tmp_path / "table.json").write_text(json.dumps({"domains": ["site_c", "site_a"]}))
    with pytest.raises(TableError, match=r"table.json: domains=\['site_c', 'site_a'\] is invalid: it lacks "
                                         r"'site_b', a domain of table.csv; list every domain"):
        DATASETS.get("medical-csv")(data_dir=str(tmp_path))
    _write(tmp_path / "table.csv", ["path", "label", "domain"], [[f"img/site_a/train{i}.png", ["No", "Yes"][i % 2],
                                                                  "site_a"] for i in range(4)])
    (tmp_path / "table.json").write_text(json.dumps({"domains": ["site_a"]}))
    with pytest.raises(TableError, match=r"table.csv: column 'domain' holds one domain \('site_a'\); a federated"):
        RunConfig(dataset="medical-csv", data_dir=str(tmp_path), model="multitask_cnn").resolved()


def test_generic_table_errors_name_the_file_line_and_value(tmp_path):
    path = generic_table(tmp_path)
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[:3] + [lines[3].replace(",No,", ",maybe,")] + lines[4:]) + "\n")
    with pytest.raises(TableError, match=r"table.csv:4: label 'maybe' is invalid: one of Yes/No"):
        DATASETS.get("medical-csv")(data_dir=str(tmp_path))
    generic_table(tmp_path)
    (tmp_path / "img" / "site_a" / "train3.png").unlink()
    with pytest.raises(DatasetNotFound, match=r"1 image file\(s\) .* do not exist, the first '.*site_a/train3.png'"):
        DATASETS.get("medical-csv")(data_dir=str(tmp_path))
    generic_table(tmp_path)
    text = path.read_text().replace("Yes,site_c,train", "No,site_c,train")
    path.write_text(text)
    with pytest.raises(TableError, match=r"domain 'site_c': its training table has no positive sample"):
        DATASETS.get("medical-csv")(data_dir=str(tmp_path))
    with pytest.raises(DatasetNotFound, match=r"no table at .*nowhere; searched .*nowhere and .*nowhere/table.csv"):
        DATASETS.get("medical-csv")(data_dir=str(tmp_path / "nowhere"))
    _write(tmp_path / "bad.csv", ["file", "label", "domain"], [["a.png", "1", "x"]])
    with pytest.raises(TableError, match=r"column 'path' is missing"):
        DATASETS.get("medical-csv")(data_dir=str(tmp_path / "bad.csv"))
    # a row listed twice in one domain's split (it was counted twice), and a row with no domain (named no line)
    generic_table(tmp_path)
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines + [lines[1]]) + "\n")
    with pytest.raises(TableError, match=rf"table.csv:{len(lines) + 1}: column 'path': image .* is listed before in "
                                         r"domain '.*'s (train|test) rows \(.*table.csv:2\); list each image once"):
        DATASETS.get("medical-csv")(data_dir=str(tmp_path))
    cells = lines[3].split(",")
    header = lines[0].split(",")
    cells[header.index("domain")] = ""
    path.write_text("\n".join(lines[:3] + [",".join(cells)] + lines[4:]) + "\n")
    with pytest.raises(TableError, match=r"table.csv:4: column 'domain' is empty; every row names its domain"):
        DATASETS.get("medical-csv")(data_dir=str(tmp_path))


def _authors_tables(root: Path, name: str) -> None:
    """Per-domain files in the authors' formats (their headers and columns)."""
    from fda_ray.data.medical_csv import FORMATS

    fmt = FORMATS[name]
    for d, domain in enumerate(fmt.domains):
        for split in ("train", "test"):
            rows = []
            for i in range(6):
                img = _png(root / "img" / f"{domain}_{split}_{i}.png", 20 * d + i)
                yes = "Yes" if i % 2 else "No"
                if name == "chexpert":
                    rows.append([img, ["Male", "Female"][i % 2], str(30 + 9 * i), ["Frontal", "Lateral"][i % 2], yes])
                elif name == "mimic-cxr":
                    rows.append([img, "URGENT", ["M", "F"][i % 2], str(20 + 9 * i), yes])
                else:
                    rows.append([img, ["White", "Black or African American", "Asian"][i % 3], yes,
                                 ["Male", "Female"][i % 2], str(5 + 10 * i), domain])
            header = {"chexpert": ["file_path", "sex", "age", "frontal/lateral", "positive"],
                      "mimic-cxr": ["img_path", "admission_type", "gender", "age", "positive"],
                      "midrc": ["img_path", "race", "is_covid", "sex", "age", "state"]}[name]
            _write(root / f"{fmt.prefix}_{domain}_{split}.csv", header, rows)


@pytest.mark.parametrize("name,aux,expect", [
    ("chexpert", (("sex", 2), ("age", 9), ("view", 2)), [[0, 0, 1, 0], [1, 1, 2, 1], [0, 0, 3, 0]]),
    ("mimic-cxr", (("sex", 2), ("age", 9)), [[0, 0, 0], [1, 1, 1], [0, 0, 2]]),
    ("midrc", (("race", 3), ("sex", 2), ("age", 10)), [[0, 0, 0, 0], [1, 1, 1, 1], [0, 2, 0, 2]]),
])
def test_authors_formats(tmp_path, name, aux, expect):
    from fda_ray.data.medical_csv import FORMATS

    _authors_tables(tmp_path, name)
    s = DATASETS.get(name)(data_dir=str(tmp_path))
    assert s.env_names == FORMATS[name].domains and s.aux_tasks == aux
    assert s.environments[0][1][:3].tolist() == expect
    assert all(t is not None and len(t[1]) == 6 for t in s.env_tests)
    (tmp_path / f"{FORMATS[name].prefix}_{FORMATS[name].domains[1]}_train.csv").unlink()
    with pytest.raises(DatasetNotFound, match=rf"domain '{FORMATS[name].domains[1]}' has no table"):
        DATASETS.get(name)(data_dir=str(tmp_path))


def test_the_authors_tables_leave_out_training_rows_that_name_a_test_image(tmp_path):
    """The authors split each domain on its own, so one image can be a test image of one domain and a training
    image of another: those training rows are left out with one warning naming the counts (the test tables stay
    whole); a missing absolute path says to rewrite the tables' prefix."""
    from fda_ray.core.notices import RunWarning
    from fda_ray.data.medical_csv import FORMATS

    _authors_tables(tmp_path, "chexpert")
    fmt = FORMATS["chexpert"]
    target, source = fmt.domains[0], fmt.domains[2]
    test_table = tmp_path / f"{fmt.prefix}_{target}_test.csv"
    train_table = tmp_path / f"{fmt.prefix}_{source}_train.csv"
    shared = [line.split(",")[0] for line in test_table.read_text().splitlines()[1:3]]
    lines = train_table.read_text().splitlines()
    lines[4] = ",".join([shared[0]] + lines[4].split(",")[1:])  # rows 4 and 5 of the source train on test images
    lines[5] = ",".join([shared[1]] + lines[5].split(",")[1:])
    train_table.write_text("\n".join(lines) + "\n")
    with pytest.warns(RunWarning, match=rf"chexpert: training rows that name a test image are left out, so no test "
                                        rf"image is trained on: {source} 2 of 6 \(the first .*{train_table.name}:5;"):
        s = DATASETS.get("chexpert")(data_dir=str(tmp_path))
    kept = s.environments[2][0].paths
    assert len(kept) == 4 and not set(kept) & set(shared) and len(s.env_tests[0][0].paths) == 6
    lines = train_table.read_text().splitlines()
    lines[2] = ",".join(["/shared/rsaas/someone/CheXpert-v1.0-small/train/p1.jpg"] + lines[2].split(",")[1:])
    train_table.write_text("\n".join(lines) + "\n")
    with pytest.raises(DatasetNotFound, match=r"rewrite their prefix to where your copy is \(e.g. sed -i "
                                              r"'s#/shared/rsaas/someone/#/your/copy/#'"):
        DATASETS.get("chexpert")(data_dir=str(tmp_path))


def test_a_table_runs_seed_000_end_to_end(tmp_path):
    from fda_ray.runtime.engine import run

    generic_table(tmp_path, per=6)
    cfg = RunConfig(dataset="medical-csv", data_dir=str(tmp_path), method="fedavg_finetune_auxinfo_gp",
                    model="multitask_cnn", test_env=1, rounds=1, target_labelled=4, batch_source=4, batch_target=4,
                    threads=TEST_THREADS)
    assert cfg.resolved().num_sources == 2 and cfg.resolved().data_augmentation
    hist = run(cfg)
    row = hist.rows[0]
    assert 0 <= row["accuracy"] <= 1 and 0 <= row["auc"] <= 1 and torch.isfinite(hist.final_weights).all()


# ---------------------------------------------------------------- datasets/ preparation scripts

def _chexpert_release(root: Path) -> Path:
    """A CheXpert-v1.0-small train.csv: Path, Sex, Age, Frontal/Lateral, AP/PA, 14 observations."""
    obs = ["No Finding", "Enlarged Cardiomediastinum", "Cardiomegaly", "Lung Opacity", "Lung Lesion", "Edema",
           "Consolidation", "Pneumonia", "Atelectasis", "Pneumothorax", "Pleural Effusion", "Pleural Other",
           "Fracture", "Support Devices"]
    rng = np.random.default_rng(0)
    rows = []
    for i in range(400):
        values = [rng.choice(["1.0", "0.0", "-1.0", ""], p=[0.2, 0.2, 0.1, 0.5]) for _ in obs]
        rows.append([f"CheXpert-v1.0-small/train/patient{i // 2:05d}/study1/view{i % 2}_frontal.jpg",
                     ["Male", "Female"][i % 2], str(20 + i % 60), ["Frontal", "Lateral"][i % 3 == 0], "AP", *values])
    return _write(root / "train.csv", ["Path", "Sex", "Age", "Frontal/Lateral", "AP/PA", *obs], rows)


def test_prepare_chexpert_writes_a_generic_table(tmp_path):
    src = _chexpert_release(tmp_path)
    out = tmp_path / "table.csv"
    r = subprocess.run([sys.executable, str(REPO / "datasets" / "prepare_chexpert.py"), str(src), str(out),
                        "--per-class", "10", "--image-root", "/data/chexpert"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    with open(out, newline="") as f:
        rows = list(csv.DictReader(f))
    assert set(rows[0]) == {"path", "label", "domain", "split", "aux_sex", "aux_age", "aux_view"}
    release = {row["Path"]: row for row in csv.DictReader(open(src, newline=""))}
    domains = {"Edema": "Edema", "LungLesion": "Lung Lesion", "Pneumonia": "Pneumonia",
               "Atelectasis": "Atelectasis", "Consolidation": "Consolidation"}
    assert {r["domain"] for r in rows} == set(domains)
    for r in rows:
        cond = release[r["path"].removeprefix("/data/chexpert/")][domains[r["domain"]]]
        assert (cond == "1.0") == (r["label"] == "1") and cond in ("1.0", "")  # the authors' negatives: blank
    for d in domains:
        mine = [r for r in rows if r["domain"] == d]
        pos = sum(r["label"] == "1" for r in mine)
        assert pos == len(mine) - pos <= 10 and {r["split"] for r in mine} == {"train", "test"}
    # one patient's images stay in one domain (the default)
    patient = {}
    for r in rows:
        p = r["path"].split("/")[-3]
        assert patient.setdefault(p, r["domain"]) == r["domain"]


def test_prepare_chexpert_with_shared_patients_gives_an_image_one_split_in_every_domain(tmp_path):
    """--keep-shared-patients lets an image enter several domains (as in the paper); it keeps the split its first
    domain gave it, so no test image is another domain's training image, which fda-ray's reader refuses."""
    from fda_ray.data.medical_csv import read_generic

    src = _chexpert_release(tmp_path)
    out = tmp_path / "shared" / "table.csv"  # (a new folder: made)
    r = subprocess.run([sys.executable, str(REPO / "datasets" / "prepare_chexpert.py"), str(src), str(out),
                        "--per-class", "30", "--keep-shared-patients"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    rows = list(csv.DictReader(open(out, newline="")))
    split: dict[str, set[str]] = {}
    for row in rows:
        split.setdefault(row["path"], set()).add(row["split"])
    shared = [p for p in split if sum(row["path"] == p for row in rows) > 1]
    assert shared and all(len(s) == 1 for s in split.values())  # images in several domains, one split each
    for d in {row["domain"] for row in rows}:
        mine = [row for row in rows if row["domain"] == d]
        tests = sum(row["split"] == "test" for row in mine)
        assert 0 < tests < len(mine)
    domains, trains, tests, _ = read_generic(out)  # the reader's leak check passes
    assert len(domains) == 5


def test_prepare_mimic_joins_the_release_files(tmp_path):
    rng = np.random.default_rng(1)
    chex, meta, pats, adms = [], [], [], []
    races = ["WHITE", "BLACK/AFRICAN AMERICAN", "ASIAN - CHINESE", "HISPANIC/LATINO - PUERTO RICAN", "OTHER"]
    for s in range(60):
        subject, study = 10000000 + s, 50000000 + s
        chex.append([subject, study, rng.choice(["1.0", "0.0", ""]), "1.0"])
        meta.append([f"d{s}", subject, study, "PA"])
        pats.append([subject, ["M", "F"][s % 2], 30 + s])
        adms.append([subject, "URGENT", races[s % 5]])
    _write(tmp_path / "chexpert.csv", ["subject_id", "study_id", "No Finding", "Edema"], chex)
    _write(tmp_path / "metadata.csv", ["dicom_id", "subject_id", "study_id", "ViewPosition"], meta)
    _write(tmp_path / "patients.csv", ["subject_id", "gender", "anchor_age"], pats)
    _write(tmp_path / "admissions.csv", ["subject_id", "admission_type", "race"], adms)
    out = tmp_path / "table.csv"
    r = subprocess.run([sys.executable, str(REPO / "datasets" / "prepare_mimic.py"), "--chexpert",
                        str(tmp_path / "chexpert.csv"), "--metadata", str(tmp_path / "metadata.csv"), "--patients",
                        str(tmp_path / "patients.csv"), "--admissions", str(tmp_path / "admissions.csv"),
                        "--out", str(out), "--per-class", "5"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    rows = list(csv.DictReader(open(out, newline="")))
    assert {r["domain"] for r in rows} <= {"White", "Black", "Asian", "Hispanic"} and rows
    by_dicom = {m[0]: (c, p, a) for m, c, p, a in zip(meta, chex, pats, adms)}
    for r in rows:
        c, p, a = by_dicom[Path(r["path"]).stem]
        assert r["path"] == f"files/p{str(c[0])[:2]}/p{c[0]}/s{c[1]}/{Path(r['path']).stem}.jpg"
        assert r["label"] == ("0" if c[2] == "1.0" else "1")  # the authors' label: any finding
        assert r["aux_sex"] == p[1] and r["aux_age"] == str(p[2])


def test_a_prepared_generic_table_reads_as_its_dataset_in_the_papers_domain_order(tmp_path):
    """prepare_chexpert.py's table under --dataset chexpert: the format's domains, Edema (the target) first."""
    rows = []
    for d, domain in enumerate(("Atelectasis", "Consolidation", "Edema", "LungLesion", "Pneumonia")):
        for i in range(4):
            rows.append([_png(tmp_path / "img" / f"{domain}{i}.png", 10 * d + i), str(i % 2), domain,
                         "test" if i == 3 else "train", "Male", "40", "Frontal"])
    _write(tmp_path / "table.csv", ["path", "label", "domain", "split", "aux_sex", "aux_age", "aux_view"], rows)
    s = DATASETS.get("chexpert")(data_dir=str(tmp_path))
    assert s.env_names == ("Edema", "LungLesion", "Pneumonia", "Atelectasis", "Consolidation")
    assert [n for n, _ in s.aux_tasks] == ["sex", "age", "view"] and len(s.environments[0][1]) == 3
    assert RunConfig(dataset="chexpert", data_dir=str(tmp_path)).resolved().num_sources == 4


def test_command_line_names_a_missing_table_in_one_line(tmp_path, capsys):
    from fda_ray.experiments.cli import main

    assert main(["--dataset", "medical-csv", "--data-dir", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: medical-csv: no table at ") and err.count("\n") == 1


def _labels_in_file_order(path: Path) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for row in csv.DictReader(open(path, newline="")):
        out.setdefault(row["domain"], []).append(row["label"])
    return out


def test_the_preparation_scripts_write_each_domain_in_a_random_order(tmp_path):
    """A cap (--samples-per-client, --test-samples) keeps a table's first rows: the prepared tables list a domain's
    rows shuffled, not its positives then its negatives (a capped source trained on positives only)."""
    src = _chexpert_release(tmp_path)
    out = tmp_path / "table.csv"
    r = subprocess.run([sys.executable, str(REPO / "datasets" / "prepare_chexpert.py"), str(src), str(out),
                        "--per-class", "10"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    for domain, labels in _labels_in_file_order(out).items():
        assert len(labels) >= 8 and len(set(labels[: len(labels) // 2])) == 2, (domain, labels)
    rng = np.random.default_rng(2)
    chex, meta, pats, adms = [], [], [], []
    for s in range(80):
        subject, study = 10000000 + s, 50000000 + s
        chex.append([subject, study, rng.choice(["1.0", "0.0"]), "0.0"])
        meta.append([f"d{s}", subject, study, "PA"])
        pats.append([subject, ["M", "F"][s % 2], 30 + s])
        adms.append([subject, "URGENT", ["WHITE", "ASIAN"][s % 2]])
    for name, header, rows in (("chexpert", ["subject_id", "study_id", "No Finding", "Edema"], chex),
                               ("metadata", ["dicom_id", "subject_id", "study_id", "ViewPosition"], meta),
                               ("patients", ["subject_id", "gender", "anchor_age"], pats),
                               ("admissions", ["subject_id", "admission_type", "race"], adms)):
        _write(tmp_path / f"{name}.csv", header, rows)
    out = tmp_path / "mimic.csv"
    r = subprocess.run([sys.executable, str(REPO / "datasets" / "prepare_mimic.py"),
                        *(x for n in ("chexpert", "metadata", "patients", "admissions")
                          for x in (f"--{n}", str(tmp_path / f"{n}.csv"))), "--out", str(out)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    for domain, labels in _labels_in_file_order(out).items():
        assert len(set(labels[: len(labels) // 2])) == 2, (domain, labels)


def test_a_cap_that_would_keep_one_class_of_a_sorted_table_is_one_line(tmp_path):
    """A table listed class by class (a user's own, or one prepared before the scripts shuffled): the cap names the
    field, the domain and the fix instead of training a one-class source."""
    from fda_ray.runtime.engine import run

    rows = []
    for domain in ("a", "b", "c"):
        for split, n in (("train", 8), ("test", 4)):
            for i in range(n):  # positives first, then negatives
                img = _png(tmp_path / "img" / f"{domain}{split}{i}.png", 7 * i)
                rows.append([img, "1" if i < n // 2 else "0", domain, split, "Male", "40"])
    _write(tmp_path / "table.csv", ["path", "label", "domain", "split", "aux_sex", "aux_age"], rows)
    base = dict(dataset="medical-csv", data_dir=str(tmp_path), method="fedavg_finetune", model="multitask_cnn",
                test_env=0, rounds=1, target_labelled=2, batch_source=2, batch_target=2, threads=TEST_THREADS)
    with pytest.raises(ValueError, match=r"^samples_per_client=3 is invalid for domain b: its table's first 3 rows "
                                         r"are all of class 1 \(of the 2"):
        run(RunConfig(**base, samples_per_client=3))
    with pytest.raises(ValueError, match=r"^test_samples=2 is invalid for domain a: .* sorted by label"):
        run(RunConfig(**base, test_samples=2))
    assert run(RunConfig(**base, samples_per_client=5, test_samples=3)).rows  # both classes kept: runs


def test_midrc_trains_without_augmentation_and_the_table2_grids_cap_no_client():
    """The authors' MIDRC script has the crop and flip commented out; the grids train on every row of the table (a
    cap would cap the target's pool, the Oracle's training set, too)."""
    from fda_ray.experiments.trials import plan
    from fda_ray.papers.grids import GRIDS

    for grid in ("chexpert-000", "mimic-000", "midrc-000"):
        for profile in ("paper", "code"):
            assert all("samples_per_client" not in t.params for t in plan(GRIDS[grid], profile, seeds=1))
    assert not RunConfig(dataset="midrc").resolved().data_augmentation
    assert RunConfig(dataset="chexpert").resolved().data_augmentation
    assert RunConfig(dataset="mimic-cxr").resolved().data_augmentation
