"""fasop explain / plot on the analytic estimator's rows (llama-3-8b on AWS p5 + g6): the
timeline is the analytic estimator's own 1F1B schedule with each boundary's sends, the step
time's terms add up, memory parts sum to the stage memory, the row's recipe is re-estimated."""

from __future__ import annotations

import csv
import json

import pytest

from fasop.cli.command import main
from fasop.cli.plan import estimator_for
from fasop.plans.rowplan import plan_of_row
from fasop.report.explain import explain_with_timeline
from fasop.specs.load import load_cluster, load_model
from fasop.specs.types import GIB


@pytest.fixture(scope="module")
def searched(tmp_path_factory):
    out = tmp_path_factory.mktemp("explain_analytic") / "llama.csv"
    assert main(["search", "--model", "llama-3-8b", "--cluster", "aws", "--nodes", "p5=1,g6=1", "--heterogeneous",
                 "--recompute", "selective,full", "--zero", "0,1", "--virtual-stages", "1,2",
                 "--out", str(out), "--show", "0", "--no-progress"]) == 0
    model, cluster = load_model("llama-3-8b"), load_cluster("aws")
    return model, cluster, list(csv.DictReader(open(out))), out


def _explained(model, cluster, row, k):
    rp = plan_of_row(row, f"row {k}", model, cluster)
    return (rp, *explain_with_timeline(rp, model, cluster, estimator_for(rp, model, cluster)))


def _plain(rows, fits=True, pp_min=2):
    """Rows of non-interleaved plans with pp >= pp_min (that fit, if asked)."""
    return [(k, r) for k, r in enumerate(rows, 1) if r["virtual_stages"] == "1" and int(r["pp"]) >= pp_min
            and (r["is_oom"] == "False" or not fits)]


def test_rows_reestimate_with_their_own_recipe(searched):
    model, cluster, rows, _ = searched
    chosen = _plain(rows)[:6] + [(k, r) for k, r in enumerate(rows, 1) if r["recompute"] == "full"][:3] \
        + [(k, r) for k, r in enumerate(rows, 1) if r["zero"] == "0"][:3]
    assert any(r["recompute"] == "full" for _, r in chosen) and any(r["zero"] == "0" for _, r in chosen)
    for k, row in chosen:
        _, x, _ = _explained(model, cluster, row, k)
        assert x.step_time_s == pytest.approx(float(row["step_time_s"]), rel=5e-6)  # the row's recipe (CSV: 6 digits)
        assert x.pipeline_time_s == pytest.approx(float(row["pipeline_time_s"]), rel=5e-6)


def test_the_default_recipe_would_give_another_step_time(searched):
    """The test above can fail: a full-recompute row under another recipe (selective, the search's
    first --recompute value) differs."""
    from fasop.estimators import make_estimator
    from fasop.cli.plan import inventory_of

    model, cluster, rows, _ = searched
    k, row = next((k, r) for k, r in enumerate(rows, 1) if r["recompute"] == "full" and r["is_oom"] == "False")
    rp = plan_of_row(row, f"row {k}", model, cluster)
    default = make_estimator(model, cluster, inventory_of(rp), partitioner="optimal", recompute=("selective",))
    x, _ = explain_with_timeline(rp, model, cluster, default)  # the row's split, the other recipe
    assert x.step_time_s != float(row["step_time_s"])


def test_a_given_split_is_estimated_as_given(searched):
    """estimate_split keeps the split it is given: the estimator's own split gives its own estimate
    back; moving one block between two stages of the same GPU moves one block's compute from one
    stage's fwd+bwd per micro-batch to the other's."""
    model, cluster, rows, _ = searched
    checked = 0
    for k, row in _plain(rows)[:40]:
        rp = plan_of_row(row, f"row {k}", model, cluster)
        est = estimator_for(rp, model, cluster)
        own = est.estimate(rp.plan)
        again = est.estimate_split(rp.plan, own.partition)
        assert again.partition == own.partition and again.step_time_s == own.step_time_s
        parts, gpus = list(own.partition), [n.name for n in own.stage_node_types]
        for i in range(len(parts) - 1):
            if gpus[i] != gpus[i + 1] or parts[i] < 3:
                continue
            moved = parts.copy()
            moved[i] -= 1
            moved[i + 1] += 1
            e = est.estimate_split(rp.plan, tuple(moved))
            assert e.partition == tuple(moved)
            less = own.stage_compute_s[i] - e.stage_compute_s[i]
            assert less > 0 and e.stage_compute_s[i + 1] - own.stage_compute_s[i + 1] == pytest.approx(less, rel=1e-9)
            checked += 1
    assert checked > 0


