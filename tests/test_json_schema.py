"""Every command's --json document carries the schema version and validates against its JSON Schema in
docs/schemas, which is the one its document types give (docs/schemas/generate.py); a wrong document does not."""

from __future__ import annotations

import copy
import importlib.util
import json
import shutil
from pathlib import Path

import jsonschema
import pytest

from rnnprof.cli import main
from rnnprof.reports.layout import SCHEMA_VERSION
from rnnprof.reports.schema import DOCUMENTS

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
SCHEMAS = ROOT / "docs" / "schemas"
KINETO = [DATA / "kineto-1gpu-v100.json.gz"]
GLOO = [DATA / "torch-gloo-rank0.json.gz", DATA / "torch-gloo-rank1.json.gz"]
TF1 = [DATA / "tf1-timeline-gpu-matmul.json"]
ANALYSES = ("count-ops", "comm", "critical-path", "roofline", "placement-audit", "audit")


def _generator():
    spec = importlib.util.spec_from_file_location("generate_schemas", SCHEMAS / "generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _validator(command: str) -> jsonschema.Draft202012Validator:
    schema = json.loads((SCHEMAS / f"{command}.schema.json").read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


WITH_INPUT_NOTES = {command for command, types in DOCUMENTS.items()
                    if any("input_notes" in t.__struct_fields__ for t in types)}


def _document(capsys, command: str, *argv) -> dict:
    code = main([command, *map(str, argv), "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert out.out.startswith('{\n  "schema_version": %d,\n' % SCHEMA_VERSION)
    document = json.loads(out.out)
    if command in WITH_INPUT_NOTES:  # the notes said on stderr, in the document
        said = [line.removeprefix("note: ") for line in out.err.splitlines() if line.startswith("note: ")]
        assert document["input_notes"] == said
    return document


def test_notes_about_the_input_are_in_the_document_as_on_stderr(tmp_path, capsys):
    """A job's folder with a file that is no rank's trace: the note that skips it reaches a script reading the
    JSON too, not only a person reading stderr."""
    job = tmp_path / "job"
    job.mkdir()
    for path in GLOO:
        shutil.copy(path, job / path.name)
    (job / "settings.json").write_text('{"lr": 0.1}')
    for command in ("comm", "count-ops", "critical-path", "audit", "placement-audit", "roofline", "whatif"):
        change = ["--comm", "0.5"] if command == "whatif" else []
        notes = _document(capsys, command, job, *change)["input_notes"]
        assert any("settings.json" in note for note in notes), (command, notes)


def _assert_valid(command: str, document: dict) -> None:
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in _validator(command).iter_errors(document)]
    assert errors == []
    assert document["schema_version"] == SCHEMA_VERSION


def test_the_committed_schemas_are_those_the_document_types_give():
    generator = _generator()
    assert generator.stale() == [], "run python docs/schemas/generate.py"
    assert sorted(p.name for p in SCHEMAS.glob("*.schema.json")) == sorted(f"{c}.schema.json" for c in DOCUMENTS)


@pytest.mark.parametrize("command", ANALYSES)
@pytest.mark.parametrize("paths", [KINETO, GLOO, TF1], ids=["kineto", "gloo-pair", "tf1-timeline"])
def test_each_analysis_document_validates(capsys, command, paths):
    _assert_valid(command, _document(capsys, command, *paths))


@pytest.mark.parametrize("paths, change", [(KINETO, ["--scale", "family:gemm=0.7", "--graph-launch"]),
                                           (GLOO, ["--fix", "PF001", "--comm", "0.5"]),
                                           (TF1, ["--scale", "MatMul=0.5"])], ids=["kineto", "gloo-pair", "tf1"])
def test_whatif_documents_validate(capsys, paths, change):
    _assert_valid("whatif", _document(capsys, "whatif", *paths, *change))


def test_comparisons_and_diff_validate(capsys):
    _assert_valid("count-ops", _document(capsys, "count-ops", *KINETO, "--vs", GLOO[0]))
    _assert_valid("diff", _document(capsys, "diff", DATA / "kineto-2rank-rank1-v100-cudagraph.json.gz",
                                    DATA / "kineto-8rank-rank3-a100.json.gz"))


def test_explain_of_a_sweep_validates(tmp_path, capsys):
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    shutil.copy(KINETO[0], one)
    for path in GLOO:
        shutil.copy(path, two)
    _assert_valid("explain", _document(capsys, "explain", one, two, "--scaling", "weak"))


@pytest.mark.slow
@pytest.mark.parametrize("command", ANALYSES)
def test_each_analysis_of_a_tensorflow_run_validates(tiny_nmt_run, capsys, command):
    _assert_valid(command, _document(capsys, command, tiny_nmt_run))


@pytest.mark.slow
def test_scale_validates(capsys):
    tiny = ["--model", "rnnlm", "--encoder", "fused", "--layers", "1", "--units", "16", "--vocab-size", "50",
            "--src-max-len", "6", "--tgt-max-len", "6", "--batch-size", "4", "--warmup", "1", "--batches", "2"]
    _assert_valid("scale", _document(capsys, "scale", "--devices", "1", *tiny))


def _errors(command: str, document: dict) -> list[str]:
    return [e.message for e in _validator(command).iter_errors(document)]


def test_planted_wrong_documents_fail(capsys):
    audit = _document(capsys, "audit", *GLOO)
    assert audit["findings"] and _errors("audit", audit) == []
    wrong = {
        "another version": {**audit, "schema_version": SCHEMA_VERSION + 1},
        "no version": {k: v for k, v in audit.items() if k != "schema_version"},
        "a key missing": {k: v for k, v in audit.items() if k != "noise"},
        "an unknown key": {**audit, "findings_by_rule": {}},
    }
    finding = copy.deepcopy(audit)
    finding["findings"][0]["saving_ms"] = "1.5 ms"
    wrong["a saving as text"] = finding
    severity = copy.deepcopy(audit)
    severity["findings"][0]["severity"] = "fatal"
    wrong["an unknown severity"] = severity
    assert {what: bool(_errors("audit", document)) for what, document in wrong.items()} == dict.fromkeys(wrong, True)


def test_a_planted_link_type_fails_in_a_result_dataclass_part(capsys):
    document = _document(capsys, "critical-path", *KINETO)
    assert _errors("critical-path", document) == []
    document["steps"][0]["links"][0]["dur_us"] = None
    assert _errors("critical-path", document)


def test_memory_document_validates(capsys):
    _assert_valid("memory", _document(capsys, "memory", DATA / "kineto-h100-vit-shapes.json.gz"))


def test_pipeline_documents_validate(capsys):
    """A run of rnnprof's pipeline (its manifest's schedule) and a user's 1F1B traces (the schedule inferred); the
    memory of the run names its stages' peaks."""
    _assert_valid("pipeline", _document(capsys, "pipeline", DATA / "torch-gloo-pp"))
    _assert_valid("pipeline", _document(capsys, "pipeline", *(DATA / f"torch-gloo-pp-collectives-rank{r}.json.gz"
                                                               for r in (0, 1))))
    memory = _document(capsys, "memory", DATA / "torch-gloo-pp")
    assert memory["pipeline"]["explained"] and _errors("memory", memory) == []
