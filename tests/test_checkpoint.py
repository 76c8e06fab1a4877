"""`fasop pareto --resume` reads its checkpoint as data, validated like any input file.

What is protected here:
- a crafted record (a pickle that would create a file, as the checkpoint format of fasop <= 0.x
  held) cannot execute code: it is refused with one line, exit 2;
- a record's result round-trips through JSON bit for bit (a resumed sweep writes the bytes of an
  uninterrupted one: tests/test_sweep_scale.py), and a record whose fields or types are wrong,
  whose composition is not the one its index names, or whose index is out of range is refused;
- a truncated header, a foreign file, a folder, a dangling symbolic link, a FIFO, an oversized
  file or line: one line, exit 2, nothing read through or written through the link;
- a last line cut short by a kill is dropped and the sweep continues.
"""

from __future__ import annotations

import base64
import json
import os
import pickle

import pytest

import fasop.pareto.checkpoint
import fasop.pareto.sweep
from fasop.cli.command import main
from fasop.pareto import records
from fasop.specs.files import shipped_folder

ITERATIONS = 1_000_000


def _argv(prefix, *extra):
    return ["pareto", "--model", str(shipped_folder("model_specs") / "bert.yaml"), "--cluster",
            str(shipped_folder("cluster_specs") / "fasop-paper.yaml"), "--max-nodes", "a100=1,a10=2", "--iterations",
            str(ITERATIONS), "--out-prefix", str(prefix), "--no-progress", "--workers", "1", *extra]


@pytest.fixture
def interrupted(tmp_path, monkeypatch, capsys):
    """An interrupted sweep's checkpoint with 2 records: (prefix, checkpoint path, its lines)."""
    calls, real = [], fasop.pareto.sweep.search

    def interrupting(*args, **kwargs):
        calls.append(1)
        if len(calls) > 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(fasop.pareto.sweep, "search", interrupting)
    prefix = tmp_path / "out" / "bert"
    assert main(_argv(prefix)) == 130
    monkeypatch.setattr(fasop.pareto.sweep, "search", real)
    capsys.readouterr()
    checkpoint = prefix.with_name("bert_pareto.checkpoint")
    lines = checkpoint.read_text().splitlines(keepends=True)
    assert len(lines) == 3
    return prefix, checkpoint, lines


def _refused(prefix, capsys, *words):
    before = {p.name: p.read_bytes() for p in prefix.parent.iterdir()}
    assert main(_argv(prefix, "--resume")) == 2
    err = capsys.readouterr().err
    assert err.startswith("fasop: error: --resume: ") and err.count("\n") == 1, err
    assert "Traceback" not in err and all(w in err for w in words), err
    assert {p.name: p.read_bytes() for p in prefix.parent.iterdir()} == before  # nothing written


class _Payload:
    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_a_crafted_pickle_record_cannot_run_code(interrupted, capsys, tmp_path):
    prefix, checkpoint, lines = interrupted
    victim = tmp_path / "pwned"
    blob = base64.b64encode(pickle.dumps(_Payload(str(victim)))).decode()
    checkpoint.write_text(lines[0] + json.dumps({"index": 0, "cutoff": None, "result": blob}) + "\n")
    _refused(prefix, capsys, "not valid")
    assert not victim.exists()


def test_records_are_json_data_that_round_trip(interrupted):
    _, _, lines = interrupted
    for line in lines[1:]:
        entry = json.loads(line)
        assert isinstance(entry["result"], dict)
        result = records.decode(entry["result"])
        assert records.encode(result) == entry["result"]
        assert json.loads(json.dumps(records.encode(result))) == entry["result"]


def _mutated(line: str, change) -> str:
    entry = json.loads(line)
    change(entry)
    return json.dumps(entry) + "\n"