def test_explain_at_another_sequence_length_keeps_the_rows_split(searched, capsys):
    """--seq-len other than the search's: the row's plan and split at that length (before, refused:
    the analytic estimator would have split it otherwise); a split without the embedding's stage
    entry is refused naming --partition, exit 2."""
    model, cluster, rows, out = searched
    k, row = _plain(rows)[0]
    assert main(["explain", "--from", str(out), "--row", str(k), "--model", "llama-3-8b", "--cluster", "aws",
                 "--seq-len", "512"]) == 0
    assert "sequence 512" in capsys.readouterr().out
    at_512, as_searched = json.loads(_json(out, k, capsys, "--seq-len", "512")), json.loads(_json(out, k, capsys))
    assert at_512["sequence_length"] == 512 != as_searched["sequence_length"]
    assert [s["layers"] for s in at_512["stages"]] == [s["layers"] for s in as_searched["stages"]]
    assert at_512["step_time_s"] < as_searched["step_time_s"]
    pp = int(row["pp"])
    placement = row["node_placement"]
    bad = "-".join(["0"] + ["34" if i == pp - 1 else "0" for i in range(1, pp)])
    assert main(["explain", "--model", "llama-3-8b", "--cluster", "aws", "--placement", placement,
                 "--tp", row["tp"], "--dp", row["dp"], "--pp", row["pp"], "--mbs", row["mbs"],
                 "--partition", bad]) == 2
    err = capsys.readouterr().err
    assert f"partition {bad}: not" in err and "Traceback" not in err


def _json(out, k, capsys, *more):
    capsys.readouterr()
    assert main(["explain", "--from", str(out), "--row", str(k), "--model", "llama-3-8b", "--cluster", "aws",
                 "--json", *more]) == 0
    return capsys.readouterr().out


def test_step_time_is_the_sum_of_its_parts(searched):
    model, cluster, rows, _ = searched
    for k, row in _plain(rows, fits=False, pp_min=1)[:12]:
        _, x, _ = _explained(model, cluster, row, k)
        names = [name for name, _ in x.step_parts]
        assert names[1:] == ["DP sync not overlapped", "embedding all-reduce", "optimizer step"]
        assert sum(v for _, v in x.step_parts) == pytest.approx(x.step_time_s, rel=1e-12)
        assert all(v >= 0 for _, v in x.step_parts)
        assert x.step_parts[0][0] == f"stage {x.last_stage}'s end"
        # the stage setting the step ends with the pipeline's closed form (stage 0) or earlier
        assert x.step_parts[0][1] <= x.pipeline_time_s + 1e-12


def test_stage_time_is_compute_plus_p2p_plus_idle_on_the_timeline(searched):
    model, cluster, rows, _ = searched
    for k, row in _plain(rows)[:40]:
        rp, x, tl = _explained(model, cluster, row, k)
        m, pp = x.num_microbatches, rp.plan.pp
        for s in x.stages:
            assert s.computing_s == pytest.approx(m * s.compute_s, rel=1e-9)
            assert s.computing_s + s.sending_s + s.idle_s == pytest.approx(s.end_s, rel=1e-9)
            assert s.sending_s >= 0 and s.idle_s >= 0
        # the Gantt: pp x m x 2 compute boxes; its pipeline's right edge = stage 0's end
        boxes = [e for e in tl.events if e.kind in ("fwd", "bwd")]
        assert len(boxes) == pp * m * 2
        assert max(e.end_s for e in tl.events if e.microbatch >= 0) == pytest.approx(tl.pipeline_time_s, rel=1e-12)
        assert x.stages[0].end_s == pytest.approx(tl.pipeline_time_s, rel=1e-9)
        # every boundary's sends are events (not FASOP's ends-only), each the boundary's p2p time
        for i in range(pp - 1):
            fwd = [e.end_s - e.start_s for e in tl.events if e.kind == "send_fwd" and e.stage == i]
            bwd = [e.end_s - e.start_s for e in tl.events if e.kind == "send_bwd" and e.stage == i + 1]
            assert len(fwd) == len(bwd) == m
            assert fwd == pytest.approx([x.stages[i].send_s] * m, rel=1e-12)
            assert bwd == pytest.approx([x.stages[i].send_s] * m, rel=1e-12)
        # the simulated schedule and the estimator's closed form agree within 2 %, a stated gap otherwise
        assert tl.pipeline_time_s == pytest.approx(x.pipeline_time_s, rel=0.02)
        assert (x.schedule_note != "") == (abs(tl.pipeline_time_s - x.pipeline_time_s) > 1e-9 * x.pipeline_time_s)


