"""Bad input never produces a traceback or a partial result.

Every kind of bad input to `fasop search` gives exactly one line on stderr that names the file
(or the option), the key and the offending value; exit status 2; nothing on stdout; and no
output file and no stray temporary file. The CLI is driven through `main(argv)`; spec files are
small texts built here (a valid cluster, model and profile) with one thing corrupted per test, so
these tests do not depend on the shipped specs. A last test loads every shipped spec.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import REPO
from fasop.cli.command import main
from fasop.specs.files import shipped_folder
from fasop.specs.load import load_cluster, load_model

CLUSTER = """\
estimator: fasop-2024
links:
  p2p_inter_node_divisor: 1.05
  p2p_intra_node_divisor: 3.5
memory:
  overhead_factor: 1.1
node_types:
  a100:
    instance: big.box
    gpu: A100
    gpus_per_node: 2
    memory_limit_gib: 40
    intra_node_gbit_per_s: 1600
    inter_node_gbit_per_s: 100
    intra_node_shared: false
    usd_per_hour: 30
  a10:
    instance: small.box
    gpu: A10
    gpus_per_node: 2
    memory_limit_gib: 20
    intra_node_gbit_per_s: 128
    inter_node_gbit_per_s: 40
    intra_node_shared: true
    usd_per_hour: 8
"""

MODEL = """\
name: tiny
architecture:
  hidden_size: 64
  num_hidden_layers: 2
  num_attention_heads: 4
  vocab_size: 100
  tie_word_embeddings: true
training:
  sequence_length: 16
  global_batch_size: 4
layers:
  - {kind: embedding}
  - {kind: transformer, count: 2}
  - {kind: head}
profile:
  file: tiny.profile.csv
  fwd_bwd_factor: 3
  microbatch_scaling:
    A10:
      embedding: {points: {1: 1.0}, beyond: proportional}
      transformer: {points: {1: 1.0}, beyond: proportional}
      head: {points: {1: 1.0}, beyond: proportional}
    A100:
      embedding: {points: {1: 1.0}, beyond: proportional}
      transformer: {points: {1: 1.0}, beyond: proportional}
      head: {points: {1: 1.0}, beyond: proportional}