MUTATIONS = {
    "missing field": lambda e: e["result"].pop("iterations"),
    "extra field": lambda e: e["result"].update(extra=1),
    "wrong type": lambda e: e["result"].update(iterations="many"),
    "bool for int": lambda e: e["result"].update(iterations=True),
    "huge int": lambda e: e["result"].update(iterations=10 ** 40),
    "index out of range": lambda e: e.update(index=99),
    "negative index": lambda e: e.update(index=-1),
    "other composition": lambda e: e["result"]["composition"].update(counts=[["a100", 0], ["a10", 0]]),
    "result a list": lambda e: e.update(result=[]),
    "cutoff text": lambda e: e.update(cutoff="x"),
    "record keys": lambda e: e.pop("cutoff"),
}


@pytest.mark.parametrize("name", list(MUTATIONS))
def test_a_record_of_wrong_shape_is_one_line(interrupted, capsys, name):
    prefix, checkpoint, lines = interrupted
    checkpoint.write_text(lines[0] + _mutated(lines[1], MUTATIONS[name]) + lines[2])
    _refused(prefix, capsys, "not valid")


@pytest.mark.parametrize("content", [b"", b"{", b'{"fasop_checkpoint": 2', b"\x80\x04\x95", b"[1, 2]\n",
                                     b"[" * 100_000 + b"\n", b'{"fasop_checkpoint": 1, "fingerprint": "x"}\n',
                                     b'{"index": 0}\n', b"9" * 5000 + b"\n"])
def test_a_foreign_or_truncated_header_is_one_line(interrupted, capsys, content):
    prefix, checkpoint, _ = interrupted
    checkpoint.write_bytes(content)
    _refused(prefix, capsys, "not a checkpoint")


def test_deep_or_huge_records_are_one_line(interrupted, capsys, monkeypatch):
    prefix, checkpoint, lines = interrupted
    checkpoint.write_text(lines[0] + '{"index": 0, "cutoff": null, "result": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    _refused(prefix, capsys, "not valid")
    monkeypatch.setattr(fasop.pareto.checkpoint, "CHECKPOINT_LINE_BYTES", 2000)
    checkpoint.write_text(lines[0] + lines[1][:-1] + " " * 5000 + "\n")
    _refused(prefix, capsys, "record over")
    monkeypatch.setattr(fasop.pareto.checkpoint, "CHECKPOINT_BYTES", 100)
    checkpoint.write_text("".join(lines))
    _refused(prefix, capsys, "larger than")


def test_a_cut_last_line_is_dropped_and_the_sweep_continues(interrupted, capsys, tmp_path):
    prefix, checkpoint, lines = interrupted
    full = tmp_path / "full" / "bert"
    assert main(_argv(full)) == 0
    checkpoint.write_text(lines[0] + lines[1] + lines[2][: len(lines[2]) // 2])
    assert main(_argv(prefix, "--resume")) == 0
    assert "note: --resume: 1 compositions taken" in capsys.readouterr().err
    assert prefix.with_name("bert_pareto.csv").read_bytes() == full.with_name("bert_pareto.csv").read_bytes()


@pytest.mark.parametrize("kind", ["folder", "dangling", "link", "fifo"])
def test_odd_files_at_the_checkpoint_path_are_one_line(tmp_path, capsys, kind):
    prefix = tmp_path / "out" / "bert"
    prefix.parent.mkdir()
    checkpoint = prefix.with_name("bert_pareto.checkpoint")
    outside = tmp_path / "outside.txt"
    if kind == "folder":
        checkpoint.mkdir()
    elif kind == "dangling":
        checkpoint.symlink_to(outside)
    elif kind == "link":
        outside.write_text("keep\n")
        checkpoint.symlink_to(outside)
    else:
        os.mkfifo(checkpoint)
    for extra in (["--resume"], []):
        assert main(_argv(prefix, *extra)) == 2
        err = capsys.readouterr().err
        assert err.startswith("fasop: error: --resume: ") and err.count("\n") == 1 and "Traceback" not in err, err
    assert outside.read_text() == "keep\n" if kind == "link" else not outside.exists()
    assert sorted(p.name for p in prefix.parent.iterdir()) == ["bert_pareto.checkpoint"]
