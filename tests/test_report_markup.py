"""Names from the input (ops, kernels, devices, files, notes) are printed as they are, never read as rich markup.

The inputs are the real fixtures with names rewritten to hold markup (``[bold]``, ``[/]``, ``[red]x[/red]``,
``[link=...]``) and an emoji code (``:smile:``), which rich would otherwise apply, drop or fail on.
"""

from __future__ import annotations

import gzip
import io
import json
import sys
from pathlib import Path
from types import SimpleNamespace

from rich.console import Console

from rnnprof.cli import main

from fixtures import FIXTURES

TOKEN = "[bold]b[/bold][/][red]x[/red][link=http://e]l:smile:"
FILE_TOKEN = "[bold]f[red]x[link=e]:smile:"  # no "/" in a file name


def printed(argv: list[str]) -> str:
    out = io.StringIO()
    assert main(argv, Console(file=out, width=2000, color_system=None)) == 0
    return out.getvalue()


def squeezed(text: str) -> str:
    """Without white space: a table's title and caption wrap at the table's width."""
    return "".join(text.split())


def hostile_tf1(folder: Path, name: str = "trace.json") -> Path:
    """The TF1 GPU training step with ``TOKEN`` in the gradients/Mean_grad scope and in the MatMul op type."""
    doc = json.loads((FIXTURES / "tf1-timeline-gpu-loop-step0.json").read_text())
    for event in doc["traceEvents"]:
        args = event.get("args", {})
        for key in [k for k in args if k == "name" or k.startswith("input")]:
            args[key] = args[key].replace("Mean_grad", "Mean_grad" + TOKEN)
        if event.get("name") == "MatMul":
            event["name"] = args["op"] = "MatMul" + TOKEN
    path = folder / name
    path.write_text(json.dumps(doc))
    return path


def hostile_kineto(folder: Path, rank: int) -> Path:
    """A sampled Kineto rank whose rank (part of every device label) and NCCL kernel names hold ``TOKEN``."""
    with gzip.open(FIXTURES / f"kineto-sampled-rank{rank}.json.gz", "rt") as f:
        doc = json.load(f)
    doc["distributedInfo"]["rank"] = f"{rank}{TOKEN}"
    for event in doc["traceEvents"]:
        if event.get("name", "").startswith("ncclKernel_"):
            event["name"] = event["name"].replace("ncclKernel_", f"ncclKernel_{TOKEN}", 1)
    path = folder / f"rank{rank}.json"
    path.write_text(json.dumps(doc))
    return path


def test_count_ops_prints_op_types_and_file_names_verbatim(tmp_path):
    trace = hostile_tf1(tmp_path, f"trace{FILE_TOKEN}.json")
    by_type = printed(["count-ops", str(trace), "--by", "type"])
    assert f"MatMul{TOKEN}" in by_type and str(trace) in by_type
    other = hostile_tf1(tmp_path, f"other{FILE_TOKEN}.json")
    versus = printed(["count-ops", str(trace), "--vs", str(other)])
    assert f"{trace} ÷ {other}" in versus
    assert squeezed(f"left = {trace}, right = {other}") in squeezed(versus)  # the table's caption


def test_comm_prints_op_and_device_names_verbatim(tmp_path):
    trace = hostile_tf1(tmp_path, f"trace{FILE_TOKEN}.json")
    text = printed(["comm", str(trace), "--comm-pattern", "Mean_grad"])
    assert f"gradients/Mean_grad{TOKEN}/Prod" in text and str(trace) in text
    ranks = [str(hostile_kineto(tmp_path, r)) for r in (0, 1)]
    text = printed(["comm", *ranks, "--per-step"])
    assert f"ncclKernel_{TOKEN}SendRecv_RING_SIMPLE" in text
    for rank in (0, 1):
        assert text.count(f"rank{rank}{TOKEN}/gpu:{rank}") >= 3  # per device, per step, stragglers