"""

PROFILE_ROWS = [f"{gpu},1,{layer},{seconds}" for gpu, scale in (("A100", 1), ("A10", 2))
                for layer, seconds in enumerate((0.001 * scale, 0.004 * scale, 0.004 * scale, 0.002 * scale))]
PROFILE = "gpu,tp,layer_index,seconds\n" + "\n".join(PROFILE_ROWS) + "\n"


def line_of(text: str, part: str) -> int:
    """The line number (from 1) where `part` starts in `text`."""
    return text[:text.index(part)].count("\n") + 1


def corrupt(text: str, old: str, new: str) -> str:
    """`text` with its one occurrence of `old` replaced (fails loudly if the fixture drifts)."""
    assert text.count(old) == 1, f"fixture has {text.count(old)} occurrences of {old!r}"
    return text.replace(old, new)


class Run:
    """Spec files in a temporary folder and the argv of a search over them."""

    def __init__(self, tmp_path: Path, cluster: str = CLUSTER, model: str = MODEL, profile: str = PROFILE):
        self.cluster, self.model, self.profile = tmp_path / "cluster.yaml", tmp_path / "model.yaml", tmp_path / "tiny.profile.csv"
        self.cluster.write_text(cluster)
        self.model.write_text(model)
        self.profile.write_text(profile)
        self.results = tmp_path / "results"
        self.out = self.results / "out.csv"

    def argv(self, nodes: str = "a10=2", *extra: str, model: str | None = None, cluster: str | None = None) -> list[str]:
        return ["search", "--model", model or str(self.model), "--cluster", cluster or str(self.cluster),
                "--nodes", nodes, "--out", str(self.out), "--no-progress", *extra]


def fails(run: Run, capsys, argv: list[str]) -> str:
    """Assert the bad-input contract for `argv`; return the message after 'fasop: error: '."""
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("fasop: error: ") and err.endswith("\n") and err.count("\n") == 1, err
    assert not run.out.exists()
    assert not run.results.exists() or list(run.results.iterdir()) == []  # no stray temp file
    return err.removeprefix("fasop: error: ").rstrip("\n")


def test_the_uncorrupted_fixture_runs(tmp_path, capsys):
    """Protects the other tests' meaning: the fixture is valid, so each failure below comes from
    its one corruption. A successful run writes the CSV and nothing else in its folder."""
    run = Run(tmp_path)
    assert main(run.argv("a10=2")) == 0
    assert main(run.argv("a100=1,a10=1", "--heterogeneous")) == 0
    assert [p.name for p in run.results.iterdir()] == ["out.csv"]
    assert "wrote" in capsys.readouterr().out


# ----------------------------------------------------------------------------- YAML syntax and keys
@pytest.mark.parametrize("which", ["cluster", "model"])
def test_malformed_yaml(tmp_path, capsys, which):
    """A syntax error names the file and the line, in one line (no PyYAML multi-line dump)."""
    broken = {"cluster": corrupt(CLUSTER, "  p2p_intra_node_divisor: 3.5\n", "  p2p_intra_node_divisor: [3.5\n"),
              "model": corrupt(MODEL, "  vocab_size: 100\n", "  vocab_size: {100\n")}[which]
    run = Run(tmp_path, **{which: broken})
    message = fails(run, capsys, run.argv())
    assert message.startswith(f"{getattr(run, which)}: malformed YAML at line ")


@pytest.mark.parametrize("which,old,new,key", [
    ("cluster", "estimator: fasop-2024\n", "estimator: fasop-2024\ncolour: red\n", "colour"),
    ("cluster", "    usd_per_hour: 8\n", "    usd_per_hourr: 8\n", "node_types.a10.usd_per_hourr"),
    ("cluster", "  overhead_factor: 1.1\n", "  overhead_factor: 1.1\n  headroom: 2\n", "memory.headroom"),
    ("model", "name: tiny\n", "name: tiny\nnotes: hello\n", "notes"),
    ("model", "  hidden_size: 64\n", "  hidden_sise: 64\n", "architecture.hidden_sise"),
    ("model", "  - {kind: head}\n", "  - {kind: head, cnt: 1}\n", "layers[2].cnt"),
    ("model", "      head: {points: {1: 1.0}, beyond: proportional}\n    A100:",
     "      head: {points: {1: 1.0}, beyond: proportional, past: 2}\n    A100:", "profile.microbatch_scaling.A10.head.past"),
])
def test_unknown_key(tmp_path, capsys, which, old, new, key):
    """An unknown key is named with its full path, top level or nested; a misspelt required key
    (usd_per_hourr) is reported as the unknown key it is, not as the missing one it hides."""
    run = Run(tmp_path, **{which: corrupt({"cluster": CLUSTER, "model": MODEL}[which], old, new)})
    message = fails(run, capsys, run.argv())
    assert message.startswith(f"{getattr(run, which)}: {key}: unknown key (known: ")


def test_unknown_key_lists_the_known_ones(tmp_path, capsys):
    """The message offers the right spelling."""
    run = Run(tmp_path, cluster=corrupt(CLUSTER, "    usd_per_hour: 8\n", "    usd_per_hourr: 8\n"))
    assert "usd_per_hour," in fails(run, capsys, run.argv())


@pytest.mark.parametrize("which,old,key", [
    ("cluster", "    instance: small.box\n", "node_types.a10.instance"),
    ("cluster", "memory:\n  overhead_factor: 1.1\n", "memory"),
    ("cluster", "  p2p_intra_node_divisor: 3.5\n", "links.p2p_intra_node_divisor"),
    ("model", "  sequence_length: 16\n", "training.sequence_length"),
    ("model", "  fwd_bwd_factor: 3\n", "profile.fwd_bwd_factor"),
])
def test_missing_required_key(tmp_path, capsys, which, old, key):
    run = Run(tmp_path, **{which: corrupt({"cluster": CLUSTER, "model": MODEL}[which], old, "")})
    assert fails(run, capsys, run.argv()) == f"{getattr(run, which)}: {key}: missing required key"


# ----------------------------------------------------------------------------- values
@pytest.mark.parametrize("which,old,new,expected", [
    ("cluster", "    inter_node_gbit_per_s: 40\n", "    inter_node_gbit_per_s: fast\n",
     "node_types.a10.inter_node_gbit_per_s: must be int or float, got 'fast'"),
    ("cluster", "    usd_per_hour: 8\n", "    usd_per_hour: '8'\n",
     "node_types.a10.usd_per_hour: must be int or float, got '8' (text: write the number without quotes)"),
    ("cluster", "    gpus_per_node: 2\n    memory_limit_gib: 20\n", "    gpus_per_node: true\n    memory_limit_gib: 20\n",
     "node_types.a10.gpus_per_node: must be int, got True"),
    ("cluster", "    intra_node_shared: true\n", "    intra_node_shared: 1\n", "node_types.a10.intra_node_shared: must be bool, got 1"),
    ("model", "  hidden_size: 64\n", '  hidden_size: "64"\n', "architecture.hidden_size: must be int, got '64'"),
    ("model", "  hidden_size: 64\n", "  hidden_size: 64.5\n", "architecture.hidden_size: must be int, got 64.5"),
    ("model", "  global_batch_size: 4\n", "  global_batch_size: false\n", "training.global_batch_size: must be int, got False"),
])
def test_wrong_type(tmp_path, capsys, which, old, new, expected):
    """A string where a number belongs, and a bool where an int belongs (YAML `true` is an int
    subclass in Python: it must not pass as 1)."""
    text = corrupt({"cluster": CLUSTER, "model": MODEL}[which], old, new)
    run = Run(tmp_path, **{which: text})
    assert fails(run, capsys, run.argv()) == f"{getattr(run, which)}: {expected} (line {line_of(text, new)})"


@pytest.mark.parametrize("value,shown", [("1e5", "100000.0"), ("2.5e-3", "0.0025"), ("1E+2", "100.0")])
def test_exponent_numbers_are_numbers(tmp_path, capsys, value, shown):
    """YAML 1.2 floats PyYAML alone reads as text (no point, or an unsigned exponent) are numbers in a spec:
    the price below is read as the number it says, then refused for its range, not as 'must be int or float'."""
    text = corrupt(CLUSTER, "    usd_per_hour: 8\n", f"    usd_per_hour: -{value}\n")
    run = Run(tmp_path, cluster=text)
    assert fails(run, capsys, run.argv()) == (f"{run.cluster}: node_types.a10.usd_per_hour: must be >= 0, got -{shown} "
                                              f"(line {line_of(text, 'usd_per_hour: -')})")


@pytest.mark.parametrize("value,shown", [("0", "0"), ("-5", "-5"), ("0.0", "0.0"), (".inf", "inf")])
def test_non_positive_or_infinite_bandwidth(tmp_path, capsys, value, shown):
    """A zero or negative bandwidth would divide by zero or give negative times."""
    new = f"    inter_node_gbit_per_s: {value}\n"
    text = corrupt(CLUSTER, "    inter_node_gbit_per_s: 40\n", new)
    run = Run(tmp_path, cluster=text)
    message = fails(run, capsys, run.argv())
    assert message.startswith(f"{run.cluster}: node_types.a10.inter_node_gbit_per_s: must be ")
    assert message.endswith(f", got {shown} (line {line_of(text, new)})")


def test_negative_price(tmp_path, capsys):
    text = corrupt(CLUSTER, "    usd_per_hour: 8\n", "    usd_per_hour: -1\n")
    run = Run(tmp_path, cluster=text)
    assert fails(run, capsys, run.argv()) == (f"{run.cluster}: node_types.a10.usd_per_hour: must be >= 0, got -1 "
                                              f"(line {line_of(text, 'usd_per_hour: -1')})")


def test_gpu_without_profile(tmp_path, capsys):
    """A node type whose GPU the model never profiled: the error names the model file (where the
    times would have to be added) and the GPU."""
    run = Run(tmp_path, cluster=corrupt(CLUSTER, "    gpu: A10\n", "    gpu: H100\n"))
    message = fails(run, capsys, run.argv())
    assert message.startswith(f"{run.model}: ")
    assert "'H100'" in message


def test_gpu_without_profile_is_fine_when_not_used(tmp_path, capsys):
    """Only the GPUs of the --nodes inventory need a profile: the check is not over-eager."""
    run = Run(tmp_path, cluster=corrupt(CLUSTER, "    gpu: A10\n", "    gpu: H100\n"))
    assert main(run.argv("a100=2")) == 0
    capsys.readouterr()


def test_profile_missing_a_layer(tmp_path, capsys):
    """A profile row dropped: the error names the CSV, the (gpu, tp) table and the missing index."""
    dropped = "A10,1,2,0.008"
    assert dropped in PROFILE_ROWS
    run = Run(tmp_path, profile=corrupt(PROFILE, dropped + "\n", ""))
    assert fails(run, capsys, run.argv()) == (
        f"{run.profile}: A10 tp=1: has 3 layers, the layer list has 4 (missing layer_index 2)")


def test_profile_bad_number(tmp_path, capsys):
    run = Run(tmp_path, profile=corrupt(PROFILE, "A10,1,2,0.008\n", "A10,1,2,-0.008\n"))
    message = fails(run, capsys, run.argv())
    assert message.startswith(f"{run.profile}: line ")
    assert message.endswith("seconds must be a number from 1e-09 to 10000, got '-0.008'")


# ----------------------------------------------------------------------------- command line
def test_unknown_node_type(tmp_path, capsys):
    run = Run(tmp_path)
    message = fails(run, capsys, run.argv("h100=2"))
    assert message == f"--nodes: unknown node type 'h100' in {run.cluster} (known: a100, a10)"


@pytest.mark.parametrize("nodes,item", [("a10=0", "a10=0"), ("a10=-1", "a10=-1"), ("a10=x", "a10=x"),
                                        ("a10", "a10"), ("a10=2,", ""), ("a10=2.5", "a10=2.5")])
def test_bad_node_count(tmp_path, capsys, nodes, item):
    run = Run(tmp_path)
    assert fails(run, capsys, run.argv(nodes)) == f"--nodes: expected TYPE=COUNT with COUNT >= 1, got {item!r}"


def test_node_type_given_twice(tmp_path, capsys):
    run = Run(tmp_path)
    assert fails(run, capsys, run.argv("a10=1,a10=1")) == "--nodes: node type 'a10' given twice"


def test_mixed_nodes_need_heterogeneous(tmp_path, capsys):
    """Mixing node types is an explicit choice; the message says how to make it."""
    run = Run(tmp_path)
    message = fails(run, capsys, run.argv("a100=1,a10=1"))
    assert message.startswith("--nodes mixes node types a100, a10")
    assert "add --heterogeneous" in message


@pytest.mark.parametrize("option,folder", [("model", "model_specs/"), ("cluster", "cluster_specs/")])
def test_unknown_spec_name(tmp_path, capsys, monkeypatch, option, folder):
    monkeypatch.chdir(tmp_path)  # names resolve in ./<folder> first, then fasop's own
    run = Run(tmp_path)
    message = fails(run, capsys, run.argv(**{option: "no-such-spec"}))
    assert message.startswith(f"no-such-spec: no spec named 'no-such-spec' in {folder} (known: ")


def test_spec_path_that_does_not_exist(tmp_path, capsys):
    run = Run(tmp_path)
    missing = str(tmp_path / "nowhere" / "cluster.yaml")
    assert fails(run, capsys, run.argv(cluster=missing)) == f"{missing}: no such file"


def test_profile_file_that_does_not_exist(tmp_path, capsys):
    run = Run(tmp_path, model=corrupt(MODEL, "  file: tiny.profile.csv\n", "  file: gone.profile.csv\n"))
    message = fails(run, capsys, run.argv())
    assert message.startswith(f"{tmp_path / 'gone.profile.csv'}: cannot read profile: ")


@pytest.mark.parametrize("value", ["0", "-3", "ten"])
def test_iterations_must_be_positive(tmp_path, capsys, value):
    """argparse rejects it before any work: SystemExit(2), the option and the value on stderr."""
    run = Run(tmp_path)
    with pytest.raises(SystemExit) as exc:
        main(run.argv("a10=2", "--iterations", value))
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"argument --iterations: expected a positive integer, got '{value}'" in err
    assert not run.results.exists()


def test_out_is_a_folder(tmp_path, capsys):
    """An unwritable --out is reported in one line, and the temporary file is cleaned up."""
    run = Run(tmp_path)
    run.out.mkdir(parents=True)
    assert main(run.argv()) == 2
    captured = capsys.readouterr()
    assert captured.err == f"fasop: error: --out: cannot write {str(run.out)!r}: Is a directory\n"
    assert [p.name for p in run.results.iterdir()] == ["out.csv"] and run.out.is_dir()


# ----------------------------------------------------------------------------- shipped specs
@pytest.mark.parametrize("path", sorted((shipped_folder("cluster_specs")).glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_cluster_loads(path):
    cluster = load_cluster(str(path))
    assert cluster.node_types
    if cluster.analytic is not None:  # a catalog cluster: every GPU is in the catalog (the loader checks)
        return
    # every GPU a FASOP cluster offers is profiled by some shipped model
    models = [load_model(str(p)) for p in sorted((shipped_folder("model_specs")).glob("*.yaml"))]
    for node in cluster.node_types.values():
        assert any(model.profile and model.profile.tp_degrees((node.gpu,)) for model in models), (path.name, node.name)


@pytest.mark.parametrize("path", sorted((shipped_folder("model_specs")).glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_model_loads(path):
    model = load_model(str(path))
    assert model.num_transformer_layers > 0
    assert model.profile is not None or model.architecture is not None  # scored by profile or analytically
    if model.profile is not None:
        assert all(len(times) == len(model.layer_kinds) for times in model.profile.forward_s.values())


def test_shipped_specs_exist():
    """The two parametrised tests above would silently pass on an empty folder."""
    assert len(list((shipped_folder("cluster_specs")).glob("*.yaml"))) >= 1
    assert len(list((shipped_folder("model_specs")).glob("*.yaml"))) >= 1


# MODEL as an encoder-decoder: an encoder of 3 entries (embedding, 2 encoders), a decoder of 2
ENCODER_DECODER = (MODEL.replace("  tie_word_embeddings: true", "  num_decoder_layers: 1\n  tie_word_embeddings: false")
                   .replace("""  - {kind: embedding}
  - {kind: transformer, count: 2}
  - {kind: head}""", """  - {kind: embedding, segment: encoder}
  - {kind: encoder, count: 2, segment: encoder}
  - {kind: embedding, segment: decoder}
  - {kind: decoder, segment: decoder}""").replace("transformer: {", "encoder: {").replace("head: {", "decoder: {"))


def test_fasop_minmax_refuses_unequal_encoder_decoder_halves(tmp_path, capsys):
    """FASOP's greedy balances the decoder on the encoder's layers, so it needs halves of equal
    length; an encoder of 3 entries and a decoder of 2 is one clear line with fasop-minmax (it was
    a ValueError traceback), and the optimal partitioner, which does not need FASOP's split,
    searches it (it used FASOP's split as a seed and raised the same error)."""
    profile = "gpu,tp,layer_index,seconds\n" + "\n".join(
        f"{gpu},1,{layer},{0.001 * (layer + 1) * scale}" for gpu, scale in (("A100", 1), ("A10", 2))
        for layer in range(5)) + "\n"
    run = Run(tmp_path, model=ENCODER_DECODER, profile=profile)
    message = fails(run, capsys, run.argv("a10=2", "--partitioner", "fasop-minmax"))
    assert message.startswith(f"{run.model}: layers: ") and "3 and 2 entries" in message and "optimal" in message
    assert main(run.argv("a10=2")) == 0
    assert run.out.exists()


def test_an_exponent_shaped_key_stays_a_name(tmp_path):
    """Keys read as YAML 1.1 did: a node type `1e3` is that name, not the number 1000.0 (values take YAML 1.2's
    exponents, test_exponent_numbers_are_numbers); a key that was a number stays one."""
    from fasop.specs.reader import read_yaml
    path = tmp_path / "s.yaml"
    path.write_text("node_types:\n  1e3: {a: 2e5}\n  1.0e+3: {a: 1}\n")
    assert read_yaml(path) == {"node_types": {"1e3": {"a": 200000.0}, 1000.0: {"a": 1}}}
