"""Seeded hostile inputs for fasop's command line (tests/test_fuzz.py runs them).

A case is a folder of files (a cluster spec, a model spec, a profile CSV, maybe odd files) and an
argv; `expect` is "fail" where the input is certainly invalid (exit 2 required) and "any" where it
may be valid (exit 0 with a well-formed result, or exit 2 with one line). Families, as the
issue lists them: every value of both specs replaced by hostile values; lines (keys) deleted;
broken encodings and structures; mutated profile CSVs; hostile flag values (search and pareto);
hostile output paths. Same seed, same cases, in the same order.
"""

from __future__ import annotations

import random
import re

from test_bad_input import CLUSTER, MODEL, PROFILE

SEED = 18
SEARCH = ["search", "--model", "model.yaml", "--cluster", "cluster.yaml", "--nodes", "a10=2", "--out", "out.csv",
          "--no-progress"]
PARETO = ["pareto", "--model", "model.yaml", "--cluster", "cluster.yaml", "--max-nodes", "a100=1,a10=2",
          "--out-prefix", "p", "--no-progress", "--workers", "1"]

HOSTILE_VALUES = [
    "0", "-1", "-0.0", "1", "2", "3", "1.5", "4.0", "1.0e-320", "5.0e-324", "1.0e+308", "1.0e+309", ".inf",
    "-.inf", ".nan", "257", "1025", "16385", "65536", "99999999999999999999", "-99999999999999999999",
    "1" + "0" * 30, "1" + "0" * 5000, "0x10", "0o17", "1_000", "1e6", "true", "false", "null", "~", "''", "'x'",
    "[]", "{}", "[1, 2]", "{a: 1}", "[[[[[[1]]]]]]", "'../../escape'", "/tmp/fasop-fuzz-escape",
    "!!binary aGVsbG8=", "!!python/object/apply:os.system ['true']", "!!set {a}", "!!timestamp 2001-12-14",
    "2001-99-99", "!custom 1", "&anchor 1", "*anchor", '"\\0\\n\\x1b[31m"', "'" + "x" * 100_000 + "'",
    "A100", "a10", "proportional",
]
"""YAML scalars and structures that may replace any value of a spec."""

_KEY_VALUE = re.compile(r"(?P<key>[A-Za-z_0-9]+): (?P<value>[^,{}\[\]\n#][^,{}\n#]*?)(?=\s*(,|}|#|$))", re.M)


def _leaves(text: str) -> list[tuple[int, int]]:
    """(start, end) of every scalar value in `text` (block and flow mappings)."""
    return [(m.start("value"), m.end("value")) for m in _KEY_VALUE.finditer(text)]


def _case(family: str, argv: list[str], expect: str = "any", model: str | bytes = MODEL,
          cluster: str | bytes = CLUSTER, profile: str | bytes = PROFILE, **extra) -> dict:
    files = {"model.yaml": model, "cluster.yaml": cluster, "tiny.profile.csv": profile}
    files.update(extra.pop("files", {}))
    return {"family": family, "argv": argv, "expect": expect, "files": files, **extra}


def value_cases(rng: random.Random, per_leaf: int = 12) -> list[dict]:
    """Every value of the model and cluster specs replaced by `per_leaf` hostile values."""
    cases = []
    for which, text in (("model", MODEL), ("cluster", CLUSTER)):
        for start, end in _leaves(text):
            for value in rng.sample(HOSTILE_VALUES, per_leaf):
                mutated = text[:start] + value + text[end:]
                argv = SEARCH if rng.random() < 0.9 else PARETO
                cases.append(_case(f"value:{which}", list(argv), **{which: mutated}))
    return cases


def deletion_cases(rng: random.Random) -> list[dict]:
    """Each line of each spec deleted (a key, or a parent key whose children then move up)."""
    cases = []
    for which, text in (("model", MODEL), ("cluster", CLUSTER)):
        lines = text.splitlines(keepends=True)
        for i in range(len(lines)):
            cases.append(_case(f"delete:{which}", list(SEARCH), **{which: "".join(lines[:i] + lines[i + 1:])}))
        for start, end in _leaves(text):  # a flow or block key with its value
            line_start = text.rfind("\n", 0, start) + 1
            key_start = text.rfind(" ", line_start, start - 2) + 1 if "{" in text[line_start:start] else line_start
            cases.append(_case(f"delete:{which}", list(SEARCH), **{which: text[:key_start] + text[end:]}))
    return cases