def test_placement_audit_prints_op_device_and_file_names_verbatim(tmp_path):
    trace = hostile_tf1(tmp_path, f"trace{FILE_TOKEN}.json")
    text = printed(["placement-audit", str(trace), "--fail-on", "never"])
    assert f"Placement audit of {trace}" in text
    # PA005's host round trip: gradients/Mean_grad{TOKEN}/Shape, /Prod and /floordiv, their shared scope once
    assert f"gradients/Mean_grad{TOKEN}/…" in text
    assert {"Shape", "Prod", "floordiv"} <= {cell.strip() for line in text.splitlines() for cell in line.split("│")}
    ranks = [str(hostile_kineto(tmp_path, r)) for r in (0, 1)]
    text = printed(["placement-audit", *ranks, "--fail-on", "never"])
    heavy, light = f"rank1{TOKEN}/gpu:1", f"rank0{TOKEN}/gpu:0"
    assert f"{heavy} computes" in text and f"as long as {light} per step" in text  # PA004's title
    assert f"Find what {heavy} runs" in text  # its fix
    assert text.count(heavy) >= 3 and text.count(light) >= 2  # and its devices column


def test_scale_table_prints_the_model_and_parameter_device_verbatim():
    from rnnprof.analyzers.scale import ScalePoint, speedup_table
    from rnnprof.analyzers.throughput import summarize
    from rnnprof.reports.scale import render_table

    timed = summarize([SimpleNamespace(seconds=1.0, words=100)])
    result = speedup_table([ScalePoint(variable_update="parameter_server", all_reduce=None, devices=1,
                                       per_device_batch=4, total_batch=4, timed=timed)])
    out = io.StringIO()
    render_table(result, model=f"nmt{TOKEN}", words_definition=f"tokens{TOKEN}", warmup=1, batches=1,
                 include_warmup=False, notes=[f"n{TOKEN}"], console=Console(file=out, width=300, color_system=None),
                 parameter_device=f"cpu{TOKEN}")
    text = out.getvalue()
    for shown in (f"rnnprof scale: nmt{TOKEN},", f"words = tokens{TOKEN};", f"note: n{TOKEN}"):
        assert shown in text
    assert squeezed(f"parameter_server, variables on cpu{TOKEN}") in squeezed(text)  # the table's title


def test_notes_print_verbatim():
    from rnnprof.reports.layout import render_notes

    out = io.StringIO()
    render_notes([f"/runs/r{TOKEN}: the capture was interrupted"], Console(file=out, width=300, color_system=None))
    assert out.getvalue() == f"note: /runs/r{TOKEN}: the capture was interrupted\n"


def test_view_prints_the_address_verbatim(tmp_path, monkeypatch):
    from rnnprof.commands import view

    (tmp_path / "plugins" / "profile" / "run").mkdir(parents=True)
    (tmp_path / "plugins" / "profile" / "run" / "host.xplane.pb").write_bytes(b"")
    address = f"http://h{TOKEN}:1"
    # TensorBoard prints the address it serves on; this stands in for it, to print a hostile one.
    monkeypatch.setattr(view, "tensorboard_command",
                        lambda logdir, host, port: [sys.executable, "-c", f"print('serving at {address}/')"])
    text = printed(["view", str(tmp_path)])
    assert f"TensorBoard: rnnprof's findings {address}/#rnnprof, profile viewer {address}/#profile" in text


def test_json_output_is_the_document_as_json_dumps_writes_it():
    """``--json`` prints ``json.dumps`` of the document (indent 2, its schema version first) unchanged: markup, emoji codes and long lines are
    neither applied nor wrapped, on a plain file, under ``capture()`` and in a recording console alike."""
    from rnnprof.reports.layout import SCHEMA_VERSION, render_json

    document = {"name": f"k{TOKEN}", "long": "x" * 500, "unicode": "ü 漢字 \t\x1b[31m", "n": [1.5, None, True]}
    expected = json.dumps({"schema_version": SCHEMA_VERSION, **document}, indent=2) + "\n"
    assert expected.startswith('{\n  "schema_version": 1,\n  "name": ')
    out = io.StringIO()
    render_json(document, Console(file=out, width=40, color_system=None))
    assert out.getvalue() == expected
    terminal = io.StringIO()
    render_json(document, Console(file=terminal, width=40, force_terminal=True, color_system="truecolor"))
    assert terminal.getvalue() == expected
    capturing = Console(width=40)
    with capturing.capture() as capture:
        render_json(document, capturing)
    assert capture.get() == expected
    recording = Console(file=io.StringIO(), width=40, record=True)
    render_json(document, recording)
    assert recording.export_text() == expected