def test_memory_parts_sum_to_the_stage_memory_and_the_csv(searched):
    model, cluster, rows, _ = searched
    for k, row in _plain(rows, fits=False, pp_min=1)[:12]:
        _, x, _ = _explained(model, cluster, row, k)
        csv_gib = [float(v) for v in row["stage_memory_gib"].split("-")]
        limits = [float(v) for v in row["stage_memory_limit_gib"].split("-")]
        for s, gib, limit in zip(x.stages, csv_gib, limits):
            parts = (s.weights_bytes, s.gradients_bytes, s.optimizer_bytes, s.activations_bytes, s.overhead_bytes)
            assert all(p is not None and p >= 0 for p in parts)
            assert sum(parts) == pytest.approx(s.memory_bytes, rel=1e-12)
            assert s.memory_bytes / GIB == pytest.approx(gib, abs=0.005)  # the CSV rounds to 0.01 GiB
            assert s.limit_bytes / GIB == pytest.approx(limit, abs=0.005)
            # ZeRO-1 shards the optimizer over dp: 12 bytes a parameter / dp against 2 for weights
            zero = int(row["zero"])
            dp = int(row["dp"])
            assert s.optimizer_bytes == pytest.approx(s.weights_bytes * 6 / (dp if zero >= 1 else 1), rel=1e-9)


def test_interleaved_rows_are_explained_without_a_wrong_timeline(searched, tmp_path):
    model, cluster, rows, path = searched
    k, row = next((k, r) for k, r in enumerate(rows, 1) if r["virtual_stages"] == "2")
    _, x, tl = _explained(model, cluster, row, k)
    assert tl is None and "interleaved" in x.schedule_note
    assert x.step_time_s == pytest.approx(float(row["step_time_s"]), rel=5e-6)  # the CSV: 6 significant digits
    assert sum(v for _, v in x.step_parts) == pytest.approx(x.step_time_s, rel=1e-12)
    assert main(["plot", "--from", str(path), "--model", "llama-3-8b", "--cluster", "aws", "--row", str(k),
                 "--out-dir", str(tmp_path)]) == 0
    written = sorted(p.name for p in tmp_path.iterdir())
    assert written and not any("timeline" in n for n in written)


def test_json_of_a_row_without_a_timeline_has_no_bubble(searched, capsys):
    """No timeline, no bubble fraction: `--json` writes null for it (JSON has no nan) instead of
    failing on it."""
    model, cluster, rows, path = searched
    k = next(k for k, r in enumerate(rows, 1) if r["virtual_stages"] == "2")
    capsys.readouterr()
    assert main(["explain", "--from", str(path), "--model", "llama-3-8b", "--cluster", "aws", "--row", str(k),
                 "--json"]) == 0
    x = json.loads(capsys.readouterr().out)
    assert x["bubble_fraction"] is None and "interleaved" in x["schedule_note"]


def test_explain_text_of_an_analytic_row(searched, capsys):
    model, cluster, rows, path = searched
    k, _ = _plain(rows)[0]
    assert main(["explain", "--from", str(path), "--model", "llama-3-8b", "--cluster", "aws", "--row", str(k)]) == 0
    text = capsys.readouterr().out
    assert "overhead" in text and "optimizer step" in text and "DP sync not overlapped" in text
    assert "each boundary's sends" in text


def test_plot_of_a_plain_analytic_row_draws_its_timeline(searched, tmp_path):
    _, _, rows, path = searched
    k, _ = _plain(rows)[0]
    assert main(["plot", "--from", str(path), "--model", "llama-3-8b", "--cluster", "aws", "--row", str(k),
                 "--out-dir", str(tmp_path)]) == 0
    written = sorted(p.name for p in tmp_path.iterdir())
    assert {f"llama_row{k}_{f}.{e}" for f in ("timeline", "breakdown", "memory") for e in ("png", "svg")} <= set(written)
    svg = (tmp_path / f"llama_row{k}_breakdown.svg").read_text()
    assert "optimizer step" in svg and "DP sync not overlapped" in svg


def test_plot_titles_state_the_rows_recipe(searched, tmp_path):
    """The timeline's and memory figure's titles say the row's recipe cells (recompute, ZeRO,
    sequence parallel, virtual stages, precision) under the plan's degrees: two rows of one plan
    with other recipes are told apart in a report."""
    from fasop.report.explain import recipe_words

    _, _, rows, path = searched
    k, row = next((k, r) for k, r in _plain(rows) if r["zero"] == "1")
    assert main(["plot", "--from", str(path), "--model", "llama-3-8b", "--cluster", "aws", "--row", str(k),
                 "--figures", "timeline,memory", "--out-dir", str(tmp_path)]) == 0
    words = recipe_words(row)
    assert words.startswith(f"recompute {row['recompute']}, ZeRO-1") and words.endswith(row["precision"])
    for figure in ("timeline", "memory"):
        assert words in (tmp_path / f"llama_row{k}_{figure}.svg").read_text()
    assert recipe_words({"zero": "3", "dp_replicate": "2", "dp_shard": "8", "virtual_stages": "2",
                         "sequence_parallel": "True", "recompute": "full", "precision": "fp8"}) \
        == "recompute full, ZeRO-3 HSDP (shards of 8 ranks), sequence parallel, 2 virtual stages, fp8"
    assert recipe_words({"zero": "3", "dp_replicate": "4", "dp_shard": "1", "cp": "4"}) == "ZeRO-3 HSDP (shards of 4 ranks)"
    assert recipe_words({"partition": "3-3"}) == ""
