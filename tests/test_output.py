"""Where results go (fasop/report/output.py): inside the chosen folder, never through a link or onto a
device, all files of a result or none, clear errors for names that cannot be files."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from fasop.cli.command import main
from fasop.core.errors import FasopError
from fasop.report.output import safe_name, write_files
from test_bad_input import MODEL


def search(*extra: str) -> list[str]:
    return ["search", "--model", "model.yaml", "--cluster", "cluster.yaml", "--nodes", "a10=2", "--no-progress",
            *extra]


def pareto(*extra: str) -> list[str]:
    return ["pareto", "--model", "model.yaml", "--cluster", "cluster.yaml", "--max-nodes", "a100=1,a10=1",
            "--workers", "1", "--no-progress", *extra]


def error_of(capsys, argv: list[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("fasop: error: ") and err.count("\n") == 1, err
    return err.removeprefix("fasop: error: ").rstrip("\n")


def files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if not p.is_dir())


@pytest.mark.parametrize("name,written", [
    ("../../escape", "results/_.._escape_cluster_a10x2.csv"),
    ("/tmp/fasop-absolute", "results/_tmp_fasop-absolute_cluster_a10x2.csv"),
    ("..", "results/_cluster_a10x2.csv"),
    ("a/b\\c:d", "results/a_b_c_d_cluster_a10x2.csv"),
])
def test_a_spec_name_cannot_lead_the_output_out_of_results(tiny_specs, capsys, name, written):
    (tiny_specs / "model.yaml").write_text(MODEL.replace("name: tiny", f"name: '{name}'"))
    before = set(files(tiny_specs))
    assert main(search()) == 0
    assert sorted(set(files(tiny_specs)) - before) == [written]


@pytest.mark.parametrize("text", ["../x", "/", ".", "..", "", "-", "a" * 500, "ключ"])
def test_safe_name_is_one_plain_file_name(text):
    name = safe_name(text)
    assert name and "/" not in name and not name.startswith((".", "-")) and len(name) <= 100
    assert name not in (".", "..")


def test_a_symlink_at_the_target_is_refused_and_left_alone(tiny_specs, capsys):
    (tiny_specs / "target.csv").write_text("keep\n")
    (tiny_specs / "link.csv").symlink_to("target.csv")
    message = error_of(capsys, search("--out", "link.csv"))
    assert message == "--out: cannot write 'link.csv': a symbolic link (fasop does not write through links)"
    assert (tiny_specs / "link.csv").is_symlink() and (tiny_specs / "target.csv").read_text() == "keep\n"


def test_a_dangling_symlink_is_refused_too(tiny_specs, capsys):
    (tiny_specs / "link.csv").symlink_to("nowhere.csv")
    assert "a symbolic link" in error_of(capsys, search("--out", "link.csv"))
    assert not (tiny_specs / "nowhere.csv").exists()


def _device(folder: Path) -> str:
    """A character device to aim --out at: a null device made in `folder` when running as root
    (never /dev/null itself, which a regression run as root would replace), else /dev/null
    (which only root could replace)."""
    try:
        os.mknod(folder / "device", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        return "device"
    except (OSError, AttributeError):
        return "/dev/null"


def test_a_device_is_never_replaced(tiny_specs, capsys):
    device = _device(tiny_specs)
    message = error_of(capsys, search("--out", device))
    assert message == f"--out: cannot write '{device}': not a regular file (a device, FIFO or socket)"
    assert Path(device).is_char_device()


def test_a_fifo_is_refused_without_blocking(tiny_specs, capsys):
    os.mkfifo(tiny_specs / "pipe.csv")
    assert "not a regular file" in error_of(capsys, search("--out", "pipe.csv"))


def test_a_folder_is_refused(tiny_specs, capsys):
    (tiny_specs / "folder").mkdir()
    assert error_of(capsys, search("--out", "folder")) == "--out: cannot write 'folder': Is a directory"


@pytest.mark.parametrize("out,message", [
    ("", "--out: empty file name"),
    ("   ", "--out: empty file name"),
    ("newdir/", "--out: 'newdir/' names a folder; give a file name inside it"),
    (".", "--out: '.' names a folder; give a file name inside it"),
    ("a/..", "--out: 'a/..' names a folder; give a file name inside it"),
])
def test_names_that_cannot_be_files(tiny_specs, capsys, out, message):
    assert error_of(capsys, search("--out", out)) == message
    assert not (tiny_specs / "newdir").exists() and not (tiny_specs / "results").exists()


@pytest.mark.parametrize("prefix", ["", "dir/", "."])
def test_out_prefix_that_cannot_be_a_name(tiny_specs, capsys, prefix):
    assert error_of(capsys, pareto("--out-prefix", prefix)).startswith("--out-prefix: ")
    assert files(tiny_specs) == ["cluster.yaml", "model.yaml", "tiny.profile.csv"]


def test_a_missing_parent_folder_is_created(tiny_specs, capsys):
    """README: a missing folder of --out / --out-prefix is created (as mkdir -p)."""
    assert main(search("--out", "new/deeper/plans.csv")) == 0
    assert (tiny_specs / "new" / "deeper" / "plans.csv").is_file()


def test_the_target_is_checked_before_the_work(tiny_specs, capsys, monkeypatch):
    """A refused --out costs no search: the library is never called."""
    import fasop.search.engine

    monkeypatch.setattr(fasop.search.engine, "search", lambda *a, **k: pytest.fail("searched"))
    (tiny_specs / "link.csv").symlink_to("x.csv")
    error_of(capsys, search("--out", "link.csv"))


def test_a_new_file_under_a_folder_it_cannot_be_made_in_is_refused_before_the_work(tiny_specs, capsys, monkeypatch):
    """The nearest existing folder above a new --out must be a folder this user may write in: a file in
    the way, or no write permission, is refused before any search (not after it, at the write)."""
    import fasop.search.engine

    monkeypatch.setattr(fasop.search.engine, "search", lambda *a, **k: pytest.fail("searched"))
    (tiny_specs / "plain").write_text("x")
    assert "cannot write" in error_of(capsys, search("--out", "plain/deeper/plans.csv"))
    locked = tiny_specs / "locked"
    locked.mkdir()
    monkeypatch.setattr(os, "access", lambda path, mode: os.path.abspath(path) != str(locked.resolve()))
    assert "Permission denied in" in error_of(capsys, search("--out", "locked/new/plans.csv"))


def test_pareto_writes_csv_png_and_svg_or_none(tiny_specs, capsys):
    """All or none: when the SVG cannot be written (its name is taken by a folder), neither the
    CSV nor the PNG is left behind; with the way clear, all three are written."""
    (tiny_specs / "p_pareto.svg").mkdir()
    assert "p_pareto.svg" in error_of(capsys, pareto("--out-prefix", "p"))
    assert files(tiny_specs) == ["cluster.yaml", "model.yaml", "tiny.profile.csv"]
    (tiny_specs / "p_pareto.svg").rmdir()
    assert main(pareto("--out-prefix", "p")) == 0
    assert {"p_pareto.csv", "p_pareto.png", "p_pareto.svg"} <= set(files(tiny_specs))


def test_write_files_leaves_nothing_when_a_rename_fails(tmp_path, monkeypatch):
    """A failure between the renames: the ones already renamed are removed, no temporary file."""
    real = os.replace
    calls = []

    def failing_second(src, dst):
        calls.append(dst)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        real(src, dst)

    monkeypatch.setattr(os, "replace", failing_second)
    with pytest.raises(FasopError, match="No space left on device"):
        write_files([(tmp_path / "a.csv", "a\n"), (tmp_path / "b.png", b"b")], "--out-prefix")
    assert list(tmp_path.iterdir()) == []


def test_write_files_is_atomic_and_keeps_the_umask(tmp_path):
    (tmp_path / "a.csv").write_text("old\n")
    write_files([(tmp_path / "a.csv", "new\n")], "--out")
    assert (tmp_path / "a.csv").read_text() == "new\n"
    assert [p.name for p in tmp_path.iterdir()] == ["a.csv"]
    mask = os.umask(0)
    os.umask(mask)
    assert (tmp_path / "a.csv").stat().st_mode & 0o777 == 0o666 & ~mask


def test_a_signal_during_the_renames_waits_until_all_are_done(tmp_path):
    """SIGTERM arriving while the files of a result are renamed into place is held until the
    last rename: the result is whole (the signal is then handled as usual)."""
    import signal

    import fasop.report.output as output

    real, seen = os.replace, []

    def replace_and_signal(src, dst):
        real(src, dst)
        seen.append(Path(dst).name)
        if len(seen) == 1:
            os.kill(os.getpid(), signal.SIGTERM)

    def on_term(signum, frame):
        seen.append("SIGTERM")

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        output.os.replace = replace_and_signal
        write_files([(tmp_path / "a.csv", "a\n"), (tmp_path / "a.png", b"png"), (tmp_path / "a.svg", b"svg")], "--x")
    finally:
        output.os.replace = real
        signal.signal(signal.SIGTERM, previous)
    assert seen == ["a.csv", "a.png", "a.svg", "SIGTERM"]


def test_csv_text_writes_each_rows_cells_in_column_order():
    """Hand-written: columns in the given order, a missing cell empty, floats as repr (the
    shortest text that reads back as the same float), booleans as True/False, text quoted only
    where CSV needs it; a key that is not a column is an error, never a silently dropped cell."""
    from fasop.report.results import csv_text

    rows = [{"b": 0.1, "a": 1, "c": "x,y"}, {"a": True, "b": 1e-20}, {"c": 'say "hi"', "a": 2.5, "b": False}]
    assert csv_text(["a", "b", "c"], rows) == 'a,b,c\n1,0.1,"x,y"\nTrue,1e-20,\n2.5,False,"say ""hi"""\n'
    assert csv_text(["a"], [{"a": 1 / 3}]) == "a\n0.3333333333333333\n"
    assert csv_text([], [{}, {}]) == "\n\n\n"  # no columns: empty lines, as csv writes an empty row
    with pytest.raises(ValueError, match="'d'"):
        csv_text(["a", "b"], [{"a": 1, "d": 2}])
    with pytest.raises(ValueError, match="'d'"):
        csv_text(["a", "b"], [{"a": 1, "b": 2, "d": 2}])