def encoding_cases(rng: random.Random) -> list[dict]:
    """Broken bytes and structures: bad UTF-8, NULs, truncation, deep nesting, aliases, duplicate
    and merge keys, oversized files, odd file types."""
    cases = []
    for which, text in (("model", MODEL), ("cluster", CLUSTER)):
        data = text.encode()
        for bad in (b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\x00", b"\x1b", b"\t", b"\xef\xbb\xbf", b"\r", b"\x85"):
            for _ in range(4):
                at = rng.randrange(len(data))
                cases.append(_case(f"bytes:{which}", list(SEARCH), **{which: data[:at] + bad + data[at:]}))
        for _ in range(15):
            at = rng.randrange(len(data))
            cases.append(_case(f"truncate:{which}", list(SEARCH), **{which: data[:at]}))
        lines = text.splitlines(keepends=True)
        for _ in range(10):  # a line repeated: a duplicate key (or a duplicate list item)
            i = rng.randrange(len(lines))
            cases.append(_case(f"duplicate:{which}", list(SEARCH), **{which: "".join(lines[:i + 1] + lines[i:])}))
        structures = {
            "utf16": text.encode("utf-16"), "bom": b"\xef\xbb\xbf" + data, "crlf": data.replace(b"\n", b"\r\n"),
            "empty": b"", "comment": b"# nothing\n", "list": b"- 1\n- 2\n", "scalar": b"42\n",
            "deep-flow": b"a: " + b"[" * 50_000 + b"]" * 50_000 + b"\n",
            "deep-block": "".join(" " * i + f"k{i}:\n" for i in range(200)).encode(),
            "alias-bomb": _alias_bomb(), "anchor": data + b"extra: &x 1\nmore: *x\n",
            "merge": data + b"base: {a: 1}\nother:\n  <<: {a: 2}\n",
            "huge": data + b"#" + b"x" * (1 << 21) + b"\n",
            "long-line": data + b"notes: '" + b"y" * 500_000 + b"'\n",
            "near-limit-keys": data + "".join(f"k{i}: {i}\n" for i in range(19_000)).encode(),  # ~245 KiB
            "near-limit-list": data + b"x: [" + b",".join([b"1"] * 120_000) + b"]\n",
            "tag": data + b"bad: !!python/name:os.system\n", "tabs": data.replace(b"  ", b"\t", 3),
            "unicode-key": data + "ключ: 1\n".encode(), "newline-key": data + b'"a\\nb": 1\n',
        }
        for name, content in structures.items():
            cases.append(_case(f"structure:{which}:{name}", list(SEARCH), "fail" if name not in ("bom", "crlf")
                               else "any", **{which: content}))
        for kind in ("fifo", "dir", "devzero", "missing", "devnull"):
            argv = [a if a != f"{which}.yaml" else f"odd.{which}.yaml" for a in SEARCH]
            cases.append(_case(f"filetype:{which}:{kind}", argv, "fail", special={f"odd.{which}.yaml": kind}))
    for kind in ("fifo", "dir", "devzero", "missing"):
        model = MODEL.replace("file: tiny.profile.csv", "file: odd.profile.csv")
        cases.append(_case(f"filetype:profile:{kind}", list(SEARCH), "fail", model=model,
                           special={"odd.profile.csv": kind}))
    return cases


def _alias_bomb() -> bytes:
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"a{i}: &a{i} [{','.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 10)]
    return ("\n".join(lines) + "\n").encode()


PROFILE_CELLS = {
    "gpu": ["", " ", "A10\x00", "a10", "H100", "A10 ", "x" * 300],
    "tp": ["0", "-1", "²", "٣", "1.0", "1e3", "2", "99999999999999999999", "", "1025", "0x1"],
    "layer_index": ["-1", "4", "99999999999", "1.5", "", "٣", "3 ", "0"],
    "seconds": ["nan", "inf", "-inf", "1e-320", "-1", "0", "1e308", "abc", "", "1_0", " 0.1 ", "1e-10", "10001",
                "0x1p-3", "٣", "1e4"],
}


def profile_cases(rng: random.Random) -> list[dict]:
    """Profile CSVs mutated: cells replaced, rows dropped or repeated (same or other time),
    columns added or removed, headers changed, broken bytes."""
    header, *rows = PROFILE.splitlines()
    cases = []
    for column, values in PROFILE_CELLS.items():
        k = header.split(",").index(column)
        for value in values:
            for _ in range(2):
                i = rng.randrange(len(rows))
                cells = rows[i].split(",")
                cells[k] = f'"{value}"' if "," in value or '"' in value else value
                mutated = rows[:i] + [",".join(cells)] + rows[i + 1:]
                cases.append(_case(f"profile:cell:{column}", list(SEARCH), profile="\n".join([header, *mutated]) + "\n"))
    for i in range(len(rows)):
        cases.append(_case("profile:drop", list(SEARCH), "fail", profile="\n".join([header, *rows[:i], *rows[i + 1:]]) + "\n"))
        gpu, tp, layer, seconds = rows[i].split(",")
        for twin in (rows[i], f"{gpu},{tp},{layer},{float(seconds) * 2}"):
            cases.append(_case("profile:repeat", list(SEARCH), "fail",
                               profile="\n".join([header, *rows, twin]) + "\n"))
        cases.append(_case("profile:extra-field", list(SEARCH), "fail",
                           profile="\n".join([header, *rows[:i], rows[i] + ",1", *rows[i + 1:]]) + "\n"))
        cases.append(_case("profile:short-row", list(SEARCH), "fail",
                           profile="\n".join([header, *rows[:i], rows[i].rsplit(",", 1)[0], *rows[i + 1:]]) + "\n"))
    for new_header in ("gpu,tp,layer_index", "gpu,tp,layer_index,seconds,extra", "GPU,TP,LAYER_INDEX,SECONDS",
                       "seconds,layer_index,tp,gpu", "", "gpu;tp;layer_index;seconds", "\ufeffgpu,tp,layer_index,seconds"):
        cases.append(_case("profile:header", list(SEARCH), "any" if new_header.startswith("\ufeff") else "fail",
                           profile="\n".join([new_header, *rows]) + "\n"))
    data = PROFILE.encode()
    for bad in (b"\xff", b"\x00", b'"', b"\r", b"\n\n", b",,", b'"\n"'):
        for _ in range(3):
            at = rng.randrange(len(data))
            cases.append(_case("profile:bytes", list(SEARCH), profile=data[:at] + bad + data[at:]))
    cases.append(_case("profile:huge-field", list(SEARCH), "fail", profile=PROFILE + '"' + "z" * 300_000 + '",1,0,1\n'))
    cases.append(_case("profile:huge-file", list(SEARCH), "fail", profile=PROFILE + "#" * (5 << 20) + "\n"))
    many = [f"G{g},{tp},{i},0.001" for g in range(1200) for tp in range(1, 50) for i in range(4)]  # 3.6 MiB
    cases.append(_case("profile:near-limit", list(SEARCH), "fail", profile="\n".join([header, *many]) + "\n"))
    cases.append(_case("profile:empty", list(SEARCH), "fail", profile=""))
    cases.append(_case("profile:header-only", list(SEARCH), "fail", profile=header + "\n"))
    return cases


SEARCH_FLAGS = {
    "--nodes": ["a10=²", "a10=٣", "a10=99999999999999999999", "a10=" + "9" * 5000, "a10=10000000000", "a10=1025",
                "a10=1024", "a10=0", "a10=-1", "a10", "=", ",", "", "a10=1,a10=1", "A10=2", " a10 = 2 ",
                "a100=1,a10=1", "a10=2,", "a10=1.5", "a10=+2", "a10=0002", "h100=1", "a10=2\x1b[31m", "a10=1e3"],
    "--workers": ["0", "-1", "2", "1000", "99999999999999999999", "x", "1e3", "٣", "1_0", " 2 ", "+3"],
    "--top": ["0", "-1", "1", "1000001", "99999999999999999999", "x", "1" + "0" * 5000],
    "--iterations": ["0", "1", "1000000000000001", "99999999999999999999", "x", "-5"],
    "--tokens": ["0", "1", "1000000000000000000001", "99999999999999999999", "x"],
    "--partition-budget": ["0", "1", "1000001", "100000000000000000000", "x", str(2**63)],
    "--show": ["-1", "0", "1000000000000000000000000", "x"],
    "--placements": ["all", "grouped", "cyclic", "none", ""],
    "--partitioner": ["optimal", "fasop-minmax", "best", ""],
    "--model": ["", "nope", "../../etc/passwd", "/dev/zero", "/", "x" * 5000, "model.yml", "."],
    "--cluster": ["", "nope", "/dev/null", "/proc/self/mem", "x" * 300 + ".yaml"],
}
PARETO_FLAGS = {
    "--max-nodes": ["a10=100000", "a10=99999999999999999999", "a10=1025", "a100=200,a10=200", "a10=0", "a100=0,a10=0",
                    "a10=2,a100=x", "a10=²", "", "a100=1,a10=2,a100=1", "a100=100,a10=99"],
    "--min-nodes": ["a10=3", "a10=-1", "h100=1", "a10=99999999999999999999", "a100=1"],
    "--deadline-hours": ["nan", "inf", "-1", "0", "1e308", "1e300", "1e15", "1e16", "1e-300", "x", "5e-324", "1"],
    "--budget-usd": ["nan", "-inf", "-1", "0", "1e308", "1e300", "1e-300", "x", "100"],
    "--tokens": ["0", "1", "1000000000000000000000", "99999999999999999999999"],
    "--workers": ["0", "2", "1000", "99999999999999999999"],
    "--out-prefix": ["", "dir/", ".", "..", "/", "a/b/c", "x" * 5000],
}


def _with_flag(argv: list[str], flag: str, value: str) -> list[str]:
    argv = list(argv)
    if flag in argv:
        argv[argv.index(flag) + 1] = value
    else:
        argv += [flag, value]
    return argv


def flag_cases(rng: random.Random) -> list[dict]:
    """Hostile values of every flag of `fasop search` and `fasop pareto`, one at a time, and
    a few pairs."""
    cases = [_case(f"flag:search:{flag}", _with_flag(SEARCH, flag, value)) for flag, values in SEARCH_FLAGS.items()
             for value in values]
    cases += [_case(f"flag:pareto:{flag}", _with_flag(PARETO, flag, value)) for flag, values in PARETO_FLAGS.items()
              for value in values]
    flags = list(SEARCH_FLAGS)
    for _ in range(40):
        first, second = rng.sample(flags, 2)
        argv = _with_flag(_with_flag(SEARCH, first, rng.choice(SEARCH_FLAGS[first])), second,
                          rng.choice(SEARCH_FLAGS[second]))
        cases.append(_case("flag:search:pair", argv))
    return cases


def output_cases() -> list[dict]:
    """Hostile output targets: empty, folders, links, devices, names from hostile spec names."""
    cases = []
    # devices are made inside the case's folder (fuzz_worker: a null device where allowed): never
    # /dev/null itself, which a regression run as root would replace with a regular file
    for out in ("", "dir/", "results/", ".", "..", "/", "sub/dir/out.csv", "x" * 300 + ".csv", "link.csv",
                "dangling.csv", "device.csv", "fifo.csv", "folder"):
        special = {"link.csv": "link", "dangling.csv": "dangling", "fifo.csv": "fifo", "folder": "dir",
                   "device.csv": "device"}
        expect = "any" if out == "sub/dir/out.csv" else "fail"
        cases.append(_case("output:search", _with_flag(SEARCH, "--out", out), expect,
                           special={out: special[out]} if out in special else {}))
    for name in ("../../escape", "/tmp/fasop-fuzz-abs", "..", ".", "a/b", "-rf", "nul\\0", "x" * 400, "'  '",
                 "../results/../../up", "~root", "$HOME", "con", "ё"):
        model = MODEL.replace("name: tiny", f"name: {name!r}" if name.startswith(("'", "~", "$", "-", ".", "/"))
                              else f"name: '{name}'")
        argv = [a for a in SEARCH if a not in ("--out", "out.csv")]
        cases.append(_case("output:spec-name", argv, model=model, inside="results"))
        pareto = [a for a in PARETO if a not in ("--out-prefix", "p")]
        cases.append(_case("output:spec-name:pareto", pareto, model=model, inside="results"))
    return cases


def combination_cases(rng: random.Random, count: int = 150) -> list[dict]:
    """Two to four values of one spec replaced at once, some lines re-indented: interactions
    between values that are each valid alone (a batch and a layer count, a price and a count)."""
    cases = []
    for _ in range(count):
        which, text = rng.choice((("model", MODEL), ("cluster", CLUSTER)))
        leaves = _leaves(text)
        for start, end in sorted(rng.sample(leaves, rng.randint(2, 4)), reverse=True):
            text = text[:start] + rng.choice(HOSTILE_VALUES[:40]) + text[end:]
        if rng.random() < 0.3:
            lines = text.splitlines(keepends=True)
            i = rng.randrange(len(lines))
            lines[i] = rng.choice(("", " ", "  ", "- ")) + lines[i]
            text = "".join(lines)
        argv = SEARCH if rng.random() < 0.85 else PARETO
        cases.append(_case(f"combination:{which}", list(argv), **{which: text}))
    return cases


def _fixture_output(argv: list[str], written: str) -> str:
    """The file `written` that the command `argv` writes for the fixture's specs, in a scratch folder."""
    import contextlib
    import io
    import os
    import tempfile
    from pathlib import Path

    from fasop.cli.command import main

    with tempfile.TemporaryDirectory() as folder:
        for name, text in (("model.yaml", MODEL), ("cluster.yaml", CLUSTER), ("tiny.profile.csv", PROFILE)):
            (Path(folder) / name).write_text(text)
        here = os.getcwd()
        os.chdir(folder)
        try:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                assert main(list(argv)) == 0
            return (Path(folder) / written).read_text()
        finally:
            os.chdir(here)


def _results_csv() -> str:
    """The CSV `fasop search` writes for the fixture (a10=2)."""
    return _fixture_output(SEARCH, "out.csv")


PLAN_FLAGS = {
    "--rank": ["0", "-1", "2", "99999999999999999999", "x"],
    "--row": ["0", "1", "3", "4", "99999999999999999999"],
    "--tp": ["0", "3", "99999999999999999999"], "--dp": ["0", "7", "99999999999999999999"],
    "--pp": ["0", "2", "5", "99999999999999999999"], "--mbs": ["0", "3", "99999999999999999999"],
    "--partition": ["", "1-1", "4", "2-2", "0-4", "-", "5-99999999999999999999", "1-1-1-1-1-1-1-1-1"],
    "--placement": ["", "a10", "a10-a10", "a10-h100", "-", "a10--a10", "a10-" * 2000 + "a10"],
    "--peak-tflops": ["A10=nan", "A10=inf", "A10=-1", "A10=0", "A10", "=1", "A10=1e308", "A10=125"],
    "--top": ["0", "1", "99999999999999999999"], "--figures": ["", "timeline", "bogus", ","],
    "--out-dir": ["", "figs", "figs/", "out.csv", "r.csv", "a/b/c"], "--out": ["", "x/", "out.csv", "e.txt", "r.csv"],
}
RESULT_CELLS = ["", "nan", "inf", "-1", "0", "1e308", "99999999999999999999", "x", "a10-h100", "1-1-1", "True"]


def plan_cases(rng: random.Random) -> list[dict]:
    """`fasop explain`, `export` and `plot` on a results CSV: hostile flags, and the CSV's
    cells replaced by hostile values (a CSV is a file users edit, too)."""
    results = _results_csv()
    base = {"explain": ["explain", "--from", "r.csv", "--model", "model.yaml", "--cluster", "cluster.yaml"],
            "export": ["export", "--from", "r.csv", "--model", "model.yaml", "--cluster", "cluster.yaml",
                       "--target", "megatron", "--out", "e.txt"],
            "plot": ["plot", "--from", "r.csv", "--model", "model.yaml", "--cluster", "cluster.yaml",
                     "--out-dir", "figs", "--figures", "timeline"]}
    by_flags = ["--placement", "a10-a10", "--tp", "1", "--dp", "2", "--pp", "2", "--mbs", "1"]
    cases = []
    for command, argv in base.items():
        cases.append(_case(f"plan:{command}:valid", list(argv), files={"r.csv": results}))
        for flag, values in PLAN_FLAGS.items():
            for value in values:
                if command != "explain" and flag == "--peak-tflops" or command != "plot" and flag in (
                        "--top", "--figures", "--out-dir") or command != "export" and flag == "--out":
                    continue
                start = argv if flag in ("--rank", "--row", "--peak-tflops", "--top", "--figures", "--out-dir", "--out") \
                    else [a for a in argv[:1]] + argv[3:] + by_flags
                cases.append(_case(f"plan:{command}:{flag}", _with_flag(start, flag, value), files={"r.csv": results}))
    header, *rows = results.splitlines()
    for _ in range(60):
        cells = [row.split(",") for row in rows]
        i, k = rng.randrange(len(cells)), rng.randrange(len(cells[0]))
        cells[i][k] = rng.choice(RESULT_CELLS)
        command = rng.choice(list(base))
        text = "\n".join([header] + [",".join(c) for c in cells]) + "\n"
        cases.append(_case(f"plan:{command}:csv-cell", _with_flag(base[command], "--row", str(i + 1)),
                           files={"r.csv": text}))
    return cases


# ---------------------------------------------------------------------------- surfaces of issue 30, item 9
BIG = "1" + "0" * 5000
VMS_HEADER = "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfo,Price,SpotPrice,Region,AvailabilityZone"
VMS_ROW = "p5.48xlarge,H100,8,192,2048,,98.32,30.0,us-east-1,us-east-1a"


def _shipped(*parts: str) -> str:
    from fasop.specs.files import shipped_folder

    return (shipped_folder(parts[0]).joinpath(*parts[1:])).read_text()


def _pareto_csv() -> str:
    """The CSV `fasop pareto` writes for the fixture (PARETO)."""
    return _fixture_output(PARETO, "p_pareto.csv")


def _drop_column(text: str, column: str) -> str:
    rows = [line.split(",") for line in text.splitlines()]
    k = rows[0].index(column)
    return "\n".join(",".join(r[:k] + r[k + 1:]) for r in rows) + "\n"


def hf_config_cases() -> list[dict]:
    """HuggingFace config.json files with hostile values (the analytic estimator on a catalog cluster)."""
    base = _shipped("model_specs", "hf", "llama-3-8b.json")
    argv = ["search", "--model", "c.json", "--cluster", "aws", "--nodes", "p5=1", "--top", "1", "--out", "o.csv",
            "--no-progress"]
    values = {"vocab_size": [BIG, "-" + BIG, "1e308", "NaN", "Infinity", "-1", "0", '"x"', "[]", "true", "1.5"],
              "hidden_size": [BIG, "1e308", "0", "null", "3"], "num_hidden_layers": [BIG, "100000", "0", "-3"],
              "num_attention_heads": ["0", "7", BIG], "intermediate_size": ["-1", BIG]}
    cases = []
    for key, hostile in values.items():
        for value in hostile:
            text = re.sub(rf'"{key}": [^,}}]+', f'"{key}": {value}', base, count=1)
            cases.append(_case(f"surface:hf:{key}", list(argv), "fail", files={"c.json": text}))
    for name, text in (("deep", "[" * 100_000), ("list", "[1]"), ("empty", ""), ("bom-json", "\ufeff{"),
                       ("huge-string", '{"model_type": "' + "x" * 3_000_000 + '"}'), ("dup", base[:-2] + ', "vocab_size": 1}')):
        cases.append(_case(f"surface:hf:{name}", list(argv), "fail", files={"c.json": text}))
    return cases


def validate_cases() -> list[dict]:
    """`fasop validate` CSVs: rows with fields missing or extra, duplicate columns, huge and
    contradicting values."""
    header, *rows = _shipped_validation().splitlines()
    row = rows[0]
    argv = ["validate", "v.csv", "--out", "pred.csv"]
    cells = row.split(",")
    variants = {"extra-field": row + ",1", "missing-field": ",".join(cells[:-1]), "time-1e308": ",".join(cells[:-1] + ["1e308"]),
                "time-neg": ",".join(cells[:-1] + ["-1"]), "time-nan": ",".join(cells[:-1] + ["nan"]),
                "big-int": row.replace(",6144,", f",{BIG},", 1), "gpus-contradict": row.replace(",8,8,8,1,1,", ",16,8,8,1,1,", 1),
                "tp-contradict": row.replace(",8,8,8,1,1,", ",8,8,3,1,1,", 1), "nul": row.replace(",", "\x00,", 1)}
    cases = [_case(f"surface:validate:{name}", list(argv), "any" if name == "nul" else "fail",  # NUL: in a name
                   files={"v.csv": header + "\n" + text + "\n"}) for name, text in variants.items()]
    cases.append(_case("surface:validate:dup-header", list(argv), "fail",
                       files={"v.csv": header + ",name\n" + row + ",x\n"}))
    cases.append(_case("surface:validate:valid", list(argv), "any", files={"v.csv": header + "\n" + row + "\n"}))
    return cases


def _shipped_validation() -> str:
    from pathlib import Path

    return (Path(__file__).parent / "data" / "korthikanti2022.csv").read_text()


def from_csv_cases() -> list[dict]:
    """Results and Pareto CSVs given to explain / plot / export --from with fields missing or
    extra, a column dropped (plot of a Pareto CSV without step_time_s), a hostile file name."""
    results, pareto = _results_csv(), _pareto_csv()
    header, *rows = results.splitlines()
    cases = []
    for command, tail in (("explain", []), ("export", ["--target", "hostfile", "--out", "e.txt"]),
                          ("plot", ["--out-dir", "figs", "--figures", "timeline"])):
        argv = [command, "--from", "r.csv", "--model", "model.yaml", "--cluster", "cluster.yaml", *tail]
        for name, text in (("missing-field", header + "\n" + rows[0].rsplit(",", 2)[0] + "\n"),
                           ("extra-field", header + "\n" + rows[0] + ",x,y\n"),
                           ("no-step-time", _drop_column(results, "step_time_s")),
                           ("no-placement", _drop_column(results, "node_placement")),
                           ("header-only", header + "\n")):
            # a search CSV without step_time_s is re-estimated from the specs: valid
            cases.append(_case(f"surface:from:{command}:{name}", list(argv), "any" if name == "no-step-time" else "fail",
                               files={"r.csv": text}))
        cases.append(_case(f"surface:from:{command}:pareto", list(argv), files={"r.csv": pareto}))
    for column in ("step_time_s", "is_knee", "status", "node_placement"):
        argv = ["plot", "--from", "r.csv", "--model", "model.yaml", "--cluster", "cluster.yaml", "--out-dir", "figs"]
        cases.append(_case(f"surface:from:plot:pareto-without-{column}", argv, files={"r.csv": _drop_column(pareto, column)}))
    return cases


def checkpoint_cases() -> list[dict]:
    """`pareto --resume` with crafted checkpoints: a pickle that would write a file, truncated,
    foreign, deep, huge numbers, a folder, a dangling link."""
    import base64
    import pickle

    class Payload:
        def __reduce__(self):
            return (open, ("pwned.txt", "w"))

    argv = list(PARETO) + ["--resume"]
    blob = base64.b64encode(pickle.dumps(Payload())).decode()
    head = '{"fasop_checkpoint": 2, "fingerprint": "x"}\n'
    contents = {"pickle-v1": '{"fasop_checkpoint": 1, "fingerprint": "x"}\n{"index": 0, "cutoff": null, "result": "'
                             + blob + '"}\n', "raw-pickle": pickle.dumps(Payload()), "truncated": head[:20],
                "foreign": "name,value\n1,2\n", "deep": head + "[" * 200_000 + "\n", "big-int": head + BIG + "\n",
                "empty": "", "binary": bytes(range(256)) * 100, "header-only-other": head}
    cases = [_case(f"surface:checkpoint:{name}", list(argv), "fail", files={"p_pareto.checkpoint": text})
             for name, text in contents.items()]
    for kind in ("dir", "dangling", "fifo", "devzero"):
        cases.append(_case(f"surface:checkpoint:{kind}", list(argv), "fail", special={"p_pareto.checkpoint": kind}))
    return cases


def vms_cases() -> list[dict]:
    """`fasop prices --from vms.csv` with hostile prices, fields, regions and dates."""
    argv = ["prices", "--cluster", "aws", "--from", "vms.csv", "--out", "x.yaml"]
    cells = VMS_ROW.split(",")
    bad_rows = {"spot-1e308": VMS_ROW.replace(",30.0,", ",1e308,"), "price-nan": VMS_ROW.replace(",98.32,", ",nan,"),
                "price-neg": VMS_ROW.replace(",98.32,", ",-1,"), "price-big": VMS_ROW.replace(",98.32,", f",{BIG},"),
                "extra-field": VMS_ROW + ",x", "missing-field": ",".join(cells[:5])}
    cases = [_case(f"surface:vms:{name}", list(argv), "fail", files={"vms.csv": VMS_HEADER + "\n" + row + "\n"})
             for name, row in bad_rows.items()]
    good = {"vms.csv": VMS_HEADER + "\n" + VMS_ROW + "\n"}
    for flag, value in (("--region", "us-eats-1"), ("--price-date", "9999-99"), ("--price-date", "9999-12-31"),
                        ("--price-date", "2024-02-30"), ("--price-date", "2024-13"), ("--price-date", BIG)):
        cases.append(_case(f"surface:vms:{flag}", argv + [flag, value], "fail", files=good))
    return cases


def catalog_cluster_cases() -> list[dict]:
    """Catalog (analytic) cluster specs with hostile values."""
    base = _shipped("cluster_specs", "aws.yaml")
    argv = ["search", "--model", "llama-3-8b", "--cluster", "c.yaml", "--nodes", "p5=1", "--top", "1", "--out", "o.csv",
            "--no-progress", "--spot"]
    mutations = {"spot-1e308": ("spot_usd_per_hour: 14.246", "spot_usd_per_hour: 1e308"),
                 "spot-neg": ("spot_usd_per_hour: 14.246", "spot_usd_per_hour: -1"),
                 "price-inf": ("usd_per_hour: 55.04", "usd_per_hour: .inf"),
                 "gpu-unknown": ("gpu: H100-SXM", "gpu: H999"), "gpu-formula": ("gpu: H100-SXM", "gpu: '=1+1'"),
                 "gpus-big": ("gpus_per_node: 8\n    inter_node_gbit_per_s: 3200 # [MLE-net] EFA v2",
                              f"gpus_per_node: {BIG}\n    inter_node_gbit_per_s: 3200 # [MLE-net] EFA v2"),
                 "bw-zero": ("inter_node_gbit_per_s: 3200 # [MLE-net] EFA v2", "inter_node_gbit_per_s: 0 # x"),
                 "date-bad": ("price_date: 2025-06", "price_date: 9999-99"),
                 "estimator-bad": ("estimator: analytic", "estimator: pickle")}
    return [_case(f"surface:catalog:{name}", list(argv), "fail", files={"c.yaml": base.replace(old, new, 1)})
            for name, (old, new) in mutations.items()]


def recipe_cases() -> list[dict]:
    """Hostile recipe flags of the analytic estimator."""
    argv = ["search", "--model", "llama-3-8b", "--cluster", "aws", "--nodes", "p4d=1", "--top", "1", "--out", "o.csv",
            "--no-progress"]
    flags = {"--recompute": ["bogus", ",", "none,none,none," * 100, BIG], "--zero": ["7", "-1", BIG, "1.5"],
             "--virtual-stages": ["0", "65", BIG, "3"], "--precision": ["fp4", "", "fp8,fp8" * 50],
             "--sequence-parallel": ["maybe", ""], "--seq-len": ["0", BIG], "--global-batch-size": ["0", BIG]}
    return [_case(f"surface:recipe:{flag}", argv + [flag, value], "fail") for flag, values in flags.items()
            for value in values]


def surface_cases() -> list[dict]:
    return (hf_config_cases() + validate_cases() + from_csv_cases() + checkpoint_cases() + vms_cases()
            + catalog_cluster_cases() + recipe_cases())


def all_cases() -> list[dict]:
    rng = random.Random(SEED)
    cases = (value_cases(rng) + deletion_cases(rng) + encoding_cases(rng) + profile_cases(rng) + flag_cases(rng)
             + output_cases() + combination_cases(rng) + plan_cases(rng) + surface_cases())
    for number, case in enumerate(cases):
        case["id"] = number
    return cases
